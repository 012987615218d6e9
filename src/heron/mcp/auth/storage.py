"""Where OAuth tokens and client registrations live: one record per server.

`TokenStorage` implements the SDK's `TokenStorage` protocol (`mcp.client.auth`) over one
server's record: the access and refresh tokens, the client registration (a dynamically
registered client's secret included), and what heron needs to log out later (the authorization
server's issuer and revocation endpoint). Where the record lives is its `TokenRecords`:
`FileTokenStorage` keeps it in `<state_dir>/mcp-oauth/<server>.json` (folder mode 0700, file
0600, written atomically: a temporary file renamed over the old one); with a shared store it is
a row of the PostgreSQL database every worker reads (`heron.mcp.auth.postgres_storage`), always
encrypted.

A refresh is claimed first (`claim_refresh`): with a shared store one worker at a time holds
the claim, the others wait for the token it stores (the record's version moves) instead of
rotating the same refresh token against it, and the holder's write is a compare-and-set on the
version it claimed, so it never overwrites a newer record. A file has one writer: its claim is
always granted.

With a key configured (`HERON_TOKEN_KEY`, or `[mcp] token_key_env`) the record is encrypted at
rest with AES-256-GCM under a key derived from it with HKDF-SHA256, using `cryptography` (the MCP
SDK depends on it for its own request-state sealing). The server name and URL are the
associated data, so a record copied to another server's file does not decrypt. Without a key
the record is plain JSON, still owner-only. A plain record is encrypted on its next write once
a key is set; an encrypted record without the key is "locked" and never overwritten blindly.

Access tokens carry only a relative lifetime (`expires_in`); the file keeps the absolute
instant, and `get_tokens` hands the SDK the time that is left, so a token loaded after a
restart is refreshed when it is due rather than trusted forever.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from heron.errors import HeronError
from heron.mcp.auth.scrub import remember_secret

__all__ = [
    "MIN_KEY_CHARS",
    "FileTokenRecords",
    "FileTokenStorage",
    "StoredRecord",
    "TokenCipher",
    "TokenRecords",
    "TokenStorage",
    "TokenStoreLocked",
    "token_path",
]

log = logging.getLogger(__name__)

MIN_KEY_CHARS = 32
"""A token key shorter than this is refused (generate one with `secrets.token_urlsafe(32)`)."""

_FORMAT = 1
_NONCE = 12
_HKDF_INFO = b"heron/mcp-oauth/v1/aes-256-gcm"
REFRESH_CLAIM_S = 30.0
"""How long a refresh claim holds: a worker that died while refreshing blocks the others no
longer than this."""
_CLAIM_POLL_S = 0.05


class TokenStoreLocked(HeronError):
    """The stored record is encrypted and the configured key (if any) does not open it."""


def token_path(state_dir: Path, server: str) -> Path:
    """The token file of one server (server names are safe file names, see `McpConfig`)."""
    return state_dir / "mcp-oauth" / f"{server}.json"


class TokenCipher:
    """AES-256-GCM under a key derived (HKDF-SHA256) from an operator secret."""

    def __init__(self, secret: str) -> None:
        if len(secret) < MIN_KEY_CHARS:
            raise ValueError(
                f"the token key must be at least {MIN_KEY_CHARS} characters (e.g. "
                "python -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        from cryptography.hazmat.primitives.hashes import SHA256
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF

        key = HKDF(algorithm=SHA256(), length=32, salt=None, info=_HKDF_INFO).derive(
            secret.encode("utf-8")
        )
        self._aead = AESGCM(key)

    def seal(self, plaintext: bytes, *, bound_to: bytes) -> str:
        nonce = os.urandom(_NONCE)
        return base64.b64encode(nonce + self._aead.encrypt(nonce, plaintext, bound_to)).decode()

    def open(self, sealed: str, *, bound_to: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag

        try:
            raw = base64.b64decode(sealed, validate=True)
            return self._aead.decrypt(raw[:_NONCE], raw[_NONCE:], bound_to)
        except (InvalidTag, ValueError) as exc:
            raise TokenStoreLocked("the token key does not open the stored tokens") from exc


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredRecord:
    """What the token file holds, without any secret value (for status lines)."""

    encrypted: bool
    has_access_token: bool
    has_refresh_token: bool
    expires_at: float | None
    """Unix time the access token expires (None: no expiry given)."""
    scope: str | None
    client_id: str | None
    registration: Literal["dynamic", "pre-registered", "metadata-document"] | None
    issuer: str | None
    revocation_endpoint: str | None
    updated_at: float | None


class TokenRecords(Protocol):
    """Where one server's envelope (the JSON around the possibly sealed record) lives."""

    def load(self) -> tuple[dict[str, Any], int] | None:
        """The envelope and its version, or `None` when nothing is stored. Raises
        `TokenStoreLocked` when it cannot be read."""
        ...

    def save(self, envelope: dict[str, Any], *, expect: int | None) -> bool:
        """Store the envelope (a new version); with `expect`, only if the stored version is
        still `expect` (`False`: it moved, nothing was written). Releases a refresh claim."""
        ...

    def delete(self) -> bool:
        """Remove the record; `False` when there was none."""
        ...

    def modified_at(self) -> float | None:
        """When the record was last written (another process may log in), `None` if absent."""
        ...

    def claim_refresh(self, owner: str, *, now: float, until: float) -> int | None:
        """Claim the next refresh for `owner` until `until`: the version claimed, or `None`
        while another owner's claim holds."""
        ...

    def release_refresh(self, owner: str) -> None:
        """Give up `owner`'s claim (a refresh that failed)."""
        ...


class FileTokenRecords:
    """One server's envelope in one owner-only file (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> tuple[dict[str, Any], int] | None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise TokenStoreLocked(f"the token file {self.path} cannot be read: {exc}") from exc
        return (data if isinstance(data, dict) else {}), 0

    def save(self, envelope: dict[str, Any], *, expect: int | None) -> bool:
        folder = self.path.parent
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            os.chmod(folder, 0o700)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=folder)  # mode 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(envelope, out, indent=1)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return True

    def delete(self) -> bool:
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    def modified_at(self) -> float | None:
        try:
            return self.path.stat().st_mtime
        except FileNotFoundError:
            return None

    def claim_refresh(self, owner: str, *, now: float, until: float) -> int | None:
        return 0  # one writer per state directory: nobody to wait for

    def release_refresh(self, owner: str) -> None:
        return None


def _section(record: dict[str, Any], key: str) -> dict[str, Any]:
    value = record.get(key)
    return value if isinstance(value, dict) else {}


class TokenStorage:
    """The SDK's `TokenStorage` over one server's record (see the module docstring).

    `url` is the server's configured URL: a record written for another URL is ignored (tokens
    are never sent to a server they were not issued for). `fresh=True` hides stored tokens
    from the SDK (a new login) while keeping the client registration.
    """

    def __init__(
        self,
        records: TokenRecords,
        *,
        server: str,
        url: str,
        cipher: TokenCipher | None = None,
        fresh: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.records = records
        self.server = server
        self.url = url
        self._cipher = cipher
        self._hide_tokens = fresh
        self._clock = clock
        self.loaded_lifetime: tuple[float, int | None] | None = None
        """Of the token `get_tokens` last returned: seconds left, and its whole lifetime."""
        self.metadata: Callable[[], dict[str, str | None]] | None = None
        """Set by the provider: the authorization server's issuer and revocation endpoint,
        saved with the tokens so a later logout can revoke them."""
        self._owner = os.urandom(8).hex()
        self._version: int | None = None
        """The version of the record last read."""
        self._claimed: int | None = None
        """The version this storage claimed a refresh on, until it stores the new token."""

    # -- the SDK's TokenStorage -----------------------------------------------------------------

    async def get_tokens(self) -> OAuthToken | None:
        if self._hide_tokens:
            return None
        raw = self._read().get("tokens")
        if not isinstance(raw, dict):
            return None
        token = OAuthToken.model_validate(
            {k: v for k, v in raw.items() if k != "expires_at"}, by_name=False
        )
        remember_secret(token.access_token, token.refresh_token)
        expires_at = raw.get("expires_at")
        self.loaded_lifetime = None
        if isinstance(expires_at, int | float):
            # What is left of the lifetime, so the SDK refreshes when it is due.
            left = expires_at - self._clock()
            self.loaded_lifetime = (left, token.expires_in)
            token.expires_in = max(0, math.floor(left))
        return token

    async def set_tokens(self, tokens: OAuthToken) -> None:
        remember_secret(tokens.access_token, tokens.refresh_token)
        record = self._read()
        stored: dict[str, Any] = tokens.model_dump(mode="json", exclude_none=True)
        if tokens.expires_in is not None:
            stored["expires_at"] = self._clock() + int(tokens.expires_in)
        record["tokens"] = stored
        if self.metadata is not None:
            record["authorization_server"] = self.metadata()
        self._hide_tokens = False
        claimed, self._claimed = self._claimed, None
        if not self._write(record, expect=claimed):
            # Our claim lapsed and another worker stored a newer token: keep its record.
            log.warning("MCP server %r: a newer token was stored meanwhile; kept", self.server)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        raw = self._read().get("client")
        if not isinstance(raw, dict):
            return None
        info = OAuthClientInformationFull.model_validate(raw)
        remember_secret(info.client_secret)
        return info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        remember_secret(client_info.client_secret)
        record = self._read()
        record["client"] = client_info.model_dump(mode="json", exclude_none=True)
        self._write(record)

    # -- refreshing ---------------------------------------------------------------------------

    async def claim_refresh(self) -> bool:
        """Before a refresh: `True` when this storage may refresh now (it holds the claim),
        `False` when the record moved since it was read (another worker refreshed: read the
        tokens again). Waits while another worker holds the claim, at most its lifetime."""
        while True:
            now = self._clock()
            claimed = self.records.claim_refresh(self._owner, now=now, until=now + REFRESH_CLAIM_S)
            if claimed is not None:
                if claimed == self._version:
                    self._claimed = claimed
                    return True
                self.records.release_refresh(self._owner)
                return False
            loaded = self.records.load()
            if loaded is None or loaded[1] != self._version:
                return False
            await asyncio.sleep(_CLAIM_POLL_S)  # another worker is refreshing right now

    def release_refresh(self) -> None:
        """A refresh that failed gives its claim up (no-op without one)."""
        if self._claimed is not None:
            self._claimed = None
            self.records.release_refresh(self._owner)

    # -- heron's own use --------------------------------------------------------------------

    def describe(self, *, registration: str | None = None) -> StoredRecord | None:
        """The stored record without secrets; None when nothing is stored. Raises
        `TokenStoreLocked` when the record is encrypted and cannot be opened."""
        encrypted = self._envelope().get("encrypted") is True
        record = self._read()
        if not record:
            return None
        tokens = _section(record, "tokens")
        client = _section(record, "client")
        server = _section(record, "authorization_server")
        expires_at = tokens.get("expires_at")
        return StoredRecord(
            encrypted=encrypted,
            has_access_token=bool(tokens.get("access_token")),
            has_refresh_token=bool(tokens.get("refresh_token")),
            expires_at=float(expires_at) if isinstance(expires_at, int | float) else None,
            scope=tokens.get("scope"),
            client_id=client.get("client_id"),
            registration=registration if client else None,  # type: ignore[arg-type]
            issuer=server.get("issuer"),
            revocation_endpoint=server.get("revocation_endpoint"),
            updated_at=record.get("updated_at"),
        )

    def raw_record(self) -> dict[str, Any]:
        """The decrypted record (secrets included): for logout, never for display."""
        return self._read()

    def clear_tokens(self) -> None:
        """Forget the tokens; keep the client registration."""
        record = self._read()
        if record.pop("tokens", None) is not None:
            self._write(record)

    def delete(self) -> bool:
        """Remove the record (tokens and registration). False when there was none."""
        return self.records.delete()

    def modified_at(self) -> float | None:
        """When the record was last written (another process may log in), None when absent."""
        return self.records.modified_at()

    # -- the record ---------------------------------------------------------------------------

    def _bound_to(self) -> bytes:
        return f"heron-mcp-oauth\x00{self.server}\x00{self.url}".encode()

    def _envelope(self) -> dict[str, Any]:
        loaded = self.records.load()
        self._version = None if loaded is None else loaded[1]
        return {} if loaded is None else loaded[0]

    def _read(self) -> dict[str, Any]:
        envelope = self._envelope()
        if not envelope or envelope.get("server") != self.server:
            return {}
        if envelope.get("url") != self.url:
            return {}  # issued for another endpoint: never sent here
        if envelope.get("encrypted") is True:
            if self._cipher is None:
                raise TokenStoreLocked(
                    "the stored tokens are encrypted and no token key is set "
                    "(HERON_TOKEN_KEY or [mcp] token_key_env)"
                )
            plain = self._cipher.open(str(envelope.get("record", "")), bound_to=self._bound_to())
            record = json.loads(plain)
        else:
            record = envelope.get("record")
        return dict(record) if isinstance(record, dict) else {}

    def _write(self, record: dict[str, Any], *, expect: int | None = None) -> bool:
        record = {**record, "updated_at": self._clock()}
        envelope: dict[str, Any] = {
            "format": _FORMAT,
            "server": self.server,
            "url": self.url,
            "encrypted": self._cipher is not None,
        }
        if self._cipher is not None:
            plain = json.dumps(record, separators=(",", ":")).encode()
            envelope["record"] = self._cipher.seal(plain, bound_to=self._bound_to())
        else:
            envelope["record"] = record
        return self.records.save(envelope, expect=expect)


class FileTokenStorage(TokenStorage):
    """`TokenStorage` over one server's token file `path` (see the module docstring)."""

    def __init__(
        self,
        path: Path,
        *,
        server: str,
        url: str,
        cipher: TokenCipher | None = None,
        fresh: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(
            FileTokenRecords(path), server=server, url=url, cipher=cipher, fresh=fresh, clock=clock
        )
        self.path = path
