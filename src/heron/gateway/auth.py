"""Who is calling the gateway, and whether they may: the `Host` asked for, bearer tokens,
console logins, CSRF, `Origin`, roles and rate limits.

- A request must name a host the gateway serves (`Served`): a loopback name on the port it came
  in on, the configured `host`, or `public_url`'s; any other `Host` is 421 before any route
  runs. A DNS-rebinding page (its own name resolving to 127.0.0.1) sends its name as both
  `Host` and `Origin`, so neither is ever checked against the other.
- A bearer token (`Authorization: Bearer …`) is looked up by its SHA-256 among
  `[[gateway.tokens]]` and the environment's admin token; the token itself is never kept,
  logged or answered. None, or an unknown one: 401. After `FAILURES` unknown tokens (bearer
  or login) from one address, its tokens are not looked at: 429 with `Retry-After` until the
  failures age out.
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
import ipaddress
import math
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

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
    "Served",
    "TokenBook",
    "address_of",
    "hash_token",
    "too_many",
]

COOKIE = "heron_session"
CSRF_HEADER = "x-csrf-token"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
FAILURES = 10
"""Unknown tokens one address may present at once; then one more every `FAILURE_WINDOW_S /
FAILURES` seconds (6). A person mistyping a token, or a scraper left with an old one polling
every 15 s, stays under it and keeps getting 401; a guesser gets 14,400 tries a day instead of
as many as the server answers."""
FAILURE_WINDOW_S = 60.0
TRACKED_MAX = 10_000
"""Names a `RateLimiter` remembers (principals, addresses): 1.8 MB measured with 10,000 IPv6
/64s. Past it the least recently seen is forgotten, which gives that address a full allowance
again: no more than an attacker with that many addresses has anyway."""
_AUTHORITY = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9._-]+)(?::([0-9]{1,5}))?")


def _authority(value: str) -> tuple[str, int | None] | None:
    """`(name, port or None)` of a `Host` value or a URL's netloc, lowercased; `None` when it
    is not a plain host (userinfo, a path, several values)."""
    match = _AUTHORITY.fullmatch(value.lower())
    if match is None:
        return None
    return match[1], int(match[2]) if match[2] else None


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
    """A token bucket per name (a principal, an address), for at most `max_names` names."""

    def __init__(
        self, *, per_minute: float, burst: int, clock: Clock, max_names: int = TRACKED_MAX
    ) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self.clock = clock
        self.max_names = max_names
        self._buckets: dict[str, tuple[float, float]] = {}
        """name → (level, when); in the order last seen, so the first is forgotten first."""

    def __len__(self) -> int:
        return len(self._buckets)

    def wait(self, name: str) -> float | None:
        """`None` when `name` may spend one now, else seconds until it may (spends nothing)."""
        level = self._level(name, self.clock.time())
        return None if level >= 1.0 else (1.0 - level) / self.rate

    def take(self, name: str) -> float | None:
        """Spend one request of `name`: `None` when allowed, else seconds until one is."""
        now = self.clock.time()
        level = self._level(name, now)
        allowed = level >= 1.0
        self._buckets.pop(name, None)
        self._buckets[name] = (level - 1.0 if allowed else level, now)
        if len(self._buckets) > self.max_names:
            del self._buckets[next(iter(self._buckets))]
        return None if allowed else (1.0 - level) / self.rate

    def _level(self, name: str, now: float) -> float:
        level, at = self._buckets.get(name, (self.burst, now))
        return min(self.burst, level + (now - at) * self.rate)


def too_many(message: str, retry: float) -> ApiError:
    """429 with `Retry-After` in whole seconds, rounded up: never `0` while still refused."""
    return ApiError(429, message, headers={"Retry-After": str(max(1, math.ceil(retry)))})


def address_of(request: HTTPConnection) -> str:
    """Who a failure is counted against: the client's address, an IPv6 one by its /64 (one
    subscriber's network: they hold all of its addresses)."""
    host = request.client.host if request.client else ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if address.version == 6:
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return host


class Served:
    """Where the gateway is reached: the `Host` values it answers and the origins of its
    pages, for a request that came in on a given port (the socket's own, not the sender's
    word): the loopback names, the configured `host` unless it is a wildcard, and `public_url`
    (a proxy in front passes its `Host` on, or its own loopback one)."""

    def __init__(self, config: GatewayConfig) -> None:
        host = config.host.lower()
        unspecified = host in ("", "0.0.0.0", "::")
        named = f"[{host}]" if ":" in host else host
        self.names = {*LOOPBACK_NAMES, *(() if unspecified else (named,))}
        self.public: tuple[str, int] | None = None
        self.public_origin: str | None = None
        if config.public_url is not None:
            parts = urlsplit(config.public_url)
            default = 443 if parts.scheme == "https" else 80
            name, port = _authority(parts.netloc) or (parts.netloc, None)
            self.public = (name, port or default)
            shown = name if port in (None, default) else f"{name}:{port}"
            self.public_origin = f"{parts.scheme}://{shown}"

    @staticmethod
    def _port(request: HTTPConnection) -> int:
        server = request.scope.get("server")
        return int(server[1]) if server else 80

    def check_host(self, request: HTTPConnection) -> None:
        """`ApiError` 421 unless the request names one host the gateway serves."""
        hosts = request.headers.getlist("host")
        found = _authority(hosts[0]) if len(hosts) == 1 else None
        if found is not None:
            name, port = found
            if name in self.names and (port or 80) == self._port(request):
                return
            public = self.public
            if public is not None and name == public[0] and (port or public[1]) == public[1]:
                return
        shown = ", ".join(h[:100] for h in hosts) or "none"
        raise ApiError(
            421,
            f"this gateway does not answer to Host {shown!r}: it serves its loopback address "
            "and [gateway] host or public_url",
        )

    def origins(self, request: HTTPConnection) -> set[str]:
        """The origins of the gateway's own pages."""
        port = self._port(request)
        own = {f"http://{name}" + ("" if port == 80 else f":{port}") for name in self.names}
        if self.public_origin is not None:
            own.add(self.public_origin)
        return own


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
        self.served = Served(config)
        self.failures = RateLimiter(
            per_minute=FAILURES * 60.0 / FAILURE_WINDOW_S, burst=FAILURES, clock=limiter.clock
        )
        """Unknown tokens, by address."""

    def origin_check(self, request: HTTPConnection) -> None:
        """403 for an `Origin` that is not one of the gateway's own pages."""
        origin = request.headers.get("origin")
        if origin is not None and origin not in self.served.origins(request):
            raise ApiError(403, f"requests from origin {origin!r} are refused")

    def token(self, request: HTTPConnection, token: str) -> Principal:
        """The principal of `token` (401 if none). Past `FAILURES` unknown ones from the
        request's address, it is not looked up at all: 429, so a guesser learns nothing."""
        address = address_of(request)
        retry = self.failures.wait(address)
        if retry is not None:
            raise too_many("too many unknown tokens from this address; retry later", retry)
        found = self.tokens.lookup(token)
        if found is None:
            self.failures.take(address)
            raise ApiError(401, "unknown token")
        return found

    def check(self, request: HTTPConnection, need: Role, *, socket: bool = False) -> Principal:
        """Who calls, if they may (`ApiError` otherwise). `socket`: a WebSocket handshake,
        which a browser sends with the cookie from any page and without a CSRF header, so its
        `Origin` must be the gateway's own, and a console login's handshake must carry one."""
        changes = not socket and request.scope.get("method") not in _SAFE_METHODS
        if changes or socket:
            self.origin_check(request)
        principal = self._principal(request, changes)
        origin = request.headers.get("origin")
        if socket and origin is None and request.cookies.get(COOKIE) and not _bearer(request):
            raise ApiError(403, "a console WebSocket needs an Origin")
        retry = self.limiter.take(principal.name)
        if retry is not None:
            raise too_many("too many requests; slow down", retry)
        if not principal.at_least(need):
            raise ApiError(403, f"{principal.name} ({principal.role}) may not do this: {need}")
        return principal

    def _principal(self, request: HTTPConnection, changes: bool) -> Principal:
        token = _bearer(request)
        if token:
            return self.token(request, token)
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
