"""call_webhook against a loopback receiver that checks the HMAC signature on its own,
deduplicates by Idempotency-Key, and misbehaves on request."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from heron import ToolContext, ToolResult
from heron.connectors.webhooks import WebhookConfig, webhook_tools
from heron.safety.idempotency import IdempotencyStore
from heron.safety.sqlite_idempotency import SqliteIdempotencyLedger
from heron.safety.url_policy import UrlPolicy
from heron.tools.definition import Tool
from support.clock import FakeTime
from support.connectors import LOCAL, ApiServer, Reply, Seen, closed_port

CTX = ToolContext(call_id="c0", turn_id="t0")
SECRET = "whsec-9d8c7b6a5f4e3d2c"
PAYLOAD: dict[str, Any] = {"event": "build.failed", "build": 1432, "data": {"steps": [{"n": 7}]}}


class Receiver:
    """Verifies every delivery independently of heron's code and remembers the keys it saw."""

    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.verified: list[bool] = []
        self.keys: list[str] = []
        server.on("POST", "/hook", fn=self.receive)

    def receive(self, seen: Seen) -> Reply:
        stamp = seen.headers.get("x-heron-timestamp", "")
        expected = hmac.new(SECRET.encode(), f"{stamp}.".encode() + seen.body, hashlib.sha256)
        good = seen.headers.get("x-heron-signature") == "sha256=" + expected.hexdigest()
        self.verified.append(good)
        self.keys.append(seen.headers.get("idempotency-key", ""))
        if not good:
            return Reply(status=401, body={"error": "bad signature"})
        return Reply(body={"received": json.loads(seen.body)["event"]})


@pytest.fixture(autouse=True)
def secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)


def build(tmp_path: Path, fake_time: FakeTime, **options: Any) -> Tool:
    config = WebhookConfig(secret_env="TEST_WEBHOOK_SECRET", **({"policy": LOCAL} | options))
    store = IdempotencyStore(SqliteIdempotencyLedger(tmp_path / "state"))
    (webhook,) = webhook_tools(config, store, **fake_time.seams)
    return webhook


async def run(webhook: Tool, **arguments: Any) -> ToolResult:
    return await webhook.execute(webhook.validate(arguments), CTX)


async def test_delivery_is_signed_and_the_receiver_verifies_it(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    receiver = Receiver(api_server)
    result = await run(
        build(tmp_path, fake_time),
        url=f"{api_server.base}/hook",
        payload=PAYLOAD,
        idempotency_key="b-1432",
    )
    assert result.success, result.error
    assert receiver.verified == [True] and receiver.keys == ["b-1432"]
    seen = api_server.seen[0]
    assert seen.body == b'{"event":"build.failed","build":1432,"data":{"steps":[{"n":7}]}}'
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["x-heron-timestamp"] == str(int(fake_time.time()))
    assert result.data["response"] == {"received": "build.failed"}
    assert "HTTP 200" in result.output and SECRET not in f"{result.output}{result.data}"


async def test_a_retry_with_the_same_key_is_not_sent_again(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    Receiver(api_server)
    webhook = build(tmp_path, fake_time)
    args = {"url": f"{api_server.base}/hook", "payload": PAYLOAD, "idempotency_key": "b-1432"}
    first = await run(webhook, **args)
    second = await run(webhook, **args)
    assert first.success and second.success and second.data["replayed"] is True
    assert len(api_server.seen) == 1
    other = await run(webhook, **args | {"payload": {"event": "something else"}})
    assert not other.success and other.data["error"] == "idempotency_conflict"
    assert len(api_server.seen) == 1


async def test_without_a_key_one_is_made_and_named(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    receiver = Receiver(api_server)
    result = await run(build(tmp_path, fake_time), url=f"{api_server.base}/hook", payload=PAYLOAD)
    key = result.data["idempotency_key"]
    assert key.startswith("heron-") and receiver.keys == [key] and key in result.output


async def test_a_receiver_refusal_is_not_delivered_and_frees_the_key(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = Receiver(api_server)
    webhook = build(tmp_path, fake_time)
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", "the-wrong-secret")
    args = {"url": f"{api_server.base}/hook", "payload": PAYLOAD, "idempotency_key": "k1"}
    refused = await run(webhook, **args)
    assert not refused.success and refused.data["error"] == "not_performed"
    assert "HTTP 401" in (refused.error or "") and "'k1'" in (refused.error or "")
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    retried = await run(webhook, **args)
    assert retried.success and receiver.verified == [False, True]
    assert receiver.keys == ["k1", "k1"]


async def test_unreachable_receiver_is_not_delivered(fake_time: FakeTime, tmp_path: Path) -> None:
    result = await run(
        build(tmp_path, fake_time), url=f"http://127.0.0.1:{closed_port()}/hook", payload=PAYLOAD
    )
    assert not result.success and result.data["error"] == "not_performed"
    assert "could not connect" in (result.error or "") and "nothing was sent" in (
        result.error or ""
    )


async def test_rate_limited_receiver_is_waited_out_or_reported(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    api_server.on(
        "POST",
        "/hook",
        Reply(status=429, body="slow down", headers={"Retry-After": "2"}),
        Reply(body={"ok": True}),
    )
    waited = await run(build(tmp_path, fake_time), url=f"{api_server.base}/hook", payload=PAYLOAD)
    assert waited.success and fake_time.sleeps == [2.0] and len(api_server.seen) == 2
    api_server.on("POST", "/later", Reply(status=429, body="busy", headers={"Retry-After": "600"}))
    reported = await run(
        build(tmp_path, fake_time), url=f"{api_server.base}/later", payload=PAYLOAD
    )
    assert not reported.success and "try again in 600 s" in (reported.error or "")


async def test_no_answer_is_outcome_unknown_and_never_resent(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    release = threading.Event()
    api_server.on("POST", "/slow", Reply(body={"ok": True}, wait=release))
    webhook = build(tmp_path, fake_time, timeout_s=0.2)
    args = {"url": f"{api_server.base}/slow", "payload": PAYLOAD, "idempotency_key": "slow-1"}
    try:
        first = await run(webhook, **args)
    finally:
        release.set()
    assert not first.success and first.data["error"] == "outcome_unknown"
    assert "Idempotency-Key slow-1" in (first.error or "")
    again = await run(webhook, **args)
    assert not again.success and len(api_server.seen) == 1


async def test_garbage_json_answer_is_noted_but_the_delivery_stands(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    api_server.on(
        "POST", "/hook", Reply(body=b"{oops", headers={"Content-Type": "application/json"})
    )
    result = await run(build(tmp_path, fake_time), url=f"{api_server.base}/hook", payload=PAYLOAD)
    assert result.success and "not valid JSON" in result.output and "response" not in result.data


async def test_policy_allow_list_and_missing_secret_stop_before_sending(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Receiver(api_server)
    default_policy = build(tmp_path, fake_time, policy=UrlPolicy())
    refused = await run(default_policy, url=f"{api_server.base}/hook", payload=PAYLOAD)
    assert not refused.success and "loopback" in (refused.error or "")
    listed = build(tmp_path, fake_time, allowed_urls=("https://hooks.example.com/heron/",))
    outside = await run(listed, url=f"{api_server.base}/hook", payload=PAYLOAD)
    assert not outside.success and "not under an allowed webhook URL" in (outside.error or "")
    monkeypatch.delenv("TEST_WEBHOOK_SECRET")
    unsigned = await run(build(tmp_path, fake_time), url=f"{api_server.base}/hook", payload=PAYLOAD)
    assert not unsigned.success and "$TEST_WEBHOOK_SECRET" in (unsigned.error or "")
    assert api_server.seen == []
    with pytest.raises(ValueError):
        WebhookConfig(secret_env="S", allowed_urls=("https://hooks.example.com",))
