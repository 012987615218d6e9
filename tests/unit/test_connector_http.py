"""HttpApi against a real HTTP server on 127.0.0.1: caching, rate limits, Retry-After,
garbage answers, unreachable hosts, credentials that never leak, and the URL policy."""

from __future__ import annotations

import json
import threading
from email.utils import formatdate
from typing import Any

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
from support.clock import FakeTime
from support.connectors import LOCAL, ApiServer, Reply, Seen, closed_port

SECRET = "s3cr3t-token-value-42"


def make_api(
    base: str, fake_time: FakeTime, *, environ: dict[str, str] | None = None, **options: Any
) -> HttpApi:
    source = ApiSource(name="demo", base_url=base, **options)
    return HttpApi(source, policy=LOCAL, environ=environ or {}, **fake_time.seams)


async def test_json_answer_comes_back_with_user_agent_and_host(api_server: ApiServer) -> None:
    api_server.on("GET", "/v1/items", Reply(body={"items": [1, 2]}))
    api = make_api(api_server.base + "/v1", FakeTime(), user_agent="heron-test/1")
    response = await api.get("items", params={"q": "a b"})
    assert response.json() == {"items": [1, 2]}
    assert response.age_s is None
    seen = api_server.seen[0]
    assert seen.query == {"q": "a b"}
    assert seen.headers["user-agent"] == "heron-test/1"
    assert seen.headers["host"] == api_server.base.removeprefix("http://")


async def test_cached_answer_is_reused_until_its_ttl_runs_out(api_server: ApiServer) -> None:
    api_server.on("GET", "/rates", Reply(body={"n": 1}), Reply(body={"n": 2}))
    fake_time = FakeTime()
    api = make_api(api_server.base, fake_time, cache_ttl_s=60)
    assert (await api.get("rates")).json() == {"n": 1}
    fake_time.advance(30)
    cached = await api.get("rates")
    assert cached.json() == {"n": 1} and cached.age_s == 30
    assert len(api_server.seen) == 1
    fake_time.advance(31)
    assert (await api.get("rates")).json() == {"n": 2}
    assert len(api_server.seen) == 2


async def test_429_with_short_retry_after_is_waited_out_once(api_server: ApiServer) -> None:
    api_server.on(
        "GET",
        "/q",
        Reply(status=429, body={"message": "slow down"}, headers={"Retry-After": "3"}),
        Reply(body={"ok": True}),
    )
    fake_time = FakeTime()
    api = make_api(api_server.base, fake_time, max_wait_s=5)
    assert (await api.get("q")).json() == {"ok": True}
    assert fake_time.sleeps == [3.0]
    assert len(api_server.seen) == 2


async def test_429_with_long_retry_after_is_a_rate_limited_error(api_server: ApiServer) -> None:
    api_server.on("GET", "/q", Reply(status=429, body="busy", headers={"Retry-After": "120"}))
    fake_time = FakeTime()
    with pytest.raises(ApiError) as caught:
        await make_api(api_server.base, fake_time, max_wait_s=5).get("q")
    error = caught.value
    assert error.kind == "rate_limited" and error.retry_after_s == 120 and error.status == 429
    assert "try again in 120 s" in str(error)
    assert fake_time.sleeps == [] and len(api_server.seen) == 1
    result = error.to_result()
    assert not result.success
    assert result.data == {"error": "rate_limited", "source": "demo", "status": 429} | {
        "retry_after_s": 120
    }


async def test_retry_after_as_http_date_is_measured_against_the_wall_clock(
    api_server: ApiServer,
) -> None:
    fake_time = FakeTime()
    when = formatdate(fake_time.time() + 90, usegmt=True)
    api_server.on("GET", "/q", Reply(status=503, body="maintenance", headers={"Retry-After": when}))
    with pytest.raises(ApiError) as caught:
        await make_api(api_server.base, fake_time, max_wait_s=5).get("q")
    assert caught.value.kind == "rate_limited"
    assert caught.value.retry_after_s == pytest.approx(90, abs=1)


async def test_403_with_exhausted_rate_limit_headers_is_rate_limited(api_server: ApiServer) -> None:
    fake_time = FakeTime()
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(fake_time.time()) + 600)}
    api_server.on(
        "GET", "/q", Reply(status=403, body={"message": "API rate limit exceeded"}, headers=headers)
    )
    with pytest.raises(ApiError) as caught:
        await make_api(api_server.base, fake_time).get("q")
    assert caught.value.kind == "rate_limited"
    assert caught.value.retry_after_s == pytest.approx(600, abs=1)


async def test_garbage_instead_of_json_is_a_bad_response_quoting_its_start(
    api_server: ApiServer,
) -> None:
    api_server.on(
        "GET",
        "/q",
        Reply(body=b"<html>Gateway hiccup</html>", headers={"Content-Type": "text/html"}),
    )
    response = await make_api(api_server.base, FakeTime()).get("q")
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


async def test_no_answer_in_time_is_a_timeout(api_server: ApiServer) -> None:
    release = threading.Event()
    api_server.on("GET", "/slow", Reply(body={}, wait=release))
    try:
        with pytest.raises(ApiError) as caught:
            await make_api(api_server.base, FakeTime(), timeout_s=0.2).get("slow")
    finally:
        release.set()
    assert caught.value.kind == "timeout"


async def test_local_rate_limit_waits_when_short_and_refuses_when_long(
    api_server: ApiServer,
) -> None:
    api_server.on("GET", "/q", Reply(body={}))
    fake_time = FakeTime()
    api = make_api(api_server.base, fake_time, rate_limit=RateLimit(calls=2, per_s=3), max_wait_s=5)
    for _ in range(3):
        await api.get("q", cache=False)
    assert fake_time.sleeps == [3.0]
    strict = make_api(
        api_server.base, fake_time, rate_limit=RateLimit(calls=1, per_s=60), max_wait_s=5
    )
    await strict.get("q")
    with pytest.raises(ApiError) as caught:
        await strict.get("q", cache=False)
    assert caught.value.kind == "rate_limited" and caught.value.retry_after_s == 60
    assert len(api_server.seen) == 4


async def test_credential_comes_from_the_environment_and_is_never_echoed(
    api_server: ApiServer,
) -> None:
    def echo(seen: Seen) -> Reply:
        return Reply(status=401, body={"message": f"bad token {seen.headers['authorization']}"})

    api_server.on("GET", "/me", fn=echo)
    credential = Credential(env="DEMO_TOKEN")
    api = make_api(
        api_server.base, FakeTime(), environ={"DEMO_TOKEN": SECRET}, credential=credential
    )
    with pytest.raises(ApiError) as caught:
        await api.get("me")
    assert api_server.seen[0].headers["authorization"] == f"Bearer {SECRET}"
    error = caught.value
    assert error.kind == "auth"
    assert SECRET not in str(error) and SECRET not in error.body and "[redacted]" in str(error)
    assert SECRET not in json.dumps(error.to_result().data)


async def test_missing_credential_is_refused_before_anything_is_sent(api_server: ApiServer) -> None:
    api = make_api(api_server.base, FakeTime(), credential=Credential(env="DEMO_TOKEN"))
    with pytest.raises(ApiError) as caught:
        await api.get("me")
    assert caught.value.kind == "credentials" and "$DEMO_TOKEN" in str(caught.value)
    assert api_server.seen == []


async def test_query_credential_is_scrubbed_from_the_returned_url(api_server: ApiServer) -> None:
    api_server.on("GET", "/q", Reply(body={}))
    credential = Credential(env="KEY", query="apikey")
    api = make_api(api_server.base, FakeTime(), environ={"KEY": SECRET}, credential=credential)
    response = await api.get("q", params={"s": "x"})
    assert api_server.seen[0].query == {"s": "x", "apikey": SECRET}
    assert SECRET not in response.url


async def test_credentials_do_not_follow_a_redirect_to_another_origin(
    api_server: ApiServer,
) -> None:
    other = ApiServer().start()
    try:
        other.on("GET", "/landing", Reply(body={"here": True}))
        api_server.on(
            "GET", "/go", Reply(status=302, headers={"Location": other.base + "/landing"})
        )
        credential = Credential(env="TOKEN")
        api = make_api(
            api_server.base, FakeTime(), environ={"TOKEN": SECRET}, credential=credential
        )
        assert (await api.get("go")).json() == {"here": True}
        assert api_server.seen[0].headers["authorization"] == f"Bearer {SECRET}"
        assert "authorization" not in other.seen[0].headers
    finally:
        other.stop()


async def test_post_is_never_redirected(api_server: ApiServer) -> None:
    api_server.on("POST", "/hook", Reply(status=307, headers={"Location": "/elsewhere"}))
    with pytest.raises(ApiError) as caught:
        await make_api(api_server.base, FakeTime()).send("POST", "hook", json_body={"a": 1})
    assert caught.value.status == 307 and "not followed" in str(caught.value)
    assert [s.path for s in api_server.seen] == ["/hook"]
    assert json.loads(api_server.seen[0].body) == {"a": 1}


async def test_url_policy_refuses_loopback_unless_allowed(api_server: ApiServer) -> None:
    source = ApiSource(name="demo", base_url=api_server.base)
    with pytest.raises(ApiError) as caught:
        await HttpApi(source, policy=UrlPolicy()).get("q")
    assert caught.value.kind == "refused" and "loopback" in str(caught.value)
    assert api_server.seen == []


async def test_an_answer_over_the_byte_cap_is_too_large(api_server: ApiServer) -> None:
    api_server.on("GET", "/big", Reply(body=b"x" * 5000))
    with pytest.raises(ApiError) as caught:
        await make_api(api_server.base, FakeTime(), max_bytes=1000).get("big")
    assert caught.value.kind == "too_large"


async def test_error_statuses_map_to_stable_kinds(api_server: ApiServer) -> None:
    api_server.on("GET", "/missing", Reply(status=404, body={"message": "Not Found"}))
    api_server.on("GET", "/invalid", Reply(status=422, body={"message": "Validation Failed"}))
    api_server.on("GET", "/boom", Reply(status=500, body="internal"))
    api = make_api(api_server.base, FakeTime())
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
