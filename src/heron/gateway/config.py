"""`[gateway]` in `heron.toml`: where the HTTP API and web console listen, who may use them,
and their limits.

```toml
[gateway]
host = "127.0.0.1"                     # loopback by default; `heron doctor` warns otherwise
port = 8765                            # `heron serve --http-port` overrides it
public_url = "https://heron.example"   # the origin browsers use, behind a TLS proxy

[[gateway.tokens]]                     # one per principal; only the SHA-256 of the token
principal = "alice"
role = "operator"                      # viewer | operator | admin
sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

[gateway.limits]
max_body = 1048576                     # bytes of one request body (webhooks too): 413
head_timeout_s = 10                    # a request's head must arrive in this: 408
body_timeout_s = 30                    # and its body in this after the head: 408
requests_per_minute = 600              # per principal: 429 above it
burst = 60
```

The simplest set-up needs no file: `HERON_GATEWAY_TOKEN=…` in the environment is one admin
token (principal `admin`). `heron gateway hash-token` prints the `sha256` of a token.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "DEFAULT_TOKEN_ENV",
    "ROLES",
    "GatewayConfig",
    "GatewayLimits",
    "Role",
    "TokenEntry",
]

Role = Literal["viewer", "operator", "admin"]
"""`viewer` reads; `operator` also sends messages, interrupts and answers approvals (when an
approver); `admin` also sees metrics and every session."""
ROLES: tuple[Role, ...] = ("viewer", "operator", "admin")
DEFAULT_TOKEN_ENV = "HERON_GATEWAY_TOKEN"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TokenEntry(_Section):
    """One bearer token of `[[gateway.tokens]]`, stored as its SHA-256."""

    principal: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.@-]+$")
    """Who holds it: the name an approval is answered as (`gateway:<principal>`)."""
    role: Role = "viewer"
    sha256: str
    """The hex SHA-256 of the token (never the token itself)."""

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str) -> str:
        if not _HEX64.match(value):
            raise ValueError("sha256 must be 64 lowercase hex digits (heron gateway hash-token)")
        return value


class GatewayLimits(_Section):
    max_body: int = Field(default=1 << 20, ge=1024, le=64 << 20)
    """Bytes of one HTTP request body, for every route of the front (webhooks too)."""
    requests_per_minute: float = Field(default=600.0, gt=0)
    """Sustained requests per principal; above it, 429 with `Retry-After`."""
    burst: int = Field(default=60, ge=1)
    """Requests a principal may make at once before the rate applies."""
    replay_max: int = Field(default=10_000, ge=1)
    """Events a reconnecting client may be behind; further behind, it is told to resync."""
    max_clients: int = Field(default=1000, ge=1)
    """Event streams open at once; more are refused with 503."""
    max_connections: int | None = Field(default=None, ge=1)
    """Open HTTP connections of the front at once (webhooks too); more are answered 503 and
    closed. Unset: half the process's file-descriptor limit."""
    head_timeout_s: float = Field(default=10.0, ge=0.1, le=300)
    """Seconds for a request's line and headers to arrive: 408 and closed after them."""
    body_timeout_s: float = Field(default=30.0, ge=0.1, le=3600)
    """Seconds for a request's body to arrive once its head has: 408 and closed after them."""


class GatewayConfig(_Section):
    """`[gateway]`: see the module docstring."""

    host: str = "127.0.0.1"
    port: int | None = Field(default=None, ge=0, le=65535)
    """Listen here when `heron serve` runs (`--http-port` overrides it); unset: no gateway."""
    public_url: str | None = Field(default=None, pattern=r"^https?://[^\s?#]+$")
    """The address people's browsers reach the gateway at (`https://heron.example.com`, behind
    a TLS proxy): its host is served and its origin accepted as `Origin` (besides loopback's
    and `host`'s), and OAuth logins to MCP servers redirect to
    `<public_url>/mcp/oauth/callback`."""
    tls_proxy: bool = False
    """A TLS-terminating proxy is in front (silences the doctor's warning for a non-loopback
    `host` when `public_url` is not https)."""
    token_env: str = DEFAULT_TOKEN_ENV
    """The environment variable of the one admin token of the simplest set-up."""
    tokens: list[TokenEntry] = Field(default_factory=list)
    session_ttl_s: float = Field(default=8 * 3600.0, gt=0)
    """How long a console login (its cookie) lasts."""
    limits: GatewayLimits = Field(default_factory=GatewayLimits)

    @field_validator("public_url")
    @classmethod
    def _no_slash(cls, value: str | None) -> str | None:
        return None if value is None else value.rstrip("/")

    def exposure(self) -> tuple[bool, str]:
        """For `heron doctor`: whether where it listens is safe, and why (a `host` that is not
        loopback needs TLS in front: an https `public_url`, or `tls_proxy = true`)."""
        if _loopback(self.host):
            return True, f"listens on loopback ({self.host})"
        if self.tls_proxy or (self.public_url or "").startswith("https://"):
            return True, f"listens on {self.host} behind TLS ({self.public_url or 'tls_proxy'})"
        return False, (
            f"listens on {self.host} without TLS in front: tokens and cookies cross the network "
            'in clear; put a TLS proxy in front and set public_url = "https://…" (or '
            "tls_proxy = true), or bind 127.0.0.1"
        )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
