"""A real `heron serve` fed hostile input: every bad webhook is refused once with a 4xx (never
"retry later"), a poison event is quarantined instead of crash-looping the server across
restarts, and the agent goes on with the next event."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import httpx

from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.safety.signing import signed_headers
from support.cli import Heron, Running

SECRET = "bad-input-test-secret"
SESSION = "main"


def serve(heron: Heron, script: str) -> Running:
    return heron.start(
        "serve",
        "--model",
        script,
        "--session",
        SESSION,
        "--webhook-port",
        "0",
        "--subscribe",
        "webhook",
        "--poll-interval",
        "0.1",
    )


def post(url: str, body: bytes) -> httpx.Response:
    headers = signed_headers(SECRET.encode(), body, time.time())
    return httpx.post(f"{url}/webhook", content=body, headers=headers, trust_env=False)


def stored(heron: Heron) -> list[tuple[str, Any]]:
    bus = SqliteBusStore.open(heron.state_dir)
    try:
        return [(s.event.kind, s.consumed) for s in asyncio.run(bus.events(session=SESSION))]
    finally:
        bus.close()


def test_hostile_webhooks_are_refused_once_and_a_poison_event_never_crash_loops_serve(
    heron: Heron,
) -> None:
    heron.env["HERON_WEBHOOK_SECRET"] = SECRET
    bus = SqliteBusStore.open(heron.state_dir)
    try:  # waiting when the server starts: a request, and an event a newer heron wrote
        good = BusEvent(
            kind="user.input",
            source="user",
            channel="cli",
            session=SESSION,
            content=EventContent(text="hello there"),
        )
        future = BusEvent(
            kind="user.input",
            source="user",
            channel="cli",
            session=SESSION,
            content=EventContent(text="from the future"),
        )
        assert asyncio.run(bus.publish_many([good, future])) == [True, True]
        body = future.model_dump_json().replace('"user.input"', '"user.telepathy"')
        with bus.sessions.conn:
            bus.sessions.conn.execute(
                "UPDATE bus_events SET body = ?, kind = ? WHERE id = ?",
                (body, "user.telepathy", future.id),
            )
    finally:
        bus.close()
    first = heron.script(
        "first.yaml",
        [
            {"text": "Hello!", "expect": {"last_message_contains": "hello there"}},
            {
                "text": "An event was set aside; I told the operator.",
                "expect": {"last_message_contains": "could not be processed and was set aside"},
            },
            {"text": "Deploy noted.", "expect": {"last_message_contains": "deploy 7 done"}},
        ],
    )
    one = serve(heron, first)
    url = one.wait_for_event("serve_started")["webhook"]
    one.wait_for_event("final", text="Hello!")
    one.wait_for_event("final", text="An event was set aside; I told the operator.")

    deep = b'{"id": "deep-1", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    refused = {
        "surrogate": post(url, b'{"id": "s-1", "text": "half a character: \\ud800"}'),
        "deep": post(url, deep),
        "nan": post(url, b'{"id": "n-1", "text": "hi", "load": NaN}'),
        "huge": post(url, b'{"id": "h-1", "count": 1' + b"0" * 400 + b"}"),
        "not utf-8": post(url, b'{"id": "u-1", "text": "caf\xe9"}'),
        "too large": post(url, b'{"text": "' + b"x" * 2_000_000 + b'"}'),
    }
    codes = {name: response.status_code for name, response in refused.items()}
    assert codes == {
        "surrogate": 422,
        "deep": 422,
        "nan": 422,
        "huge": 422,
        "not utf-8": 400,
        "too large": 413,
    }
    assert all(r.json()["status"] == "invalid" for r in refused.values())
    assert "text: text holds a lone surrogate (\\ud800)" in refused["surrogate"].json()["error"]
    assert "nested more than 64 levels deep" in refused["deep"].json()["error"]
    assert "load: expected a finite number, got NaN" in refused["nan"].json()["error"]
    # A refused request stays refused: sent again, it is refused again and never stored.
    assert post(url, deep).status_code == 422

    accepted = post(url, json.dumps({"id": "d-7", "text": "deploy 7 done"}).encode())
    assert accepted.status_code == 202, accepted.text
    one.wait_for_event("final", text="Deploy noted.")
    one.proc.terminate()
    finished = one.finish()
    assert finished.code == 0, finished.stderr
    assert "event " + future.id + " (user.telepathy) quarantined" in finished.stderr

    # The restarted server does not meet the poison event again, nor announce it twice.
    second = heron.script(
        "second.yaml", [{"text": "Still here.", "expect": {"last_message_contains": "ping"}}]
    )
    two = serve(heron, second)
    url = two.wait_for_event("serve_started")["webhook"]
    assert post(url, json.dumps({"id": "p-1", "text": "ping"}).encode()).status_code == 202
    two.wait_for_event("final", text="Still here.")
    two.proc.terminate()
    assert two.finish().code == 0

    kinds = stored(heron)
    assert kinds == [
        ("user.input", True),
        ("system.dead_letter", True),
        ("webhook.received", True),
        ("webhook.received", True),
    ]
    tail = heron.run("events", "tail", "--dead", "--json")
    assert tail.code == 0, tail.stderr
    [letter] = [json.loads(line) for line in tail.stdout.splitlines()]
    assert (letter["event_id"], letter["kind"], letter["attempts"]) == (
        future.id,
        "user.telepathy",
        0,
    )
    assert letter["error"].startswith("the stored event cannot be read: ")
    assert letter["event"] is None
    shown = heron.run("events", "tail", "--dead")
    assert future.id in shown.stdout and "attempts=0" in shown.stdout


def test_slow_and_idle_senders_are_cut_off_and_a_webhook_gets_through_after(heron: Heron) -> None:
    heron.env["HERON_WEBHOOK_SECRET"] = SECRET
    heron.write("heron.toml", "[gateway.limits]\nmax_connections = 3\nhead_timeout_s = 3\n")
    script = heron.script("script.yaml", [{"text": "Got it.", "expect": {"last_role": "user"}}])
    running = serve(heron, script)
    url = running.wait_for_event("serve_started")["webhook"]
    host, port = url.removeprefix("http://").split(":")

    # Three senders that never finish their heads hold every slot...
    slow = [socket.create_connection((host, int(port)), timeout=30) for _ in range(3)]
    for sock in slow:
        sock.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Le")
    busy = post(url, b'{"id": "b-1", "text": "busy?"}')
    assert (busy.status_code, busy.headers["retry-after"]) == (503, "1")
    # ...until their three seconds are up: each is answered 408 and closed by the server.
    for sock in slow:
        with sock:
            answer = b"".join(iter(lambda s=sock: s.recv(4096), b""))
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n")

    accepted = post(url, json.dumps({"id": "w-1", "text": "after the slow ones"}).encode())
    assert accepted.status_code == 202
    running.wait_for_event("final", text="Got it.")
