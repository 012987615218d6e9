"""A small HTTP client shared by the connectors: one `HttpApi` per outside source.

What every connector needs, in one place:

- **Addresses.** Every hop goes through `UrlPolicy.resolve` and the request is sent to the
  checked IP with the original `Host` header (and TLS server name), as `fetch_url` does, so a DNS
  answer cannot change between check and connection. GET redirects are followed one checked hop
  at a time; other methods never follow a redirect.
- **Deadlines.** One deadline per attempt (`timeout_s`), and failures told apart by when they
  happen: `unreachable` (the request certainly never left), `timeout` / `broken` (it was sent
  and no complete answer came back).
- **Rate limits.** A local limit per source (`RateLimit`: at most `calls` per `per_s` seconds)
  waits when the wait is short and refuses otherwise. A 429, a 403 or 503 with `Retry-After`,
  and a 403 with `x-ratelimit-remaining: 0` (GitHub's primary limit, retry time from
  `x-ratelimit-reset`) are waited out and retried (`retries` times) when the wait is at most
  `max_wait_s`; otherwise they become a `rate_limited` error that says when to try again.
  Retrying is safe for any method: a rate-limited request was not processed. The sleep and
  the clocks are injectable, so tests never really wait.
- **Caching.** Successful GET answers are kept for `cache_ttl_s` seconds; a cached answer says
  how old it is.
- **Credentials.** A `Credential` names an environment variable, read at request time and sent
  as a header or a query parameter, only to the source's own origin (never across a redirect to
  another host). The secret is scrubbed from every error, body excerpt and URL this module
  returns, and is never stored in a config object.
- **Errors.** Everything that goes wrong is an `ApiError` with a stable `kind`, which
  `to_result()` turns into a failed `ToolResult` with structured `data`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import email.utils
import functools
import json
import os
import ssl
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal
from urllib.parse import urljoin, urlsplit

import httpx

from heron._support.limits import parse_json
from heron.errors import HeronError
from heron.safety.url_policy import UrlPolicy, UrlRefused
from heron.tools.definition import ToolResult

__all__ = [
    "ApiError",
    "ApiResponse",
    "ApiSource",
    "Credential",
    "ErrorKind",
    "HttpApi",
    "RateLimit",
    "Sleep",
    "parse_links",
]

ErrorKind = Literal[
    "refused",  # the URL policy refused the address
    "credentials",  # a configured credential is missing from the environment
    "unreachable",  # could not connect: nothing was sent
    "timeout",  # sent, no complete answer in time
    "broken",  # sent, the connection broke before a complete answer
    "rate_limited",  # 429 / rate-limit 403 / the local per-source limit
    "auth",  # 401, 403
    "not_found",  # 404, 410
    "rejected",  # 400, 409, 422: the request itself was refused
    "http",  # any other error status
    "bad_response",  # an answer that is not what the API documents (garbage JSON, XML, CSV)
    "too_large",  # the body exceeded the source's byte cap
]
_REDACTED = "[redacted]"
_EXCERPT = 300


class ApiError(HeronError):
    """A request that failed; `kind` is stable, the message is for the model."""

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        source: str,
        status: int | None = None,
        retry_after_s: float | None = None,
        detail: Any = None,
        body: str = "",
    ) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.source = source
        self.status = status
        self.retry_after_s = retry_after_s
        self.detail = detail
        """The parsed JSON error body, when there was one."""
        self.body = body
        """The start of the error body (credentials scrubbed)."""

    def to_result(self, *, hint: str = "") -> ToolResult:
        """A failed tool result naming the kind, source, status and retry time; `hint` (what
        to try instead) is appended to the message."""
        data: dict[str, Any] = {"error": self.kind, "source": self.source}
        if self.status is not None:
            data["status"] = self.status
        if self.retry_after_s is not None:
            data["retry_after_s"] = round(self.retry_after_s, 1)
        return ToolResult.fail(str(self) + hint, data=data)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Credential:
    """A secret named by environment variable, read at request time.

    Sent as header `header` with `prefix` (default `Authorization: Bearer <secret>`), or, when
    `query` is set, as that query parameter instead."""

    env: str
    header: str = "Authorization"
    prefix: str = "Bearer "
    query: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RateLimit:
    """At most `calls` requests per `per_s` seconds to one source."""

    calls: int
    per_s: float


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ApiSource:
    """One outside service: where it is and how politely to use it."""

    name: str
    """Shown in results and errors, e.g. `open-meteo`."""
    base_url: str
    """Relative paths are joined to this; it also defines the origin credentials go to."""
    timeout_s: float = 15.0
    cache_ttl_s: float = 0.0
    """0 disables caching."""
    rate_limit: RateLimit | None = None
    max_wait_s: float = 10.0
    """The longest wait (Retry-After, rate-limit reset, local limit) absorbed by waiting."""
    retries: int = 1
    """How often a rate-limited request is retried after waiting."""
    credential: Credential | None = None
    max_bytes: int = 5_000_000
    user_agent: str = "heron-agent/1.0"
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ApiResponse:
    """A successful (2xx) answer, read in full."""

    source: str
    status: int
    url: str
    """The final URL, credentials scrubbed."""
    headers: httpx.Headers
    body: bytes
    age_s: float | None = None
    """Seconds since it was fetched, when it came from the cache."""

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON, or an `ApiError("bad_response")` quoting its start."""
        try:
            return parse_json(self.body)  # a service's answer: within heron's input limits
        except ValueError as exc:
            raise ApiError(
                "bad_response",
                f"{self.source} answered something that is not JSON ({exc}); it began with "
                f"{_start(self.body)!r}",
                source=self.source,
                status=self.status,
            ) from None

    def bad(self, what: str) -> ApiError:
        """An `ApiError("bad_response")` for an answer of the wrong shape."""
        return ApiError(
            "bad_response",
            f"{self.source} answered in an unexpected shape: {what}",
            source=self.source,
            status=self.status,
        )


def parse_links(header: str) -> dict[str, str]:
    """An RFC 8288 `Link` header as `{rel: url}` (`<https://…?page=2>; rel="next"`)."""
    links: dict[str, str] = {}
    for part in header.split(","):
        url, _, params = part.strip().partition(";")
        if not (url.startswith("<") and url.endswith(">")):
            continue
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name.strip().lower() == "rel":
                for rel in value.strip().strip('"').split():
                    links[rel.lower()] = url[1:-1]
    return links


Sleep = Callable[[float], Awaitable[None]]


class HttpApi:
    """Requests to one `ApiSource` under a `UrlPolicy` (see the module docs)."""

    def __init__(
        self,
        source: ApiSource,
        *,
        policy: UrlPolicy,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        self.source = source
        self.policy = policy
        self._sleep = sleep
        self._clock = clock
        self._wall_clock = wall_clock
        self._environ = environ
        self._stamps: list[float] = []
        self._lock = asyncio.Lock()
        self._cache: OrderedDict[str, tuple[float, float, ApiResponse]] = OrderedDict()

    async def get(
        self, path: str, *, params: Mapping[str, str] | None = None, cache: bool = True
    ) -> ApiResponse:
        """GET `path` (relative to the base URL, or absolute), served from the cache if fresh."""
        url = self.url(path, params)
        if cache and self.source.cache_ttl_s > 0:
            hit = self._cache.get(url)
            if hit is not None and hit[0] > self._clock():
                self._cache.move_to_end(url)
                return dataclasses.replace(hit[2], age_s=self._clock() - hit[1])
        response = await self.send("GET", url)
        if cache and self.source.cache_ttl_s > 0:
            now = self._clock()
            self._cache[url] = (now + self.source.cache_ttl_s, now, response)
            while len(self._cache) > 256:
                self._cache.popitem(last=False)
        return response

    async def send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json_body: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> ApiResponse:
        """Send one request (never cached); retried only after a rate-limit answer."""
        url = self.url(path, params)
        if json_body is not None:
            content = json.dumps(json_body, ensure_ascii=False).encode("utf-8")
            headers = {"Content-Type": "application/json", **(headers or {})}
        secret = self._secret()
        attempt = 0
        while True:
            await self._take_slot()
            try:
                return await self._attempt(method, url, content, dict(headers or {}), secret)
            except ApiError as exc:
                wait = exc.retry_after_s if exc.kind == "rate_limited" else None
                if wait is None or wait > self.source.max_wait_s or attempt >= self.source.retries:
                    raise
                attempt += 1
                await self._sleep(wait)

    def url(self, path: str, params: Mapping[str, str] | None = None) -> str:
        """`path` joined to the base URL (absolute URLs are kept), with `params` added."""
        url = path
        if not urlsplit(path).scheme:
            url = self.source.base_url.rstrip("/") + "/" + path.lstrip("/")
        return str(httpx.URL(url).copy_merge_params(dict(params))) if params else url

    def same_origin(self, url: str) -> bool:
        """Whether `url` is on the source's own scheme, host and port."""
        return _origin(url) == _origin(self.source.base_url)

    def _secret(self) -> str | None:
        credential = self.source.credential
        if credential is None:
            return None
        value = self._environ.get(credential.env, "")
        if not value:
            raise self._error(
                "credentials",
                f"the credential is configured but ${credential.env} is not set in the "
                "environment; nothing was sent",
            )
        return value

    async def _take_slot(self) -> None:
        limit = self.source.rate_limit
        if limit is None:
            return
        async with self._lock:
            now = self._clock()
            self._stamps = [t for t in self._stamps if t > now - limit.per_s]
            at = now
            if len(self._stamps) >= limit.calls:
                wait = self._stamps[0] + limit.per_s - now
                if wait > self.source.max_wait_s:
                    raise self._error(
                        "rate_limited",
                        f"the local limit of {limit.calls} requests per {limit.per_s:g} s is "
                        f"reached; try again in {wait:.1f} s",
                        retry_after_s=wait,
                    )
                await self._sleep(wait)
                self._stamps.pop(0)
                at = now + wait
            self._stamps.append(at)

    async def _attempt(
        self,
        method: str,
        url: str,
        content: bytes | None,
        headers: dict[str, str],
        secret: str | None,
    ) -> ApiResponse:
        name, timeout = self.source.name, self.source.timeout_s
        headers = {"User-Agent": self.source.user_agent, **self.source.headers, **headers}
        hops = 0
        try:
            async with (
                asyncio.timeout(timeout),
                httpx.AsyncClient(
                    trust_env=False, timeout=httpx.Timeout(timeout), verify=_tls()
                ) as client,
            ):
                while True:
                    request = await self._request(client, method, url, content, headers, secret)
                    response = await client.send(request, stream=True)
                    try:
                        if not (response.has_redirect_location and method == "GET"):
                            body = await self._read(response)
                            break
                    finally:
                        await response.aclose()
                    hops += 1
                    if hops > self.policy.max_redirects:
                        raise self._error("http", f"more than {hops - 1} redirects")
                    url = urljoin(url, response.headers["Location"])
        except UrlRefused as exc:
            raise self._error("refused", str(exc)) from None
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            scheme, host, port = _origin(url)
            problem = self._scrub(f"{type(exc).__name__}: {exc}", secret)
            raise self._error(
                "unreachable",
                f"could not connect to {scheme}://{host}:{port} ({problem}); nothing was sent",
            ) from None
        except (TimeoutError, httpx.TimeoutException):
            raise self._error(
                "timeout", f"no complete answer within {timeout:g} s (the request was sent)"
            ) from None
        except httpx.HTTPError as exc:
            problem = self._scrub(f"{type(exc).__name__}: {exc}", secret)
            raise self._error(
                "broken",
                f"the connection broke before a complete answer ({problem}); the request may "
                "have been received",
            ) from None
        if response.status_code >= 300:
            raise self._status_error(response, body, secret)
        return ApiResponse(
            source=name,
            status=response.status_code,
            url=self._scrub(url, secret),
            headers=response.headers,
            body=body,
        )

    def _error(self, kind: ErrorKind, message: str, **facts: Any) -> ApiError:
        return ApiError(kind, f"{self.source.name}: {message}", source=self.source.name, **facts)

    async def _request(
        self,
        client: httpx.AsyncClient,
        method: str,
        url: str,
        content: bytes | None,
        headers: dict[str, str],
        secret: str | None,
    ) -> httpx.Request:
        target = await self.policy.resolve(url)
        credential = self.source.credential
        address_url = httpx.URL(target.url)
        if secret is not None and credential is not None and self.same_origin(url):
            if credential.query is not None:
                address_url = address_url.copy_merge_params({credential.query: secret})
            else:
                headers = {**headers, credential.header: credential.prefix + secret}
        default_port = {"http": 80, "https": 443}[target.scheme]
        host = f"[{target.host}]" if ":" in target.host else target.host
        headers["Host"] = host if target.port == default_port else f"{host}:{target.port}"
        return client.build_request(
            method,
            address_url.copy_with(host=target.address),
            headers=headers,
            content=content,
            extensions={"sni_hostname": target.host} if target.scheme == "https" else {},
        )

    async def _read(self, response: httpx.Response) -> bytes:
        cap = self.source.max_bytes
        declared = response.headers.get("Content-Length", "")
        chunks: list[bytes] = []
        total = 0
        too_big = self._error("too_large", f"the answer is larger than the {cap:,}-byte limit")
        if declared.isdigit() and int(declared) > cap:
            raise too_big
        async for chunk in response.aiter_bytes():
            total += len(chunk)
            if total > cap:
                raise too_big
            chunks.append(chunk)
        return b"".join(chunks)

    def _status_error(self, response: httpx.Response, body: bytes, secret: str | None) -> ApiError:
        status = response.status_code
        excerpt = self._scrub(_start(body, _EXCERPT), secret)
        detail: Any = None
        with contextlib.suppress(ValueError):
            detail = parse_json(body)
        said = self._scrub(_said(detail), secret) or excerpt
        reason = f"HTTP {status} {response.reason_phrase}".strip()
        facts = {"status": status, "detail": detail, "body": excerpt}
        retry = self._retry_after(response)
        told = "Retry-After" in response.headers
        exhausted = response.headers.get("x-ratelimit-remaining") == "0"
        if status == 429 or (status in (403, 503) and told) or (status == 403 and exhausted):
            when = f"try again in {retry:.0f} s" if retry is not None else "no retry time given"
            return self._error("rate_limited", f"{reason}; {when}", retry_after_s=retry, **facts)
        kind: ErrorKind = "http"
        if status in (401, 403):
            kind = "auth"
            said += " — the credentials are missing, wrong or lack permission"
        elif status in (404, 410):
            kind = "not_found"
        elif status in (400, 409, 422):
            kind = "rejected"
        elif status < 400:
            said = f"redirect to {response.headers.get('Location', '?')} not followed ({said})"
        return self._error(kind, f"{reason}: {said}", **facts)

    def _retry_after(self, response: httpx.Response) -> float | None:
        value = response.headers.get("Retry-After", "").strip()
        if value.isdigit():
            return float(value)
        if value:
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):
                return None
            return max(0.0, when.timestamp() - self._wall_clock())
        reset = response.headers.get("x-ratelimit-reset", "").strip()
        if reset.isdigit():
            return max(0.0, int(reset) - self._wall_clock())
        return None

    @staticmethod
    def _scrub(text: str, secret: str | None) -> str:
        return text.replace(secret, _REDACTED) if secret else text


@functools.cache
def _tls() -> ssl.SSLContext:
    # Loading the CA bundle costs ~0.1 s; one context serves every client of the process.
    return httpx.create_ssl_context()


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port


def _start(body: bytes, size: int = 80) -> str:
    text = body[:size].decode("utf-8", errors="replace")
    return text + ("…" if len(body) > size else "")


def _said(detail: Any) -> str:
    """The human sentence in a JSON error body (`message`, `detail`, `error`, `reason`)."""
    if not isinstance(detail, dict):
        return ""
    for key in ("message", "detail", "error", "reason", "title"):
        value = detail.get(key)
        if isinstance(value, str) and value:
            return value[:_EXCERPT]
        if isinstance(value, dict):
            return _said(value)
    return ""
