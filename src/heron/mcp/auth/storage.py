"""Where OAuth tokens and client registrations live: one owner-only file per server.

`FileTokenStorage` implements the SDK's `TokenStorage` protocol (`mcp.client.auth`) over
`<state_dir>/mcp-oauth/<server>.json`: the access and refresh tokens, the client registration
(a dynamically registered client's secret included), and what heron needs to log out later (the
authorization server's issuer and revocation endpoint). The folder is mode 0700 and the file
0600, written atomically (a temporary file renamed over the old one).

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

import base64
import contextlib
import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from heron.errors import HeronError
from heron.mcp.auth.scrub import remember_secret

__all__ = [
    "MIN_KEY_CHARS",
    "FileTokenStorage",
    "StoredRecord",
    "TokenCipher",
    "TokenStoreLocked",
    "token_path",
]

MIN_KEY_CHARS = 32
"""A token key shorter than this is refused (generate one with `secrets.token_urlsafe(32)`)."""

_FORMAT = 1
_NONCE = 12
_HKDF_INFO = b"heron/mcp-oauth/v1/aes-256-gcm"


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


def _section(record: dict[str, Any], key: str) -> dict[str, Any]:
    value = record.get(key)
    return value if isinstance(value, dict) else {}


class FileTokenStorage:
    """The SDK's `TokenStorage` over one server's token file (see the module docstring).

    `url` is the server's configured URL: a record written for another URL is ignored (tokens
    are never sent to a server they were not issued for). `fresh=True` hides stored tokens
    from the SDK (a new login) while keeping the client registration.
    """

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
        self.path = path
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
        self._write(record)

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

    # -- heron's own use --------------------------------------------------------------------

    def describe(self, *, registration: str | None = None) -> StoredRecord | None:
        """The stored record without secrets; None when nothing is stored. Raises
        `TokenStoreLocked` when the record is encrypted and cannot be opened."""
        if not self.path.exists():
            return None
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
        """Remove the file (tokens and registration). False when there was none."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    def modified_at(self) -> float | None:
        """The file's modification time (another process may log in), None when absent."""
        try:
            return self.path.stat().st_mtime
        except FileNotFoundError:
            return None

    # -- the file -----------------------------------------------------------------------------

    def _bound_to(self) -> bytes:
        return f"heron-mcp-oauth\x00{self.server}\x00{self.url}".encode()

    def _envelope(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise TokenStoreLocked(f"the token file {self.path} cannot be read: {exc}") from exc
        return data if isinstance(data, dict) else {}

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

    def _write(self, record: dict[str, Any]) -> None:
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
