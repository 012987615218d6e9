"""The gateway's WebSocket endpoint (`/v1/sessions/{session}/ws`) of a real `heron serve`,
used with the `websockets` client on loopback: the frames of the event stream with the same
ids, resumed from a last id without a duplicate, and the same door — a token, or the console's
cookie from the gateway's own origin only."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from heron.gateway.auth import COOKIE
from support.cli import Heron
from support.gateway import (
    ADMIN,
    OPS,
    VIEWER,
    SseFrame,
    Stream,
    approve_the_pending_payment,
    bearer,
    durable,
    is_turn,
    post_webhook,
    start,
)

PAID = is_turn("text", text="Paid ACME 120.")


def socket_url(http: str, after: str | None = None) -> str:
    url = "ws://" + http.removeprefix("http://") + "/v1/sessions/main/ws"
    return url + (f"?after={after}" if after else "")


def opened(url: str, headers: dict[str, str] | None = None, **options: Any) -> ClientConnection:
    return connect(url, additional_headers=headers, proxy=None, open_timeout=30, **options)


def read(socket: ClientConnection, until: Callable[[SseFrame], bool]) -> list[SseFrame]:
    got: list[SseFrame] = []
    while True:
        message = json.loads(socket.recv(timeout=30))
        got.append(SseFrame(event=message["event"], data=message["data"], id=message["id"]))
        if until(got[-1]):
            return got


def test_a_run_is_watched_over_a_websocket_cut_and_resumed_with_the_streams_ids(
    heron: Heron,
) -> None:
    running, webhook, http = start(heron)
    with opened(socket_url(http), bearer(VIEWER)) as socket:
        post_webhook(webhook, "m1", "please pay ACME 120 for invoice 7")
        first = read(socket, is_turn("tool_result", id="c_pay"))
    assert first[-1].data["status"] == "awaiting_approval"
    approve_the_pending_payment(http)

    with opened(socket_url(http, after=first[-1].id), bearer(VIEWER)) as socket:
        second = read(socket, PAID)
    # The same frames and ids as the Server-Sent Events of the same store.
    replay = Stream(f"{http}/v1/sessions/main/events", bearer(ADMIN)).read(PAID)
    assert durable(first) + durable(second) == durable(replay)
    ids = [i for i, _, _ in durable(replay)]
    assert len(ids) == len(set(ids))
    # A program may name its last id in the header, as with SSE.
    resumed = {**bearer(VIEWER), "Last-Event-ID": str(first[-1].id)}
    with opened(socket_url(http), resumed) as socket:
        assert durable(read(socket, PAID)) == durable(second)
    # A cursor of another database: told to resync, with the cursor of now.
    with opened(socket_url(http, after="0123456789ab.1.1"), bearer(VIEWER)) as socket:
        [resync] = read(socket, lambda f: True)
    assert resync.event == "resync" and "another epoch" in resync.data["reason"]
    assert resync.id is not None and resync.id.split(".")[0] == ids[0].split(".")[0]
    running.proc.terminate()
    assert running.finish().code == 0


def test_a_websocket_needs_a_token_or_the_consoles_cookie_from_its_own_origin(
    heron: Heron,
) -> None:
    running, _webhook, http = start(heron)
    url = socket_url(http)
    for headers in (None, bearer("wrong")):
        with pytest.raises(InvalidStatus) as anonymous:
            opened(url, headers)
        assert anonymous.value.response.status_code == 401
    login = httpx.post(f"{http}/v1/login", json={"token": OPS}, trust_env=False)
    cookie = {"Cookie": f"{COOKIE}={login.cookies[COOKIE]}"}
    for origin in ("http://evil.example", None):
        with pytest.raises(InvalidStatus) as foreign:
            opened(url, cookie, origin=origin)
        assert foreign.value.response.status_code == 403, origin
    with pytest.raises(InvalidStatus) as token_elsewhere:
        opened(url, bearer(VIEWER), origin="http://evil.example")
    assert token_elsewhere.value.response.status_code == 403
    with opened(url, cookie, origin=http) as socket:
        sent = httpx.post(
            f"{http}/v1/sessions/main/messages",
            json={"text": "hello over the socket"},
            headers=bearer(OPS),
            trust_env=False,
        )
        event = sent.json()["event"]
        got = read(socket, lambda f: f.event == "bus" and f.data["event"]["id"] == event)
    assert ADMIN not in json.dumps([f.data for f in got])
    metrics = httpx.get(f"{http}/metrics", headers=bearer(ADMIN), trust_env=False).text
    assert (
        'heron_gateway_requests_total{route="/v1/sessions/{session:path}/ws",status="401"} 2'
        in (metrics)
    )
    running.proc.terminate()
    assert running.finish().code == 0
