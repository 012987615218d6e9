"""One real `heron serve` hosting two sessions, with an MCP server.

Signed webhooks reach two sessions — one named by the `X-Heron-Session` header, one by the path
(`/webhook/<session>`) — and the default session stays where it was. In one session the scripted
model calls a tool of the SDK-built probe MCP server (`[mcp.servers]` in heron.toml, connected
lazily by serve). Each history is valid and holds only its own session's traffic. The session
named by the header is parked after its idle timeout — its writer lock released, so `heron run
--session` may write it meanwhile — and woken again by a later webhook.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from heron.messages import AssistantMessage, ToolResultMessage, UserMessage
from heron.models.history_rules import HistoryChecker
from heron.safety.signing import signed_headers
from heron.sessions.lock import SessionInUseError, SessionLock
from heron.sessions.sqlite_store import SqliteSessionStore
from support.cli import Heron, Running
from support.mcp_servers import probe_server

SECRET = "sessions-test-secret"


def post(url: str, path: str, payload: dict[str, Any], **headers: str) -> httpx.Response:
    body = json.dumps(payload).encode()
    signed = {**signed_headers(SECRET.encode(), body, time.time()), **headers}
    return httpx.post(f"{url}{path}", content=body, headers=signed, trust_env=False)


def history(state_dir: Path, session: str) -> list[Any]:
    store = SqliteSessionStore.open(state_dir)
    try:
        return store.load(session)
    finally:
        store.close()


def text_of(messages: list[Any]) -> str:
    return "\n".join(
        m.content if isinstance(m, UserMessage | ToolResultMessage) else m.text for m in messages
    )


def wait_for(running: Running, type_: str, **fields: Any) -> dict[str, Any]:
    return running.wait_for_event(type_, **fields)


def test_two_sessions_and_an_mcp_call_under_one_serve(heron: Heron) -> None:
    heron.env["HERON_WEBHOOK_SECRET"] = SECRET
    server = probe_server()
    heron.write(
        "heron.toml",
        f"""[agent]
autonomy = "full"

[mcp.servers.probe]
command = {json.dumps(server["command"])}
args = {json.dumps(server["args"])}
""",
    )
    model = heron.script(
        "serve.yaml",
        [
            {
                "tool_calls": [{"id": "m1", "name": "probe__add", "arguments": {"a": 2, "b": 3}}],
                "expect": {"last_message_contains": "add 2 and 3"},
            },
            {"text": "Alpha: the sum is 5.", "expect": {"last_message_contains": "5"}},
            {"text": "Beta: hello to you.", "expect": {"last_message_contains": "hello beta"}},
            {"text": "Alpha: back again.", "expect": {"last_message_contains": "alpha again"}},
        ],
    )
    run_model = heron.script("run.yaml", [{"text": "Written while alpha was parked."}])
    serve = heron.start(
        "serve",
        "--model",
        model,
        "--webhook-port",
        "0",
        "--subscribe",
        "webhook",
        "--idle-timeout",
        "3",
        "--poll-interval",
        "0.2",
    )
    url = wait_for(serve, "serve_started")["webhook"]

    alpha = post(
        url, "/webhook", {"id": "a1", "text": "alpha: add 2 and 3"}, **{"X-Heron-Session": "alpha"}
    )
    assert alpha.status_code == 202, alpha.text
    assert wait_for(serve, "session_woken")["session"] == "alpha"
    called = wait_for(serve, "tool_result", id="m1")
    assert called["session"] == "alpha" and called["status"] == "ok", called
    assert called["data"] == {"total": 5}
    assert wait_for(serve, "final", text="Alpha: the sum is 5.")["session"] == "alpha"

    # Awake, alpha's writer lock is held: a second writer (`heron run --session alpha`) is
    # refused. (Checked with the lock itself: a `heron run` takes longer to start than alpha
    # stays awake here.)
    with pytest.raises(SessionInUseError):
        SessionLock(heron.state_dir, "alpha").acquire()

    beta = post(url, "/webhook/beta", {"id": "b1", "text": "hello beta"})
    assert beta.status_code == 202, beta.text
    assert wait_for(serve, "final", text="Beta: hello to you.")["session"] == "beta"

    # A copy of alpha's request replayed to another session is a duplicate, not a new event.
    replay = post(url, "/webhook/beta", {"id": "a1", "text": "alpha: add 2 and 3"})
    assert replay.status_code == 200 and replay.json()["status"] == "duplicate"

    parked = wait_for(serve, "session_parked")
    assert parked["session"] in {"alpha", "beta"}
    if parked["session"] != "alpha":
        assert wait_for(serve, "session_parked")["session"] == "alpha"

    # Parked, the lock is free: another process may write the session meanwhile.
    written = heron.run("run", "between", "--model", run_model, "--session", "alpha")
    assert written.code == 0, written.stderr

    again = post(
        url, "/webhook", {"id": "a2", "text": "alpha again"}, **{"X-Heron-Session": "alpha"}
    )
    assert again.status_code == 202, again.text
    assert wait_for(serve, "session_woken")["session"] == "alpha"
    assert wait_for(serve, "final", text="Alpha: back again.")["session"] == "alpha"

    serve.interrupt()
    done = serve.finish()
    assert done.code == 0, done.stderr
    assert "mcp:" not in done.stderr

    one, two = history(heron.state_dir, "alpha"), history(heron.state_dir, "beta")
    for messages in (one, two):
        HistoryChecker().check(messages)
    assert "alpha: add 2 and 3" in text_of(one) and "alpha again" in text_of(one)
    assert "Written while alpha was parked." in text_of(one)
    assert "hello beta" not in text_of(one)
    assert "hello beta" in text_of(two) and "alpha" not in text_of(two).lower()
    [result] = [m for m in one if isinstance(m, ToolResultMessage)]
    assert result.call_id == "m1" and '"total": 5' in result.content
    assert [m.text for m in one if isinstance(m, AssistantMessage) and m.text] == [
        "Alpha: the sum is 5.",
        "Written while alpha was parked.",
        "Alpha: back again.",
    ]
    assert history(heron.state_dir, "default") == []
