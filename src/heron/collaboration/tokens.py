"""Signed tokens for what people send back: a card's button (`action`) and a mail answer to a
request (`reply`).

A token names what it is for and carries its own expiry, under an HMAC-SHA256 with a key kept in
`<state_dir>/message-keys/` (the receipt key store's format and file modes, its own directory:
a token can never pass for a receipt or a signed decision, nor one purpose for another):

    h1.<purpose>.<key id>.<expiry, Unix seconds>.<payload>.<digest>

`payload` is the base64url of the JSON list of the token's parts (a message id and an action
id; a request id and the approver it was minted for), `digest` the unpadded base64url of the
HMAC over `h1|<purpose>|<key id>|<expiry>|<payload>`. Every character is one a mail Message-ID
and a URL carry unchanged. `verify` tells a forged, a late and a malformed token apart; using a
token once only (reply tokens) is the caller's, with `IdempotencyLedger.use_token`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from heron._support.clock import Clock, RealClock
from heron.errors import HeronError
from heron.turn.receipts import KeyStore, ReceiptKey, ReceiptKeyStore, current_key

__all__ = ["MessageKeyStore", "TokenClaim", "TokenError", "TokenSigner"]

_VERSION: Final = "h1"
_TOKEN_RE: Final = re.compile(
    r"h1\.(?P<purpose>[a-z]{1,16})\.(?P<key_id>[0-9a-f]{8})\.(?P<expiry>[0-9]{1,12})"
    r"\.(?P<payload>[A-Za-z0-9_-]{1,2000})\.(?P<digest>[A-Za-z0-9_-]{43})"
)
TOKEN_PATTERN: Final = (
    r"h1\.[a-z]{1,16}\.[0-9a-f]{8}\.[0-9]{1,12}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}"
)
"""A regular expression matching a token inside other text (a Message-ID, an address)."""


class TokenError(HeronError, ValueError):
    """A token that does not verify; the message says why, for the sender."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TokenClaim:
    """What a valid token says."""

    purpose: str
    parts: tuple[str, ...]
    expires: float
    digest: str
    """The token's digest: unique per token, the nonce a single use is recorded under."""


class MessageKeyStore(ReceiptKeyStore):
    """Token keys: the receipt key store's format, in `<state_dir>/message-keys/`."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__(state_dir, kind="message")


class TokenSigner:
    """Mints and verifies tokens with the keys of one state directory."""

    def __init__(self, keys: KeyStore, *, clock: Clock | None = None) -> None:
        self.keys = keys
        self.clock: Clock = clock or RealClock()
        self._key = current_key(keys)

    def mint(self, purpose: str, parts: tuple[str, ...], *, ttl_s: float) -> str:
        """A token for `parts`, valid for `ttl_s` seconds from now."""
        if not re.fullmatch(r"[a-z]{1,16}", purpose):
            raise ValueError(f"a token purpose is a short lowercase word, not {purpose!r}")
        expiry = str(int(self.clock.time() + ttl_s))
        payload = _b64(json.dumps(list(parts), separators=(",", ":")).encode())
        digest = self._digest(self._key, purpose, expiry, payload)
        return ".".join((_VERSION, purpose, self._key.key_id, expiry, payload, digest))

    def verify(self, token: str, purpose: str) -> TokenClaim:
        """The claim of a valid token for `purpose`; `TokenError` saying why it is not one."""
        match = _TOKEN_RE.fullmatch(token.strip())
        if match is None:
            raise TokenError("not a heron token")
        if match["purpose"] != purpose:
            raise TokenError(f"a {match['purpose']} token, not a {purpose} token")
        key = self.keys.load(match["key_id"])
        if key is None:
            raise TokenError("signed with a key this heron does not hold")
        expected = self._digest(key, purpose, match["expiry"], match["payload"])
        if not hmac.compare_digest(expected.encode(), match["digest"].encode()):
            raise TokenError("signature mismatch: the token was altered or forged")
        expires = float(match["expiry"])
        if self.clock.time() >= expires:
            raise TokenError("the token has expired")
        try:
            parts = json.loads(_unb64(match["payload"]))
        except (ValueError, binascii.Error) as exc:
            raise TokenError("malformed token payload") from exc
        if not isinstance(parts, list) or not all(isinstance(p, str) for p in parts):
            raise TokenError("malformed token payload")
        return TokenClaim(
            purpose=purpose, parts=tuple(parts), expires=expires, digest=match["digest"]
        )

    @staticmethod
    def _digest(key: ReceiptKey, purpose: str, expiry: str, payload: str) -> str:
        message = f"{_VERSION}|{purpose}|{key.key_id}|{expiry}|{payload}".encode()
        return _b64(hmac.new(key.secret, message, hashlib.sha256).digest())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
