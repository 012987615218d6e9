"""`heron serve` killed with SIGKILL and restarted: nothing is lost and nothing happens twice.

The first server sets a timer, starts a background job and is busy in a tool when three
instant messages arrive over its webhook (acknowledged, so durable). Then it is killed -9 with
the timer pending, the job running and the three events queued. The second server, started on
the same state, closes the call the crash left open, consumes the queued events exactly once,
re-attaches the job and reports its end, and fires the timer.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx

from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.messages import ToolResultMessage, UserMessage
from heron.safety.signing import signed_headers
from heron.sessions.repair import INTERRUPTED_RESULT
from support.cli import TIMEOUT_S, Heron, Running

SECRET = "restart-test-secret"
SESSION = "main"
JOB = 'while [ ! -f go ]; do sleep 0.02; done; echo "build finished: 0 errors"'
MESSAGES = ("first question", "second question", "third question")


def serve(heron: Heron, script: str) -> Running:
    return heron.start(
        "serve",
        "--model",
        script,
        "--session",
        SESSION,
        "--workspace",
        "ws",
        "--webhook-port",
        "0",
        "--subscribe",
        "im",
        "--autonomy",
        "full",
        "--poll-interval",
        "0.1",
        "--tools",
        heron.tools(),
    )


def post_im(url: str, message_id: str, text: str) -> None:
    body = json.dumps(
        {"platform": "chat", "message_id": message_id, "sender": {"id": "U9"}, "text": text}
    ).encode()
    headers = signed_headers(SECRET.encode(), body, time.time())
    response = httpx.post(f"{url}/im", content=body, headers=headers, trust_env=False)
    assert response.status_code == 202, response.text


def rows(state_dir: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    bus = SqliteBusStore.open(state_dir)
    try:
        return bus.sessions.conn.execute(sql, params).fetchall()
    finally:
        bus.close()


def events(state_dir: Path) -> list[tuple[BusEvent, bool]]:
    found = rows(state_dir, "SELECT body, consumed_at FROM bus_events ORDER BY seq")
    return [(BusEvent.model_validate_json(body), done is not None) for body, done in found]


def test_a_killed_server_restarts_with_its_timer_job_and_queued_events_intact(
    heron: Heron,
) -> None:
    heron.env["HERON_WEBHOOK_SECRET"] = SECRET
    workspace = heron.root / "ws"
    workspace.mkdir()
    first = heron.script(
        "first.yaml",
        [
            {
                "tool_calls": [
                    {
                        "id": "c_timer",
                        "name": "set_timer",
                        "arguments": {"message": "check on the build", "after_s": 3},
                    },
                    {"id": "c_job", "name": "start_job", "arguments": {"command": JOB}},
                ],
                "expect": {"last_message_contains": "start the build"},
            },
            {"text": "Timer set and build started."},
            {
                "tool_calls": [{"id": "c_wait", "name": "wait_forever", "arguments": {}}],
                "expect": {"last_message_contains": "think it over"},
            },
        ],
    )
    second = heron.script(
        "second.yaml",
        [
            {
                "text": "Answered all three.",
                "expect": {"last_message_contains": "3 instant messages"},
            },
            *({"text": "Noted."} for _ in range(4)),
        ],
    )
    bus = SqliteBusStore.open(heron.state_dir)
    try:  # the operator's request is already waiting when the server starts
        request = BusEvent(
            kind="user.input",
            source="user",
            channel="cli",
            session=SESSION,
            content=EventContent(text="set a timer and start the build"),
        )
        assert asyncio.run(bus.publish(request)) is True
    finally:
        bus.close()

    try:
        one = serve(heron, first)
        url = one.wait_for_event("serve_started")["webhook"]
        one.wait_for_event("final", text="Timer set and build started.")
        post_im(url, "m0", "think it over")
        one.wait_for_event("tool_call", name="wait_forever")
        for index, text in enumerate(MESSAGES, 1):
            post_im(url, f"m{index}", text)
        [(timer_id, fires, next_fire)] = rows(
            heron.state_dir, "SELECT id, fires, next_fire FROM timers"
        )
        [(job_id, job_state)] = rows(heron.state_dir, "SELECT id, state FROM jobs")
        assert fires == 0 and next_fire > time.time(), "the timer fired before the kill"
        assert job_state == "working"
        one.proc.kill()  # SIGKILL: no cleanup of any kind
        one.proc.wait(timeout=TIMEOUT_S)
        pending = [e.content.text for e, done in events(heron.state_dir) if not done]
        assert pending == list(MESSAGES)

        two = serve(heron, second)
        two.wait_for_event("serve_started")
        two.wait_for_event("final", text="Answered all three.")
        (workspace / "go").touch()
        deadline = time.monotonic() + TIMEOUT_S
        while not _settled(heron.state_dir):
            assert time.monotonic() < deadline, "the job's end and the timer never arrived"
            two.wait_for_event("final")
        two.proc.terminate()  # SIGTERM: a clean stop
        finished = two.finish()
    finally:
        (workspace / "go").touch()  # never leave the detached job behind
    assert finished.code == 0, finished.stderr
    assert finished.events()[-1]["type"] == "serve_stopped"

    # Exactly once: every event consumed, each of its texts in the history once.
    stored = events(heron.state_dir)
    assert all(done for _, done in stored)
    keys = [e.idempotency_key for e, _ in stored if e.idempotency_key]
    assert len(keys) == len(set(keys))
    bus = SqliteBusStore.open(heron.state_dir)
    try:
        history = bus.sessions.load(SESSION)
    finally:
        bus.close()
    prompts = "\n".join(m.content for m in history if isinstance(m, UserMessage))
    for text in ("set a timer and start the build", "think it over", *MESSAGES):
        assert prompts.count(text) == 1, text
    # The call the crash interrupted was closed, not left open or run again.
    closed = [m for m in history if isinstance(m, ToolResultMessage) and m.call_id == "c_wait"]
    assert [m.content for m in closed] == [INTERRUPTED_RESULT]
    # The job started by the first server was re-attached and its end reported once.
    kinds = [e.kind for e, _ in stored]
    assert kinds.count("job.exit") == 1 and kinds.count("timer.trigger") == 1
    assert prompts.count(f"background job {job_id}") == 1
    assert "build finished: 0 errors" in prompts
    assert rows(heron.state_dir, "SELECT state, reported FROM jobs") == [("completed", 1)]
    assert rows(heron.state_dir, "SELECT state, fires FROM timers") == [("done", 1)]
    assert prompts.count("check on the build") == 1

    # The listing commands read the same state (run side by side: each is a process start).
    listings = [
        heron.start(*command, "--session", SESSION, "--json")
        for command in (("jobs", "list"), ("timers", "list"), ("events", "tail", "--limit", "99"))
    ]
    jobs, timers, tail = (
        [json.loads(line) for line in run.finish().stdout.splitlines()] for run in listings
    )
    assert [(j["job_id"], j["state"]) for j in jobs] == [(job_id, "completed")]
    assert [(t["timer_id"], t["state"]) for t in timers] == [(timer_id, "done")]
    assert len(tail) == len(stored) and all(t["consumed"] for t in tail)


def _settled(state_dir: Path) -> bool:
    done = {e.kind for e, consumed in events(state_dir) if consumed}
    return {"job.exit", "timer.trigger"} <= done


def test_serve_refuses_to_listen_for_unsigned_webhooks(heron: Heron) -> None:
    heron.env.pop("HERON_WEBHOOK_SECRET", None)
    result = heron.run("serve", "--model", heron.script("s.yaml", []), "--webhook-port", "0")
    assert result.code == 2 and result.stdout == ""
    assert "webhooks need a signing secret in $HERON_WEBHOOK_SECRET" in result.stderr
