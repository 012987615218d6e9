"""The gateway's front door over real HTTP (uvicorn on loopback, httpx, the `websockets`
client): the `Host` asked for, tokens, roles, rate limits on a fake clock, the console's cookie
with CSRF and `Origin`, and the one body limit."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.requests import HTTPConnection
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from heron._support.clock import FakeClock
from heron.always_on.http import HttpFront
from heron.gateway.app import Gateway
from heron.gateway.auth import FAILURES, RateLimiter, address_of, hash_token
from heron.gateway.config import GatewayConfig

ADMIN = "the-admin-token"
VIEWER = "the-viewer-token"


class Front:
    def __init__(self, gateway: Gateway, front: HttpFront, clock: FakeClock) -> None:
        self.gateway = gateway
        self.url = front.url()
        self.clock = clock
        self.origin = self.url


@contextlib.asynccontextmanager
async def serving(**settings: Any) -> AsyncIterator[Front]:
    clock = FakeClock()
    config = GatewayConfig.model_validate(
        {
            "tokens": [{"principal": "val", "role": "viewer", "sha256": hash_token(VIEWER)}],
            "limits": {"requests_per_minute": 60, "burst": 3, "max_body": 2048},
            **settings,
        }
    )
    gateway = Gateway(config, clock=clock, environ={"HERON_GATEWAY_TOKEN": ADMIN})
    http = HttpFront(gateway.routes(), addresses=[("127.0.0.1", 0)], max_body=2048)
    await http.start()
    try:
        yield Front(gateway, http, clock)
    finally:
        await http.aclose()
        gateway.close()


@pytest.fixture
async def front() -> AsyncIterator[Front]:
    async with serving() as served:
        yield served


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_no_or_an_unknown_token_is_401_and_a_token_is_never_answered(front: Front) -> None:
    async with httpx.AsyncClient(base_url=front.url, trust_env=False) as client:
        assert (await client.get("/v1/whoami")).status_code == 401
        assert (await client.get("/v1/whoami", headers=bearer("nope"))).status_code == 401
        me = await client.get("/v1/whoami", headers=bearer(ADMIN))
    assert me.json() == {"principal": "admin", "role": "admin", "via": "token"}
    assert ADMIN not in me.text


async def test_the_rate_limit_is_per_principal_and_refills_with_time(front: Front) -> None:
    async with httpx.AsyncClient(base_url=front.url, trust_env=False) as client:
        codes = [
            (await client.get("/v1/whoami", headers=bearer(VIEWER))).status_code for _ in range(4)
        ]
        other = await client.get("/v1/whoami", headers=bearer(ADMIN))
        limited = await client.get("/v1/whoami", headers=bearer(VIEWER))
        front.clock.advance(1.0)  # 60 a minute: one more request per second
        again = await client.get("/v1/whoami", headers=bearer(VIEWER))
    assert codes == [200, 200, 200, 429]
    assert other.status_code == 200
    assert limited.status_code == 429 and limited.headers["retry-after"] == "1"
    assert again.status_code == 200


async def test_a_viewer_may_not_change_anything(front: Front) -> None:
    async with httpx.AsyncClient(base_url=front.url, trust_env=False) as client:
        refused = await client.post(
            "/v1/approvals/apr-1", json={"decision": "yes"}, headers=bearer(VIEWER)
        )
    assert refused.status_code == 403 and "viewer" in refused.json()["error"]


async def test_the_console_cookie_needs_csrf_and_the_own_origin_for_every_change(
    front: Front,
) -> None:
    async with httpx.AsyncClient(base_url=front.url, trust_env=False) as client:
        wrong = await client.post("/v1/login", json={"token": "nope"})
        login = await client.post("/v1/login", json={"token": VIEWER})
        cookie = login.headers["set-cookie"]
        csrf = login.json()["csrf"]
        me = await client.get("/v1/whoami")
        without_csrf = await client.post("/v1/logout", headers={"Origin": front.origin})
        without_origin = await client.post("/v1/logout", headers={"X-CSRF-Token": csrf})
        foreign = await client.post(
            "/v1/logout", headers={"X-CSRF-Token": csrf, "Origin": "http://evil.example"}
        )
        bearer_foreign = await client.post(
            "/v1/logout", headers={**bearer(ADMIN), "Origin": "http://evil.example"}
        )
        done = await client.post(
            "/v1/logout", headers={"X-CSRF-Token": csrf, "Origin": front.origin}
        )
        after = await client.get("/v1/whoami")
    assert wrong.status_code == 401
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and VIEWER not in login.text
    assert me.json() == {"principal": "val", "role": "viewer", "via": "cookie", "csrf": csrf}
    assert [r.status_code for r in (without_csrf, without_origin, foreign, bearer_foreign)] == [
        403,
        403,
        403,
        403,
    ]
    assert done.status_code == 200 and after.status_code == 401


async def test_a_non_ascii_csrf_token_or_bearer_token_is_refused_not_a_crash(
    front: Front,
) -> None:
    not_ascii = "jeton-\u00e9t\u00e9".encode()  # read by the server as latin-1: not ASCII
    async with httpx.AsyncClient(base_url=front.url, trust_env=False) as client:
        await client.post("/v1/login", json={"token": VIEWER})
        csrf = await client.post(
            "/v1/logout", headers={b"X-CSRF-Token": not_ascii, b"Origin": front.origin.encode()}
        )
        token = await client.get("/v1/whoami", headers={b"Authorization": b"Bearer " + not_ascii})
        still = await client.get("/v1/whoami")
    assert csrf.status_code == 403
    assert csrf.json() == {"error": "missing or wrong CSRF token"}
    assert token.status_code == 401 and token.json() == {"error": "unknown token"}
    assert still.json()["via"] == "cookie"  # the refused logout left the login open


async def test_a_wrong_method_is_a_json_405_naming_the_allowed_ones(front: Front) -> None:
    async with httpx.AsyncClient(base_url=front.url, trust_env=False) as client:
        login = await client.get("/v1/login")
        whoami = await client.delete("/v1/whoami", headers=bearer(ADMIN))
        stream = await client.post("/v1/sessions/default/events", headers=bearer(ADMIN))
    for response, allowed in ((login, "POST"), (whoami, "GET, HEAD"), (stream, "GET, HEAD")):
        assert response.status_code == 405
        assert response.headers["allow"] == allowed
        assert response.headers["content-type"] == "application/json"
        assert response.json() == {
            "error": f"method {response.request.method} is not allowed here (allowed: {allowed})"
        }


async def test_one_body_limit_for_declared_and_streamed_bodies(front: Front) -> None:
    big = b'{"token": "' + b"x" * 4096 + b'"}'

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(big), 512):
            yield big[i : i + 512]

    async with httpx.AsyncClient(base_url=front.url, trust_env=False) as client:
        declared = await client.post("/v1/login", content=big)
        streamed = await client.post("/v1/login", content=chunks())
        fine = await client.get("/healthz")
    assert declared.status_code == 413 and streamed.status_code == 413
    assert fine.status_code == 503  # no server attached: starting


def port_of(front: Front) -> int:
    return int(front.url.rsplit(":", 1)[1])


async def test_a_host_the_gateway_does_not_serve_is_421_before_any_route_runs(
    front: Front,
) -> None:
    # A DNS-rebinding page: attacker.example resolves to 127.0.0.1, Host and Origin agree.
    port = port_of(front)
    rebound = {"Host": f"attacker.example:{port}", "Origin": f"http://attacker.example:{port}"}
    async with httpx.AsyncClient(base_url=front.url, trust_env=False) as client:
        refused = [
            await client.get("/healthz", headers=rebound),
            await client.get("/", headers=rebound),
            await client.get("/console/console.js", headers=rebound),
            await client.post("/v1/login", json={"token": VIEWER}, headers=rebound),
            await client.get("/v1/whoami", headers={**rebound, **bearer(ADMIN)}),
            await client.delete("/v1/whoami", headers=rebound),
            await client.get("/v1/whoami", headers={"Host": "127.0.0.1:1", **bearer(ADMIN)}),
        ]
        served = []
        for name in ("localhost", "127.0.0.1", "[::1]", "LocalHost"):
            front.clock.advance(1.0)  # the admin's own rate limit is not what is tested
            headers = {"Host": f"{name}:{port}", **bearer(ADMIN)}
            served.append((await client.get("/v1/whoami", headers=headers)).status_code)
    for response in refused:
        assert response.status_code == 421, (response.request.url, response.text)
        assert response.headers["content-type"] == "application/json"
        assert "does not answer to Host" in response.json()["error"]
    assert "set-cookie" not in refused[3].headers  # no console login was opened
    assert served == [200, 200, 200, 200]


async def test_a_websocket_for_a_host_the_gateway_does_not_serve_is_refused_at_its_handshake(
    front: Front,
) -> None:
    port = port_of(front)

    async def handshake(host: str) -> int:
        # The socket goes to loopback whatever the URL's name: what a rebound name does.
        sock = socket.create_connection(("127.0.0.1", port))
        headers = {**bearer(ADMIN), "Origin": f"http://{host}:{port}"}
        url = f"ws://{host}:{port}/v1/sessions/main/ws"
        with pytest.raises(InvalidStatus) as refused:
            async with connect(url, sock=sock, additional_headers=headers, proxy=None):
                pass
        return refused.value.response.status_code

    assert await handshake("attacker.example") == 421
    assert await handshake("127.0.0.1") == 503  # past the door: no server runs behind it


async def test_the_origin_is_checked_against_the_gateways_own_origins_not_the_host() -> None:
    async with serving(public_url="https://heron.example") as public:
        port = port_of(public)

        async def logout(host: str, origin: str) -> int:
            public.clock.advance(1.0)  # the admin's own rate limit is not what is tested
            headers = {"Host": host, "Origin": origin, **bearer(ADMIN)}
            async with httpx.AsyncClient(base_url=public.url, trust_env=False) as client:
                return (await client.post("/v1/logout", headers=headers)).status_code

        assert await logout("heron.example", "https://heron.example") == 200
        assert await logout("heron.example:443", "https://heron.example") == 200
        assert await logout(f"127.0.0.1:{port}", f"http://localhost:{port}") == 200
        # The origin the Host would make is not one of the gateway's pages.
        assert await logout("heron.example", "http://heron.example") == 403
        assert await logout(f"127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}") == 403
        assert await logout("heron.example:8443", "https://heron.example:8443") == 421


async def test_unknown_tokens_from_one_address_are_limited_and_then_no_token_is_looked_at(
    front: Front,
) -> None:
    port = port_of(front)
    async with httpx.AsyncClient(base_url=front.url, trust_env=False) as client:
        failed = [
            (await client.get("/v1/whoami", headers=bearer(f"guess-{i}"))).status_code
            for i in range(FAILURES - 1)
        ]
        right = await client.get("/v1/whoami", headers=bearer(VIEWER))  # neither counts nor resets
        last = await client.get("/v1/whoami", headers=bearer("guess-last"))
        blocked = await client.get("/v1/whoami", headers=bearer(ADMIN))
        login = await client.post("/v1/login", json={"token": ADMIN})
        with pytest.raises(InvalidStatus) as socket_refused:
            url = f"ws://127.0.0.1:{port}/v1/sessions/main/ws"
            async with connect(url, additional_headers=bearer(ADMIN), proxy=None):
                pass
        front.clock.advance(6.0)  # ten a minute: one more try every six seconds
        again = await client.get("/v1/whoami", headers=bearer(ADMIN))
        wrong = await client.get("/v1/whoami", headers=bearer("guess-again"))
        still = await client.get("/v1/whoami", headers=bearer(ADMIN))
    elsewhere = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
    async with httpx.AsyncClient(base_url=front.url, transport=elsewhere) as other:
        other_address = await other.get("/v1/whoami", headers=bearer(ADMIN))
    assert failed == [401] * (FAILURES - 1) and right.status_code == 200
    assert last.status_code == 401
    for refused in (blocked, login):
        assert refused.status_code == 429 and refused.headers["retry-after"] == "6"
        assert refused.json() == {"error": "too many unknown tokens from this address; retry later"}
    assert socket_refused.value.response.status_code == 429
    assert again.status_code == 200 and wrong.status_code == 401 and still.status_code == 429
    assert other_address.status_code == 200


def test_a_limiter_remembers_a_bounded_number_of_names_the_least_recent_forgotten_first() -> None:
    limiter = RateLimiter(per_minute=1, burst=1, clock=FakeClock(), max_names=3)
    assert [limiter.take(name) for name in "abc"] == [None, None, None]
    assert limiter.take("a") == 60.0  # refused, and now the most recently seen
    assert limiter.take("d") is None  # `b` is forgotten
    assert len(limiter) == 3
    assert limiter.take("b") is None  # a full allowance again; `c` is forgotten
    assert limiter.wait("a") == 60.0 and limiter.wait("d") == 60.0
    assert len(limiter) == 3


def test_failures_are_counted_by_address_an_ipv6_one_by_its_64() -> None:
    def counted_as(host: str) -> str:
        return address_of(HTTPConnection({"type": "http", "client": (host, 1), "headers": []}))

    assert counted_as("2001:db8:1:2:aaaa::1") == counted_as("2001:db8:1:2:ffff::9")
    assert counted_as("2001:db8:1:2::5") == "2001:db8:1:2::/64"
    assert counted_as("192.0.2.7") == "192.0.2.7"


async def test_a_wrong_method_and_a_foreign_host_are_counted_in_the_metrics(front: Front) -> None:
    async with httpx.AsyncClient(base_url=front.url, trust_env=False) as client:
        await client.delete("/v1/whoami", headers=bearer(ADMIN))
        await client.get("/v1/login")
        await client.get("/healthz", headers={"Host": "attacker.example"})
        metrics = (await client.get("/metrics", headers=bearer(ADMIN))).text
    for route, status in (("/v1/whoami", 405), ("/v1/login", 405), ("/healthz", 421)):
        assert f'heron_gateway_requests_total{{route="{route}",status="{status}"}} 1' in metrics
