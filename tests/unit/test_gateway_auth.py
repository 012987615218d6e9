"""The gateway's front door over real HTTP (uvicorn on loopback, httpx): tokens, roles, rate
limits on a fake clock, the console's cookie with CSRF and `Origin`, and the one body limit."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from heron._support.clock import FakeClock
from heron.always_on.http import HttpFront
from heron.gateway.app import Gateway
from heron.gateway.auth import hash_token
from heron.gateway.config import GatewayConfig

ADMIN = "the-admin-token"
VIEWER = "the-viewer-token"


class Front:
    def __init__(self, gateway: Gateway, front: HttpFront, clock: FakeClock) -> None:
        self.gateway = gateway
        self.url = front.url()
        self.clock = clock
        self.origin = self.url


@pytest.fixture
async def front() -> AsyncIterator[Front]:
    clock = FakeClock()
    config = GatewayConfig.model_validate(
        {
            "tokens": [{"principal": "val", "role": "viewer", "sha256": hash_token(VIEWER)}],
            "limits": {"requests_per_minute": 60, "burst": 3, "max_body": 2048},
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
