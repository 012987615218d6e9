"""HttpApi against a real HTTP server on 127.0.0.1: caching, rate limits, Retry-After,
garbage answers, unreachable hosts, credentials that never leak, and the URL policy.

`ApiServer`, `Reply`, `FakeTime` and `closed_port` are shared by the other connector tests."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from heron.connectors.http_api import (
    ApiError,
    ApiSource,
    Credential,
    HttpApi,
    RateLimit,
    parse_links,
)
from heron.safety.url_policy import UrlPolicy

LOCAL = UrlPolicy(allow_hosts=("127.0.0.1",))
SECRET = "s3cr3t-token-value-42"


@dataclass(kw_only=True)
class Reply:
    """What the server answers: JSON for dicts and lists, bytes or text otherwise."""

    status: int = 200
    body: Any = b""
    headers: dict[str, str] = field(default_factory=dict)
    wait: threading.Event | None = None
    """Block (up to 5 s) until this is set before answering."""


@dataclass(frozen=True, kw_only=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def query(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(urlsplit(self.path).query, True).items()}


Route = Callable[[Seen], Reply] | list[Reply]


class ApiServer:
    """A loopback server answering from per-route scripts; records every request.

    A route is `(method, path without query)`; a list of replies is played in order and its
    last reply repeats; a callable builds the reply from the request."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Route] = {}
        self.seen: list[Seen] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length", "0") or 0)
                seen = Seen(
                    method=self.command,
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=self.rfile.read(length) if length else b"",
                )
                server.seen.append(seen)
                reply = server.reply_for(seen)
                if reply.wait is not None:
                    reply.wait.wait(5)
                body = reply.body
                ctype = "application/json"
                if isinstance(body, dict | list):
                    body = json.dumps(body).encode()
                elif isinstance(body, str):
                    body, ctype = body.encode(), "text/plain; charset=utf-8"
                headers = {"Content-Type": ctype, **reply.headers}
                try:
                    self.send_response(reply.status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # the client gave up (a timeout test): nothing to report
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve
            do_PROPFIND = do_REPORT = do_OPTIONS = _serve

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> ApiServer:
        # A short poll interval keeps shutdown (and so each test's teardown) fast.
        threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def on(self, method: str, path: str, *replies: Reply, fn: Route | None = None) -> None:
        self.routes[(method, path)] = fn if fn is not None else list(replies)

    def reply_for(self, seen: Seen) -> Reply:
        route = self.routes.get((seen.method, urlsplit(seen.path).path))
        if route is None:
            return Reply(status=404, body={"message": "Not Found"})
        if callable(route):
            return route(seen)
        return route.pop(0) if len(route) > 1 else route[0]

    def hits(self, path: str) -> list[Seen]:
        return [s for s in self.seen if urlsplit(s.path).path == path]


@pytest.fixture
def server() -> Iterator[ApiServer]:
    api = ApiServer().start()
    yield api
    api.stop()


class FakeTime:
    """A clock that only moves when the code under test sleeps (or the test says so)."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def closed_port() -> int:
    """A loopback port nothing listens on (connection refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def make_api(
    base: str, time: FakeTime, *, environ: dict[str, str] | None = None, **options: Any
) -> HttpApi:
    source = ApiSource(name="demo", base_url=base, **options)
    return HttpApi(
        source, policy=LOCAL, sleep=time.sleep, clock=time, wall_clock=time, environ=environ or {}
    )


async def test_json_answer_comes_back_with_user_agent_and_host(server: ApiServer) -> None:
    server.on("GET", "/v1/items", Reply(body={"items": [1, 2]}))
    api = make_api(server.base + "/v1", FakeTime(), user_agent="heron-test/1")
    response = await api.get("items", params={"q": "a b"})
    assert response.json() == {"items": [1, 2]}
    assert response.age_s is None
    seen = server.seen[0]
    assert seen.query == {"q": "a b"}
    assert seen.headers["user-agent"] == "heron-test/1"
    assert seen.headers["host"] == server.base.removeprefix("http://")


async def test_cached_answer_is_reused_until_its_ttl_runs_out(server: ApiServer) -> None:
    server.on("GET", "/rates", Reply(body={"n": 1}), Reply(body={"n": 2}))
    time = FakeTime()
    api = make_api(server.base, time, cache_ttl_s=60)
    assert (await api.get("rates")).json() == {"n": 1}
    time.now += 30
    cached = await api.get("rates")
    assert cached.json() == {"n": 1} and cached.age_s == 30
    assert len(server.seen) == 1
    time.now += 31
    assert (await api.get("rates")).json() == {"n": 2}
    assert len(server.seen) == 2


async def test_429_with_short_retry_after_is_waited_out_once(server: ApiServer) -> None:
    server.on(
        "GET",
        "/q",
        Reply(status=429, body={"message": "slow down"}, headers={"Retry-After": "3"}),
        Reply(body={"ok": True}),
    )
    time = FakeTime()
    api = make_api(server.base, time, max_wait_s=5)
    assert (await api.get("q")).json() == {"ok": True}
    assert time.sleeps == [3.0]
    assert len(server.seen) == 2


async def test_429_with_long_retry_after_is_a_rate_limited_error(server: ApiServer) -> None:
    server.on("GET", "/q", Reply(status=429, body="busy", headers={"Retry-After": "120"}))
    time = FakeTime()
    with pytest.raises(ApiError) as caught:
        await make_api(server.base, time, max_wait_s=5).get("q")
    error = caught.value
    assert error.kind == "rate_limited" and error.retry_after_s == 120 and error.status == 429
    assert "try again in 120 s" in str(error)
    assert time.sleeps == [] and len(server.seen) == 1
    result = error.to_result()
    assert not result.success
    assert result.data == {"error": "rate_limited", "source": "demo", "status": 429} | {
        "retry_after_s": 120
    }


async def test_retry_after_as_http_date_is_measured_against_the_wall_clock(
    server: ApiServer,
) -> None:
    time = FakeTime()
    when = formatdate(time.now + 90, usegmt=True)
    server.on("GET", "/q", Reply(status=503, body="maintenance", headers={"Retry-After": when}))
    with pytest.raises(ApiError) as caught:
        await make_api(server.base, time, max_wait_s=5).get("q")
    assert caught.value.kind == "rate_limited"
    assert caught.value.retry_after_s == pytest.approx(90, abs=1)


async def test_403_with_exhausted_rate_limit_headers_is_rate_limited(server: ApiServer) -> None:
    time = FakeTime()
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(time.now) + 600)}
    server.on(
        "GET", "/q", Reply(status=403, body={"message": "API rate limit exceeded"}, headers=headers)
    )
    with pytest.raises(ApiError) as caught:
        await make_api(server.base, time).get("q")
    assert caught.value.kind == "rate_limited"
    assert caught.value.retry_after_s == pytest.approx(600, abs=1)


async def test_garbage_instead_of_json_is_a_bad_response_quoting_its_start(
    server: ApiServer,
) -> None:
    server.on(
        "GET",
        "/q",
        Reply(body=b"<html>Gateway hiccup</html>", headers={"Content-Type": "text/html"}),
    )
    response = await make_api(server.base, FakeTime()).get("q")
    with pytest.raises(ApiError) as caught:
        response.json()
    assert caught.value.kind == "bad_response"
    assert "<html>Gateway hiccup" in str(caught.value)


async def test_connection_refused_is_unreachable_and_nothing_was_sent() -> None:
    api = make_api(f"http://127.0.0.1:{closed_port()}", FakeTime())
    with pytest.raises(ApiError) as caught:
        await api.get("q")
    assert caught.value.kind == "unreachable"
    assert "nothing was sent" in str(caught.value)


async def test_no_answer_in_time_is_a_timeout(server: ApiServer) -> None:
    release = threading.Event()
    server.on("GET", "/slow", Reply(body={}, wait=release))
    try:
        with pytest.raises(ApiError) as caught:
            await make_api(server.base, FakeTime(), timeout_s=0.2).get("slow")
    finally:
        release.set()
    assert caught.value.kind == "timeout"


async def test_local_rate_limit_waits_when_short_and_refuses_when_long(server: ApiServer) -> None:
    server.on("GET", "/q", Reply(body={}))
    time = FakeTime()
    api = make_api(server.base, time, rate_limit=RateLimit(calls=2, per_s=3), max_wait_s=5)
    for _ in range(3):
        await api.get("q", cache=False)
    assert time.sleeps == [3.0]
    strict = make_api(server.base, time, rate_limit=RateLimit(calls=1, per_s=60), max_wait_s=5)
    await strict.get("q")
    with pytest.raises(ApiError) as caught:
        await strict.get("q", cache=False)
    assert caught.value.kind == "rate_limited" and caught.value.retry_after_s == 60
    assert len(server.seen) == 4


async def test_credential_comes_from_the_environment_and_is_never_echoed(
    server: ApiServer,
) -> None:
    def echo(seen: Seen) -> Reply:
        return Reply(status=401, body={"message": f"bad token {seen.headers['authorization']}"})

    server.on("GET", "/me", fn=echo)
    credential = Credential(env="DEMO_TOKEN")
    api = make_api(server.base, FakeTime(), environ={"DEMO_TOKEN": SECRET}, credential=credential)
    with pytest.raises(ApiError) as caught:
        await api.get("me")
    assert server.seen[0].headers["authorization"] == f"Bearer {SECRET}"
    error = caught.value
    assert error.kind == "auth"
    assert SECRET not in str(error) and SECRET not in error.body and "[redacted]" in str(error)
    assert SECRET not in json.dumps(error.to_result().data)


async def test_missing_credential_is_refused_before_anything_is_sent(server: ApiServer) -> None:
    api = make_api(server.base, FakeTime(), credential=Credential(env="DEMO_TOKEN"))
    with pytest.raises(ApiError) as caught:
        await api.get("me")
    assert caught.value.kind == "credentials" and "$DEMO_TOKEN" in str(caught.value)
    assert server.seen == []


async def test_query_credential_is_scrubbed_from_the_returned_url(server: ApiServer) -> None:
    server.on("GET", "/q", Reply(body={}))
    credential = Credential(env="KEY", query="apikey")
    api = make_api(server.base, FakeTime(), environ={"KEY": SECRET}, credential=credential)
    response = await api.get("q", params={"s": "x"})
    assert server.seen[0].query == {"s": "x", "apikey": SECRET}
    assert SECRET not in response.url


async def test_credentials_do_not_follow_a_redirect_to_another_origin(server: ApiServer) -> None:
    other = ApiServer().start()
    try:
        other.on("GET", "/landing", Reply(body={"here": True}))
        server.on("GET", "/go", Reply(status=302, headers={"Location": other.base + "/landing"}))
        credential = Credential(env="TOKEN")
        api = make_api(server.base, FakeTime(), environ={"TOKEN": SECRET}, credential=credential)
        assert (await api.get("go")).json() == {"here": True}
        assert server.seen[0].headers["authorization"] == f"Bearer {SECRET}"
        assert "authorization" not in other.seen[0].headers
    finally:
        other.stop()


async def test_post_is_never_redirected(server: ApiServer) -> None:
    server.on("POST", "/hook", Reply(status=307, headers={"Location": "/elsewhere"}))
    with pytest.raises(ApiError) as caught:
        await make_api(server.base, FakeTime()).send("POST", "hook", json_body={"a": 1})
    assert caught.value.status == 307 and "not followed" in str(caught.value)
    assert [s.path for s in server.seen] == ["/hook"]
    assert json.loads(server.seen[0].body) == {"a": 1}


async def test_url_policy_refuses_loopback_unless_allowed(server: ApiServer) -> None:
    source = ApiSource(name="demo", base_url=server.base)
    with pytest.raises(ApiError) as caught:
        await HttpApi(source, policy=UrlPolicy()).get("q")
    assert caught.value.kind == "refused" and "loopback" in str(caught.value)
    assert server.seen == []


async def test_an_answer_over_the_byte_cap_is_too_large(server: ApiServer) -> None:
    server.on("GET", "/big", Reply(body=b"x" * 5000))
    with pytest.raises(ApiError) as caught:
        await make_api(server.base, FakeTime(), max_bytes=1000).get("big")
    assert caught.value.kind == "too_large"


async def test_error_statuses_map_to_stable_kinds(server: ApiServer) -> None:
    server.on("GET", "/missing", Reply(status=404, body={"message": "Not Found"}))
    server.on("GET", "/invalid", Reply(status=422, body={"message": "Validation Failed"}))
    server.on("GET", "/boom", Reply(status=500, body="internal"))
    api = make_api(server.base, FakeTime())
    kinds = {}
    for path in ("missing", "invalid", "boom"):
        with pytest.raises(ApiError) as caught:
            await api.get(path)
        kinds[path] = (caught.value.kind, str(caught.value))
    assert kinds["missing"] == ("not_found", "demo: HTTP 404 Not Found: Not Found")
    assert kinds["invalid"][0] == "rejected" and "Validation Failed" in kinds["invalid"][1]
    assert kinds["boom"][0] == "http" and "internal" in kinds["boom"][1]


def test_link_header_is_parsed_by_relation() -> None:
    header = (
        '<https://api.example.com/repositories/1/issues?page=2>; rel="next", '
        '<https://api.example.com/repositories/1/issues?page=5>; rel="last"'
    )
    assert parse_links(header) == {
        "next": "https://api.example.com/repositories/1/issues?page=2",
        "last": "https://api.example.com/repositories/1/issues?page=5",
    }
    assert parse_links("") == {}
