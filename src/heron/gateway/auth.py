"""Who is calling the gateway, and whether they may: bearer tokens, console logins, CSRF,
`Origin`, roles and rate limits.

- A bearer token (`Authorization: Bearer …`) is looked up by its SHA-256 among
  `[[gateway.tokens]]` and the environment's admin token; the token itself is never kept,
  logged or answered. None, or an unknown one: 401.
- The console logs in once with a token (`POST /v1/login`) and gets an HttpOnly,
  SameSite=Strict session cookie and a CSRF token; a cookie-authenticated request that changes
  anything must send that CSRF token (`X-CSRF-Token`) and an `Origin` the gateway serves: 403
  otherwise. A bearer request with a foreign `Origin` is refused too — a page elsewhere never
  acts through a browser that holds a token.
- Roles order `viewer < operator < admin`; a route names the least it needs: 403 below it.
- Each principal has a token bucket (`requests_per_minute`, `burst`): 429 with `Retry-After`.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from heron._support.clock import Clock
from heron.errors import HeronError
from heron.gateway.config import ROLES, GatewayConfig, Role
from heron.safety.signing import same

if TYPE_CHECKING:
    from starlette.requests import HTTPConnection

__all__ = [
    "COOKIE",
    "CSRF_HEADER",
    "ApiError",
    "Guard",
    "LoginSessions",
    "Principal",
    "RateLimiter",
    "TokenBook",
    "hash_token",
]

COOKIE = "heron_session"
CSRF_HEADER = "x-csrf-token"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_PAGE_SCHEMES = {"ws": "http", "wss": "https"}
"""A WebSocket's URL scheme → that of the page it is opened from (its `Origin`)."""


def _bearer(request: HTTPConnection) -> str:
    """The bearer token of `Authorization`, or `""`."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


class ApiError(HeronError):
    """An answer other than success: its HTTP status and one line for the caller."""

    def __init__(self, status: int, message: str, *, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    role: Role
    via: str = "token"
    """`token` (a bearer) or `cookie` (a console login)."""

    def at_least(self, role: Role) -> bool:
        return ROLES.index(self.role) >= ROLES.index(role)


def hash_token(token: str) -> str:
    """The hex SHA-256 `[[gateway.tokens]] sha256` holds."""
    return hashlib.sha256(token.encode()).hexdigest()


class TokenBook:
    """The tokens that open the gateway, by their hashes."""

    def __init__(self, entries: Mapping[str, Principal]) -> None:
        self._by_hash = dict(entries)

    @classmethod
    def from_config(
        cls, config: GatewayConfig, environ: Mapping[str, str] = os.environ
    ) -> TokenBook:
        entries = {t.sha256: Principal(t.principal, t.role) for t in config.tokens}
        env_token = environ.get(config.token_env, "")
        if env_token:
            entries[hash_token(env_token)] = Principal("admin", "admin")
        return cls(entries)

    def __len__(self) -> int:
        return len(self._by_hash)

    def lookup(self, token: str) -> Principal | None:
        digest = hash_token(token)
        found = None
        for known, principal in self._by_hash.items():  # constant time per entry
            if same(known, digest):
                found = principal
        return found


@dataclass(slots=True)
class _Login:
    principal: Principal
    csrf: str
    expires: float


class LoginSessions:
    """Console logins in memory: a restart logs everyone out (they log in again)."""

    def __init__(self, *, ttl_s: float, clock: Clock) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self._logins: dict[str, _Login] = {}

    def open(self, principal: Principal) -> tuple[str, str]:
        """A new login: `(session id for the cookie, CSRF token)`."""
        now = self.clock.time()
        self._logins = {k: v for k, v in self._logins.items() if v.expires > now}
        sid, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(24)
        cookie_principal = Principal(principal.name, principal.role, via="cookie")
        self._logins[sid] = _Login(cookie_principal, csrf, now + self.ttl_s)
        return sid, csrf

    def get(self, sid: str) -> tuple[Principal, str] | None:
        login = self._logins.get(sid)
        if login is None or login.expires <= self.clock.time():
            return None
        return login.principal, login.csrf

    def close(self, sid: str) -> None:
        self._logins.pop(sid, None)


class RateLimiter:
    """A token bucket per principal."""

    def __init__(self, *, per_minute: float, burst: int, clock: Clock) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, name: str) -> float | None:
        """Spend one request of `name`: `None` when allowed, else seconds until one is."""
        now = self.clock.time()
        level, at = self._buckets.get(name, (self.burst, now))
        level = min(self.burst, level + (now - at) * self.rate)
        if level < 1.0:
            self._buckets[name] = (level, now)
            return (1.0 - level) / self.rate
        self._buckets[name] = (level - 1.0, now)
        return None


class Guard:
    """Authenticates and authorises one request (see the module docstring)."""

    def __init__(
        self,
        config: GatewayConfig,
        tokens: TokenBook,
        logins: LoginSessions,
        limiter: RateLimiter,
    ) -> None:
        self.config = config
        self.tokens = tokens
        self.logins = logins
        self.limiter = limiter

    def origins(self, request: HTTPConnection) -> set[str]:
        """The origins the gateway serves: `public_url` and the address asked for."""
        scheme = _PAGE_SCHEMES.get(request.url.scheme, request.url.scheme)
        own = {f"{scheme}://{request.headers.get('host', '')}"}
        if self.config.public_origin:
            own.add(self.config.public_origin)
        return own

    def check(self, request: HTTPConnection, need: Role, *, socket: bool = False) -> Principal:
        """Who calls, if they may (`ApiError` otherwise). `socket`: a WebSocket handshake,
        which a browser sends with the cookie from any page and without a CSRF header, so its
        `Origin` must be the gateway's own, and a console login's handshake must carry one."""
        changes = not socket and request.scope.get("method") not in _SAFE_METHODS
        origin = request.headers.get("origin")
        if (changes or socket) and origin is not None and origin not in self.origins(request):
            raise ApiError(403, f"requests from origin {origin!r} are refused")
        principal = self._principal(request, changes)
        if socket and origin is None and request.cookies.get(COOKIE) and not _bearer(request):
            raise ApiError(403, "a console WebSocket needs an Origin")
        retry = self.limiter.take(principal.name)
        if retry is not None:
            raise ApiError(
                429, "too many requests; slow down", headers={"Retry-After": f"{retry:.0f}"}
            )
        if not principal.at_least(need):
            raise ApiError(403, f"{principal.name} ({principal.role}) may not do this: {need}")
        return principal

    def _principal(self, request: HTTPConnection, changes: bool) -> Principal:
        token = _bearer(request)
        if token:
            found = self.tokens.lookup(token)
            if found is None:
                raise ApiError(401, "unknown token")
            return found
        sid = request.cookies.get(COOKIE)
        login = self.logins.get(sid) if sid else None
        if login is None:
            raise ApiError(
                401,
                "authentication required: Authorization: Bearer <token>",
                headers={"WWW-Authenticate": "Bearer"},
            )
        principal, csrf = login
        if changes:
            if request.headers.get("origin") is None:
                raise ApiError(403, "a console request that changes something needs an Origin")
            if not same(csrf, request.headers.get(CSRF_HEADER, "")):
                raise ApiError(403, "missing or wrong CSRF token")
        return principal
