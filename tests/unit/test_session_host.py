"""Many sessions in one `HeronServer`: the routing rule, waking and parking, locks, triggers,
and a wake whose cost does not grow with the history."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import hmac
import json
import logging
import re
import sqlite3
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from heron._support.clock import RealClock, timestamp
from heron.agent import Agent
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.bus.routing import (
    SessionAddress,
    check_hosted_name,
    quiet_session_name,
    route_session,
)
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.always_on.channels.adapters import WebhookRequest
from heron.always_on.server import HeronServer, ServeConfig, ServeError
from heron.messages import AssistantMessage, Message, ToolCallPart, ToolResultMessage, UserMessage
from heron.models.base import ModelRequest
from heron.models.history_rules import HistoryChecker
from heron.models.scripted import FunctionModel, ModelTurn
from heron.safety.signing import signed_headers
from heron.sessions.lock import SessionLock
from heron.sessions.repair import INTERRUPTED_RESULT
from heron.sessions.sqlite_store import SqliteSessionStore
from heron.sessions.store import SessionStore
from heron.sessions.writer import SessionWriter
from heron.tools.definition import Tool

SECRET = "host-test-secret"
BOUND = 10.0

Decide = Callable[[ModelRequest], "str | ModelTurn"]


# -- the rule -----------------------------------------------------------------------------------


def test_the_session_is_named_else_in_the_path_else_the_thread_else_the_default() -> None:
    everything = SessionAddress(named="a", path="b", thread="c")
    assert route_session(everything, "d") == "a"
    assert route_session(SessionAddress(path="b", thread="c"), "d") == "b"
    assert route_session(SessionAddress(thread="c"), "d") == "c"
    assert route_session(SessionAddress(), "d") == "d"
    assert route_session(SessionAddress(named="", path=""), "d") == "d"


def test_a_sessions_own_stores_cannot_be_addressed() -> None:
    assert check_hosted_name("team/alpha") == "team/alpha"
    for name in (quiet_session_name("alpha"), "alpha/side/e1", "", "-x", "a b", "a%2Fb"):
        with pytest.raises(ValueError):
            check_hosted_name(name)


# -- a server of many sessions --------------------------------------------------------------------


class Harness:
    def __init__(self, server: HeronServer) -> None:
        self.server = server
        self.records: list[dict[str, Any]] = []

    @property
    def host(self) -> Any:
        assert self.server.host is not None
        return self.server.host

    async def post(self, path: str, payload: dict[str, Any], **headers: str) -> dict[str, Any]:
        assert self.server.webhook is not None
        body = json.dumps(payload).encode()
        if path.startswith("/github"):
            digest = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
            signed = {"X-Hub-Signature-256": f"sha256={digest}", **headers}
        else:
            signed = {**signed_headers(SECRET.encode(), body, time.time()), **headers}
        request = WebhookRequest(
            method="POST",
            path=path,
            headers={k.lower(): v for k, v in signed.items()},
            body=body,
        )
        response = await self.server.webhook.handle(request)
        return {"code": response.status, **response.body}

    async def until(self, check: Callable[[], bool]) -> None:
        await _until(check)

    def parks(self, session: str) -> int:
        """How often `session` was parked so far."""
        return self.records.count({"type": "session_parked", "session": session})

    def history(self, session: str) -> list[Message]:
        assert self.server.bus is not None
        return self.server.bus.sessions.load(session)


@pytest.fixture
async def serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Callable[..., Any]]:
    monkeypatch.setenv("HERON_WEBHOOK_SECRET", SECRET)
    running: list[tuple[HeronServer, asyncio.Task[None]]] = []

    async def start(decide: Decide, **config: Any) -> Harness:
        harness: Harness

        def make_agent(tools: list[Tool]) -> Agent:
            agent = Agent(model=FunctionModel(decide), tools=tools, autonomy="full")
            names = {t.spec.name for t in tools}
            assert "set_timer" in names  # each session gets its own trigger tools
            return agent

        settings: dict[str, Any] = {
            "state_dir": tmp_path / "state",
            "workspace": tmp_path,
            "webhook_port": 0,
            "subscribe": ("webhook",),
            "idle_timeout_s": 0.2,
            "poll_interval_s": 0.05,
            **config,
        }
        server = HeronServer(
            ServeConfig(**settings),
            make_agent,
            announce=lambda record: harness.records.append(record),
        )
        harness = Harness(server)
        await server.start()
        running.append((server, asyncio.ensure_future(server.serve())))
        return harness

    yield start
    for server, task in running:
        server.stop()
        await asyncio.wait_for(task, BOUND)


WORDS = ("first", "second", "from elsewhere", "while down", "and now?")


def answer(text: str) -> Decide:
    """A model that says `text` and which of `WORDS` the last message holds."""

    def decide(request: ModelRequest) -> str:
        last = request.messages[-1]
        assert isinstance(last, UserMessage)
        said = [w for w in WORDS if w in last.content]
        return f"{text}: {said[0] if said else '?'}"

    return decide


async def test_each_way_in_reaches_its_session_and_each_session_has_its_own_agent(
    serve: Callable[..., Any],
) -> None:
    agents: list[Agent] = []

    def decide(request: ModelRequest) -> str:
        return "ok"

    h: Harness = await serve(decide, idle_timeout_s=60)
    named = await h.post(
        "/webhook", {"id": "1", "text": "to alpha"}, **{"X-Heron-Session": "alpha"}
    )
    in_path = await h.post("/github/team/beta", {"zen": "z"}, **{"X-GitHub-Event": "ping"})
    pathed = await h.post(
        "/im/team/beta",
        {"platform": "p", "message_id": "m", "sender": {"id": "u"}, "text": "to beta"},
    )
    default = await h.post("/webhook", {"id": "3", "text": "to the default"})
    assert [r["code"] for r in (named, in_path, default)] == [202, 200, 202]
    assert pathed == {"code": 200, "status": "filtered", "stored_in": "team/beta/quiet"}
    await h.until(lambda: len(h.history("alpha")) == 2 and len(h.history("default")) == 2)
    assert "to alpha" in str(h.history("alpha")[0]) and "to the default" in str(
        h.history("default")[0]
    )
    assert h.history("team/beta") == []  # filtered: no subscription to `im`
    for name in ("alpha", "default"):
        awake = h.host.awake[name]
        agents.append(awake.runtime.loop.agent)
    one, two = agents
    assert one is not two and one.approval is not two.approval
    assert one.registry is not two.registry


async def test_names_are_validated_and_an_allow_list_is_kept(serve: Callable[..., Any]) -> None:
    h: Harness = await serve(answer("ok"), sessions=frozenset({"alpha"}))
    bad = await h.post("/webhook", {"id": "1"}, **{"X-Heron-Session": "alpha/quiet"})
    refused = await h.post("/webhook/gamma", {"id": "2"})
    allowed = await h.post("/webhook/alpha", {"id": "3"})
    assert (bad["code"], bad["status"]) == (400, "invalid")
    assert refused == {
        "code": 403,
        "status": "refused",
        "error": "session 'gamma' is not served here",
    }
    assert allowed["code"] == 202
    assert not h.host.known("gamma")


async def test_a_key_is_stored_once_across_sessions(serve: Callable[..., Any]) -> None:
    h: Harness = await serve(answer("ok"))
    first = await h.post("/webhook/alpha", {"id": "k1", "text": "once"})
    copy = await h.post("/webhook/beta", {"id": "k1", "text": "once"})
    assert first["code"] == 202
    assert copy == {"code": 200, "status": "duplicate", "key": "webhook:generic:k1"}
    assert not h.host.known("beta")


async def test_a_failing_adapter_is_answered_503_and_logged(
    serve: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    h: Harness = await serve(answer("ok"))
    assert h.server.webhook is not None
    route = h.server.webhook.routes["/webhook"]

    def broken(*_args: Any) -> str | None:
        raise RuntimeError("the verifier broke")

    object.__setattr__(route.adapter, "verify", broken)
    with caplog.at_level(logging.ERROR):
        failed = await h.post("/webhook", {"id": "x"})
    assert failed["code"] == 503 and failed["status"] == "failed"
    assert "the verifier broke" in caplog.text


async def test_an_idle_session_is_parked_and_its_next_event_wakes_it(
    serve: Callable[..., Any],
) -> None:
    h: Harness = await serve(answer("seen"))
    await h.post("/webhook/alpha", {"id": "1", "text": "first"})
    await h.until(lambda: h.parks("alpha") == 1)
    assert len(h.history("alpha")) == 2
    # Parked: no task, no agent, and the writer lock is free.
    assert "alpha" not in h.host.awake
    lock = SessionLock(h.server.config.state_dir, "alpha")
    lock.acquire()
    lock.release()
    assert "default" in h.host.awake  # the server's own session is never parked

    await h.post("/webhook/alpha", {"id": "2", "text": "second"})
    await h.until(lambda: len(h.history("alpha")) == 4)
    assert [r for r in h.records if r.get("session") == "alpha"][-1]["type"] in {
        "session_woken",
        "session_parked",
    }
    assert h.records.count({"type": "session_woken", "session": "alpha"}) == 2
    texts = [m.text for m in h.history("alpha") if isinstance(m, AssistantMessage)]
    assert texts == ["seen: first", "seen: second"]


async def test_past_max_awake_a_wake_parks_the_least_recently_active_idle_session(
    serve: Callable[..., Any],
) -> None:
    h: Harness = await serve(answer("seen"), idle_timeout_s=60, max_awake=3)
    for name in ("alpha", "beta"):
        await h.post(f"/webhook/{name}", {"id": name, "text": "first"})
        await h.until(lambda name=name: len(h.history(name)) == 2)
    assert set(h.host.awake) == {"default", "alpha", "beta"}  # under the bound: all stay

    await h.post("/webhook/gamma", {"id": "gamma", "text": "first"})
    await h.until(lambda: h.parks("alpha") == 1)
    await h.until(lambda: len(h.history("gamma")) == 2)
    assert set(h.host.awake) == {"default", "beta", "gamma"}
    assert h.parks("beta") == 0 and h.parks("gamma") == 0

    await h.post("/webhook/alpha", {"id": "alpha-2", "text": "second"})  # wakes it again
    await h.until(lambda: len(h.history("alpha")) == 4)
    await h.until(lambda: h.parks("beta") == 1)
    assert set(h.host.awake) == {"default", "gamma", "alpha"}


async def test_a_burst_to_more_sessions_than_max_awake_waits_its_turn(
    serve: Callable[..., Any],
) -> None:
    h: Harness = await serve(answer("seen"), idle_timeout_s=60, max_awake=3)
    names = [f"burst-{i}" for i in range(6)]
    for name in names:  # all at once: at most two besides the default may be awake
        assert (await h.post(f"/webhook/{name}", {"id": name, "text": "first"}))["code"] == 202
    for name in names:
        await h.until(lambda name=name: len(h.history(name)) == 2)
    awake, most = {"default"}, 1
    for record in h.records:
        if record.get("type") == "session_woken":
            awake.add(record["session"])
        elif record.get("type") == "session_parked":
            awake.discard(record["session"])
        most = max(most, len(awake))
    assert most == 3


async def test_events_other_processes_write_are_found_by_the_poller(
    serve: Callable[..., Any], tmp_path: Path
) -> None:
    h: Harness = await serve(answer("polled"))
    await h.post("/webhook/alpha", {"id": "1", "text": "first"})
    await h.until(lambda: h.parks("alpha") == 1)
    other = SqliteBusStore.open(tmp_path / "state")  # another process's connection
    try:
        await other.publish(_event("alpha", "from elsewhere"))
        await other.publish(_event("stranger-session", "not ours"))
    finally:
        other.close()
    await h.until(lambda: len(h.history("alpha")) == 4)
    assert not h.host.known("stranger-session")  # no event was routed here for it
    assert h.history("stranger-session") == []


async def test_a_session_another_process_writes_waits_until_it_is_free(
    serve: Callable[..., Any],
) -> None:
    h: Harness = await serve(answer("later"))
    await h.post("/webhook/alpha", {"id": "1", "text": "first"})
    await h.until(lambda: h.parks("alpha") == 1)
    lock = SessionLock(h.server.config.state_dir, "alpha")  # e.g. `heron run --session alpha`
    lock.acquire()
    try:
        accepted = await h.post("/webhook/alpha", {"id": "2", "text": "second"})
        assert accepted["code"] == 202
        await asyncio.sleep(0.3)  # a few polls: each one finds the lock taken
        assert "alpha" in h.host.parked and len(h.history("alpha")) == 2
    finally:
        lock.release()
    await h.until(lambda: len(h.history("alpha")) == 4)


async def test_a_parked_session_is_woken_by_its_timer(serve: Callable[..., Any]) -> None:
    def decide(request: ModelRequest) -> str | ModelTurn:
        last = request.messages[-1]
        if isinstance(last, UserMessage) and "set one" in last.content:
            call = {"id": "t1", "name": "set_timer", "arguments": {"message": "ring", "after_s": 1}}
            return ModelTurn.model_validate({"tool_calls": [call]})
        if isinstance(last, ToolResultMessage):
            return "timer set"
        return "rang"

    h: Harness = await serve(decide)
    await h.post("/webhook/alpha", {"id": "1", "text": "set one"})
    await h.until(lambda: h.parks("alpha") == 1)
    assert h.host.parked["alpha"].alarm is not None
    await h.until(
        lambda: any(
            isinstance(m, AssistantMessage) and m.text == "rang" for m in h.history("alpha")
        )
    )
    assert "ring" in str(h.history("alpha")[-2])


async def test_a_session_with_a_running_job_stays_awake_until_the_job_is_reported(
    serve: Callable[..., Any], tmp_path: Path
) -> None:
    def decide(request: ModelRequest) -> str | ModelTurn:
        last = request.messages[-1]
        if isinstance(last, UserMessage) and "build" in last.content:
            command = f"while [ ! -f {tmp_path / 'go'} ]; do sleep 0.02; done; echo built"
            call = {"id": "j1", "name": "start_job", "arguments": {"command": command}}
            return ModelTurn.model_validate({"tool_calls": [call]})
        if isinstance(last, ToolResultMessage):
            return "started"
        return "reported"

    h: Harness = await serve(decide, idle_timeout_s=0.1)
    await h.post("/webhook/alpha", {"id": "1", "text": "start the build"})
    await h.until(lambda: any(getattr(m, "text", "") == "started" for m in h.history("alpha")))
    await asyncio.sleep(0.5)  # several idle timeouts: the job keeps it awake
    assert h.parks("alpha") == 0 and "alpha" in h.host.awake
    (tmp_path / "go").touch()
    await h.until(lambda: h.parks("alpha") == 1)
    assert "built" in str(h.history("alpha")[-2]) and h.history("alpha")[-1] == AssistantMessage(
        text="reported"
    )


async def test_a_restart_finds_the_pending_events_of_the_sessions_it_hosted(
    serve: Callable[..., Any], tmp_path: Path
) -> None:
    first: Harness = await serve(answer("one"))
    await first.post("/webhook/alpha", {"id": "1", "text": "first"})
    await first.until(lambda: len(first.history("alpha")) == 2)
    first.server.stop()
    await first.until(lambda: first.server.host is None)
    other = SqliteBusStore.open(tmp_path / "state")
    try:  # arrives while no server runs
        await other.publish(_event("alpha", "while down"))
    finally:
        other.close()
    second: Harness = await serve(answer("two"))
    await second.until(lambda: len(second.history("alpha")) == 4)
    assert second.history("alpha")[-1] == AssistantMessage(text="two: while down")


async def test_the_default_sessions_name_is_checked(tmp_path: Path) -> None:
    server = HeronServer(
        ServeConfig(state_dir=tmp_path, session="x/quiet"),
        lambda tools: Agent(model=FunctionModel(lambda _r: "ok"), tools=tools),
    )
    with pytest.raises(ServeError, match="quiet events"):
        await server.start()


async def test_a_port_in_use_is_a_serve_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERON_WEBHOOK_SECRET", SECRET)
    blocker = await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", 0)
    port = blocker.sockets[0].getsockname()[1]
    try:
        server = HeronServer(
            ServeConfig(state_dir=tmp_path, webhook_port=port),
            lambda tools: Agent(model=FunctionModel(lambda _r: "ok"), tools=tools),
        )
        with pytest.raises(
            ServeError,
            match=f"cannot listen for webhooks on 127.0.0.1:{port}: Address already in use$",
        ):
            await server.start()
    finally:
        blocker.close()
        await blocker.wait_closed()
    lock = SessionLock(tmp_path, "default")  # nothing left held
    lock.acquire()
    lock.release()


# -- mail threads -------------------------------------------------------------------------------


async def test_a_mail_reply_goes_to_the_session_of_its_thread(
    serve: Callable[..., Any], tmp_path: Path
) -> None:
    h: Harness = await serve(
        answer("mail"), subscribe=("mail", "webhook"), maildir=tmp_path / "Maildir"
    )
    assert h.server.mail is not None and h.server.threads is not None
    h.server.threads.record([("<sent-1@heron.test>", "alpha")], now=time.time())
    h.host.claim("alpha")
    box = h.server.mail.box
    box.deliver(_mail("<r1@corp.test>", "Re: plan", in_reply_to="<sent-1@heron.test>").as_bytes())
    box.deliver(_mail("<n1@corp.test>", "A new thread").as_bytes())
    await h.server.mail.scan()
    await h.until(lambda: len(h.history("alpha")) == 2 and len(h.history("default")) == 2)
    assert "Re: plan" in str(h.history("alpha")[0])
    assert "A new thread" in str(h.history("default")[0])
    # A reply to the reply, quoting only the thread's References, follows it too.
    box.deliver(
        _mail(
            "<r2@corp.test>", "Re: Re: plan", references="<sent-1@heron.test> <r1@corp.test>"
        ).as_bytes()
    )
    await h.server.mail.scan()
    await h.until(lambda: len(h.history("alpha")) == 4)


def _mail(
    message_id: str, subject: str, *, in_reply_to: str = "", references: str = ""
) -> EmailMessage:
    message = EmailMessage()
    message["From"] = "ana@corp.test"
    message["To"] = "me@home.test"
    message["Subject"] = subject
    message["Message-ID"] = message_id
    if in_reply_to:
        message["In-Reply-To"] = in_reply_to
    if references:
        message["References"] = references
    message.set_content("see subject")
    return message


def _event(session: str, text: str) -> BusEvent:
    return BusEvent(
        kind="user.input",
        source="user",
        channel="cli",
        session=session,
        content=EventContent(text=text),
        timestamp=timestamp(RealClock()),
    )


# -- the cost of a wake ---------------------------------------------------------------------------


def _long_history(store: SessionStore, session: str, rounds: int) -> None:
    messages: list[Message] = []
    for i in range(rounds):
        messages += [UserMessage(content=f"question {i}"), AssistantMessage(text=f"answer {i}")]
    # The last round was cut off mid-call: waking must close it.
    messages += [
        UserMessage(content="one more"),
        AssistantMessage(tool_calls=(ToolCallPart(id=f"c-{session}", name="t", arguments={}),)),
    ]
    store.append(session, messages)


async def _wake_cost(tmp_path: Path, rounds: int) -> tuple[int, list[str], list[Message]]:
    state = tmp_path / f"state-{rounds}"
    store = SqliteSessionStore.open(state)
    _long_history(store, "alpha", rounds)
    store.close()
    seen: list[list[Message]] = []

    def decide(request: ModelRequest) -> str:
        seen.append(list(request.messages))
        return "answered"

    server = HeronServer(
        ServeConfig(state_dir=state, workspace=tmp_path, idle_timeout_s=60),
        lambda tools: Agent(model=FunctionModel(decide), tools=tools, autonomy="full"),
    )
    await server.start()
    try:
        assert server.host is not None and server.bus is not None
        conn: sqlite3.Connection = server.bus.sessions.conn
        server.host.claim("alpha")
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0

        statements: list[str] = []
        conn.set_progress_handler(count, 1)
        conn.set_trace_callback(statements.append)
        try:
            assert await server.host.wake("alpha")
        finally:
            conn.set_progress_handler(None, 1)
            conn.set_trace_callback(None)
        # The statements, with the numbers they carry (ids, times) left out.
        woken = [re.sub(r"\d+(\.\d+)?", "N", s) for s in statements]
        serving = asyncio.ensure_future(server.serve())
        await server.bus.publish(_event("alpha", "and now?"))
        await _until(lambda: bool(seen))
        server.stop()
        await asyncio.wait_for(serving, BOUND)
    finally:
        await server.aclose()
    return steps[0], woken, seen[0]


async def _until(check: Callable[[], bool]) -> None:
    """Poll `check` until it holds, for at most `BOUND` seconds."""
    for _ in range(int(BOUND / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition did not hold in time")


async def test_waking_a_session_does_not_read_its_history(tmp_path: Path) -> None:
    short_steps, short_sql, short_request = await _wake_cost(tmp_path, 5)
    long_steps, long_sql, long_request = await _wake_cost(tmp_path, 3_000)
    # The same statements, and the same work in SQLite's virtual machine, for 12 entries and
    # for 6,002: the head, the last round, its repair, the pending events — never the rest.
    assert long_sql == short_sql
    assert long_steps == short_steps
    assert not any("ORDER BY entry_id" in s and "DESC" not in s for s in long_sql)
    # The model still reads the whole history, repaired: it is loaded when it is first called.
    assert len(long_request) == 2 * 3_000 + 4
    interrupted = long_request[-2]
    assert isinstance(interrupted, ToolResultMessage) and interrupted.content == INTERRUPTED_RESULT
    HistoryChecker().check(long_request)
    assert len(short_request) == 2 * 5 + 4


def test_a_lock_held_elsewhere_keeps_the_default_session_from_starting(tmp_path: Path) -> None:
    lock = SessionLock(tmp_path, "default")
    lock.acquire()
    try:
        server = HeronServer(
            ServeConfig(state_dir=tmp_path),
            lambda tools: Agent(model=FunctionModel(lambda _r: "ok"), tools=tools),
        )
        with pytest.raises(ServeError, match="in use"):
            asyncio.run(server.start())
    finally:
        lock.release()


async def test_a_parked_session_keeps_little_memory(tmp_path: Path) -> None:
    """Issue 17's budget is 20 KiB per idle session beyond its stored history."""
    server = HeronServer(
        ServeConfig(state_dir=tmp_path, workspace=tmp_path, idle_timeout_s=60),
        lambda tools: Agent(model=FunctionModel(lambda _r: "ok"), tools=tools, autonomy="full"),
    )
    await server.start()
    try:
        host = server.host
        assert host is not None

        async def cycle(names: list[str]) -> None:
            for name in names:
                host.claim(name)
                assert await host.wake(name)
                assert await host.park(name, force=True)

        await cycle([f"warm-{i}" for i in range(10)])  # caches filled once per process
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            await cycle([f"s-{i}" for i in range(40)])
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert list(host.awake) == ["default"] and len(host.parked) == 50
        assert grown / 40 < 20 * 1024, f"{grown / 40:.0f} bytes per parked session"
    finally:
        await server.aclose()


def test_the_tail_of_a_history_is_its_last_round_however_long(tmp_path: Path) -> None:
    store = SqliteSessionStore.open(tmp_path)
    try:
        calls = tuple(ToolCallPart(id=f"c{i}", name="t", arguments={}) for i in range(40))
        results = [ToolResultMessage(call_id=f"c{i}", name="t", content="ok") for i in range(37)]
        head = store.append(
            "s", [UserMessage(content="go"), AssistantMessage(tool_calls=calls), *results]
        )
        tail, tail_head = store.load_tail("s")
        assert tail_head == head and len(tail) == 38  # the round spans three chunks
        assert isinstance(tail[0], AssistantMessage) and tail[1:] == results
        assert store.load_tail("empty") == ([], 0)

        writer = SessionWriter.wake(store, "s")
        assert not writer.loaded and writer.open_calls == ()
        assert [r.call_id for r in writer.repaired] == ["c37", "c38", "c39"]
        assert writer.last == writer.repaired[-1] and writer.head == store.head("s")
        writer.stored(
            [UserMessage(content="next")],
            store.append("s", [UserMessage(content="next")], expected_last_entry=writer.head),
        )
        assert writer.last == UserMessage(content="next") and not writer.loaded
        assert len(writer.history) == 2 + 40 + 1 and writer.loaded
        assert "c0" in writer.call_ids
        HistoryChecker().check(writer.history)
    finally:
        store.close()


async def test_each_session_gets_its_own_view_of_the_processs_mcp_servers() -> None:
    from heron.config.schema import HeronConfig
    from heron.mcp.assembly import CAPABILITY_BUNDLE, assemble_tools
    from heron.mcp.shared import SharedMcp
    from heron.mcp.tool_search import ToolSearchTool
    from heron.tools.definition import ToolContext, ToolResult, ToolSpec
    from heron.tools.registry import ActivatedToolSet
    from heron.tools.validation import SchemaValidator

    class McpShaped:
        def __init__(self, name: str) -> None:
            schema: dict[str, Any] = {"type": "object", "properties": {}}
            self._spec = ToolSpec(
                name=name, description=f"{name} does a thing.", parameters=schema, owner="mcp:srv"
            )
            self._validator = SchemaValidator(name, schema)

        @property
        def spec(self) -> ToolSpec:
            return self._spec

        def validate(self, arguments: Any) -> dict[str, Any]:
            return self._validator.validate(arguments)

        async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
            return ToolResult.ok("done")

    config = HeronConfig.model_validate({"mcp": {"exposure": "deferred"}})
    tools = [McpShaped(f"srv__tool{i}") for i in range(3)]
    shared = assemble_tools(
        config.mcp,
        tools,
        autonomy="full",
        allowed_tools=None,
        excluded_tools=(),
        activated=ActivatedToolSet(),
    )
    views = SharedMcp(shared, config.mcp, autonomy="full", allowed_tools=None, excluded_tools=())
    one, two = views.session(), views.session()
    assert one.activated is not two.activated is not shared.activated
    assert one.catalogue is not None and one.catalogue.resolve("srv__tool1") is not None
    assert one.activated.names() == ["srv__tool1"] and two.activated.names() == []
    assert one.prompt_section == shared.prompt_section == two.prompt_section
    assert one.manager is None  # closing a session's view never stops the shared servers
    # One assembly for every view (its engine and catalogue), a search tool per session: what
    # a session's search loads is in its own set, never in another session's.
    assert one.engine is two.engine and one.tool_catalogue is two.tool_catalogue
    search_one, search_two = (
        next(t for t in v.bundles[CAPABILITY_BUNDLE] if isinstance(t, ToolSearchTool))
        for v in (one, two)
    )
    assert search_one is not search_two and search_one.engine is search_two.engine
    ctx = ToolContext(call_id="c1", turn_id="t1")
    found = await search_two.execute({"query": "select:srv__tool2"}, ctx)
    assert found.success, found.error
    assert two.activated.names() == ["srv__tool2"] and one.activated.names() == ["srv__tool1"]
    three = views.session()  # woken later: the same assembly, an empty set of its own
    assert three.activated.names() == [] and three.engine is one.engine
