"""The gateway's turn log commits with the history: a crash at any durable write leaves every
history entry of a turn with its log rows and no row without its entry, and after a restart
the event stream replays the run as it ended.

A child process runs an always-on turn (a tool round, then the answer) with the gateway's
recorder as the session store's companion, and hard-exits with `os._exit` right before its
N-th write transaction commits (the SQLite trace hook of the bus crash sweep), for every N.
The parent reads the database the crash left, then restarts the scenario and replays the
stream from the store.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from test_bus_crash import CRASHED, CommitCounter

from heron import Agent, CancelScope, FunctionModel, ModelTurn, tool
from heron._support.clock import FakeClock, RealClock
from heron.always_on.bus.loop import EventDrivenAgent
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.gateway.eventlog import TurnLog, TurnRecorder
from heron.gateway.postgres_store import PostgresTurnLog
from heron.gateway.sqlite_store import SqliteTurnLog
from heron.gateway.stream import Frame, Hub, session_frames
from heron.messages import AssistantMessage, Message, ToolCallPart, ToolResultMessage, UserMessage
from heron.models.base import ModelError, ModelPart, ModelRequest, StreamInterrupted, TextDelta
from heron.sessions.postgres_store import PostgresSessionStore
from heron.sessions.repair import INTERRUPTED_RESULT
from heron.sessions.sqlite_store import SqliteSessionStore
from heron.sessions.writer import SessionWriter
from heron.turn.events import (
    FinalEvent,
    TextDeltaEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from support.postgres import postgres_server, postgres_url

__all__ = ["postgres_server", "postgres_url"]  # fixtures, found by pytest here

SESSION = "main"
ANSWER = "It is in the drawer."
BOUND = 10.0
ASK = BusEvent(
    kind="user.input",
    source="user",
    channel="cli",
    session=SESSION,
    idempotency_key="ask-1",
    content=EventContent(text="where is the invoice?"),
)


def _model(request: ModelRequest) -> ModelTurn | str:
    """A pure function of the history, so a restarted run picks up where the crash left it."""
    if not any(isinstance(m, ToolResultMessage) for m in request.messages):
        return ModelTurn.model_validate(
            {"text": "Let me look.", "tool_calls": [{"id": "c1", "name": "look"}]}
        )
    return ANSWER


async def scenario(state_dir: Path, counter: CommitCounter | None = None) -> None:
    """Publish the question (idempotently) and answer it; safe to run again after a crash."""
    bus = SqliteBusStore.open(state_dir)
    if counter is not None:
        bus.sessions.conn.set_trace_callback(counter)
    recorder = TurnRecorder(
        SqliteTurnLog(bus.sessions.conn),
        clock=RealClock(),
        stored=lambda _s: None,
        live=lambda *_a: None,
    )
    bus.sessions.companions.append(recorder.written)

    @tool(read_only=True)
    def look() -> str:
        """Look in the drawer."""
        return "an invoice"

    agent = Agent(model=FunctionModel(_model), tools=[look])
    eda = EventDrivenAgent(agent, bus, bus.sessions, session=SESSION, sink=recorder.sink(SESSION))
    try:
        await eda.publish(ASK)
        await eda.run_until_idle()
    finally:
        await eda.aclose()
        bus.close()


def _child(state_dir: str, crash_at: int) -> None:
    try:
        asyncio.run(asyncio.wait_for(scenario(Path(state_dir), CommitCounter(crash_at)), BOUND))
    finally:
        os._exit(0)  # never return into the parent's test runner


def stored(state_dir: Path) -> tuple[list[Message], list[tuple[str, dict[str, Any]]]]:
    """The session's history and its turn-log rows, as the database holds them."""
    store = SqliteSessionStore.open(state_dir)
    try:
        history = store.load(SESSION)
        rows = store.conn.execute(
            "SELECT type, body FROM gateway_turn_events WHERE session = ? ORDER BY seq",
            (SESSION,),
        ).fetchall()
    except sqlite3.OperationalError:  # crashed before the log's table was ever committed
        rows = []
    finally:
        store.close()
    return history, [(kind, json.loads(body)) for kind, body in rows]


def check_paired(history: list[Message], rows: list[tuple[str, dict[str, Any]]]) -> None:
    """Every entry a turn wrote has its rows, and every row its entry: the answer its `final`,
    a result crash repair wrote its `interrupted` card."""
    texts = [m.text for m in history if isinstance(m, AssistantMessage) and m.text]
    assert [b["text"] for k, b in rows if k == "text"] == texts
    results = [(m.call_id, m.content == INTERRUPTED_RESULT) for m in history if m.role == "tool"]
    assert [(b["id"], b["status"] == "interrupted") for k, b in rows if k == "tool_result"] == (
        results
    )
    # A call's card is stored with its result.
    assert [b["id"] for k, b in rows if k == "tool_call"] == [c for c, _ in results]
    answered = any(isinstance(m, AssistantMessage) and m.text == ANSWER for m in history)
    ends = [k for k, b in rows if k == "final" or b.get("text") == ANSWER]
    assert ends == (["text", "final"] if answered else [])  # the marker commits with the answer


async def replay(state_dir: Path) -> list[Frame]:
    """The whole stream from the store (its first chunk: all that is stored)."""
    bus = SqliteBusStore.open(state_dir)
    log = SqliteTurnLog(bus.sessions.conn)
    got: list[Frame] = []
    frames = session_frames(
        SESSION,
        bus=bus,
        log=log,
        hub=Hub(),
        start=None,
        replay_max=1000,
        poll_interval_s=0.05,
        stopping=asyncio.Event(),
    )
    try:
        async for chunk in frames:
            got += chunk
            break
    finally:
        await frames.aclose()
        bus.close()
    return got


def test_a_crash_at_any_write_never_splits_a_history_entry_from_its_log_rows(
    tmp_path: Path,
) -> None:
    counter = CommitCounter()
    asyncio.run(scenario(tmp_path / "count", counter))
    whole, rows = stored(tmp_path / "count")
    check_paired(whole, rows)
    assert [k for k, _ in rows] == ["text", "tool_call", "tool_result", "text", "final"]
    assert counter.commits >= 4  # the sweep below really covers the turn's writes
    fork = multiprocessing.get_context("fork")
    interrupted = 0
    for n in range(1, counter.commits + 1):
        state_dir = tmp_path / f"crash-{n}"
        child = fork.Process(target=_child, args=(str(state_dir), n))
        child.start()
        child.join(BOUND)
        assert child.exitcode == CRASHED, (n, child.exitcode)
        check_paired(*stored(state_dir))
        # Restarted: the run goes on from the store, and a replay shows it as it ended.
        asyncio.run(asyncio.wait_for(scenario(state_dir), BOUND))
        history, rows = stored(state_dir)
        check_paired(history, rows)
        frames = asyncio.run(asyncio.wait_for(replay(state_dir), BOUND))
        turn = [(f.data["type"], f.data.get("text")) for f in frames if f.event == "turn"]
        assert turn[-2:] == [("text", ANSWER), ("final", None)], (n, turn)
        # The call's card ends exactly once: with its result, or as interrupted when the crash
        # came while it ran (repaired on restart).
        ends = [f.data["status"] for f in frames if f.data.get("type") == "tool_result"]
        assert ends in (["ok"], ["interrupted"]), (n, ends)
        interrupted += ends == ["interrupted"]
        assert [f.data["event"]["id"] for f in frames if f.event == "bus"] == [ASK.id]
        assert sum(isinstance(m, UserMessage) for m in history) == 1
    assert interrupted  # some crash cut the call off, and the replay shows it ended


def test_a_failure_inside_the_append_writes_neither_the_entry_nor_its_rows(
    tmp_path: Path,
) -> None:
    store = SqliteSessionStore.open(tmp_path)
    log = SqliteTurnLog(store.conn)
    live: list[tuple[str, int]] = []
    recorder = TurnRecorder(
        log,
        clock=FakeClock(),
        stored=lambda _s: None,
        live=lambda s, body, n: live.append((body["type"], n)),
    )
    store.companions.append(recorder.written)
    sink = recorder.sink(SESSION)
    for text in ("Let me ", "look."):
        sink(TextDeltaEvent(text=text, turn_id="t"))
    call = AssistantMessage(text="Let me look.", tool_calls=())
    head = store.append(SESSION, [call])
    sink(ToolCallEvent(id="c1", name="look", arguments={}, turn_id="t"))
    sink(ToolResultEvent(id="c1", name="look", success=True, status="ok", output="x", turn_id="t"))
    assert [(e.type, e.body.get("text")) for e in log.after(SESSION, 0, limit=10)] == [
        ("text", "Let me look.")
    ]  # the cards wait for the history entry they lead to

    def fail(*_args: Any) -> None:
        raise OSError("disk full")

    store.companions.append(fail)  # fails after the rows, before the commit
    with pytest.raises(OSError, match="disk full"):
        store.append(SESSION, [UserMessage(content="x")], expected_last_entry=head)
    assert store.load(SESSION) == [call] and log.last(SESSION) == 1
    store.companions.remove(fail)
    sink(ToolCallEvent(id="c2", name="look", arguments={}, turn_id="t"))
    sink(ToolResultEvent(id="c2", name="look", success=True, status="ok", output="y", turn_id="t"))
    answer = AssistantMessage(text="Done.")
    store.append(SESSION, [answer], expected_last_entry=head)
    sink(FinalEvent(text="Done.", turn_id="t"))
    assert [
        (e.type, e.body.get("id"), e.body.get("text")) for e in log.after(SESSION, 0, limit=10)
    ] == [
        ("text", None, "Let me look."),
        ("tool_call", "c2", None),
        ("tool_result", "c2", None),
        ("text", None, "Done."),
        ("final", None, None),  # the answer is the text record before it
    ]
    # Shown live before it was stored, each with the last stored sequence then.
    assert live == [
        ("text_delta", 0),
        ("text_delta", 0),
        ("tool_call", 1),
        ("tool_result", 1),
        ("tool_call", 1),
        ("tool_result", 1),
    ]
    store.close()


async def _turn(
    store: SqliteSessionStore | PostgresSessionStore,
    log: TurnLog,
    agent: Agent,
    cancel: CancelScope | None = None,
) -> list[str]:
    """Run one turn on a stored session with the recorder as the store's companion; the types
    of the records written alone (not with a history entry)."""
    alone: list[str] = []
    append = log.append

    def counted(session: str, records: Any, at: float) -> int:
        alone.extend(kind for kind, _ in records)
        return append(session, records, at)

    log.append = counted  # type: ignore[method-assign]
    recorder = TurnRecorder(log, clock=FakeClock(), stored=lambda _s: None, live=lambda *_a: None)
    store.companions.append(recorder.written)
    writer = SessionWriter.open(store, SESSION)  # repairs what a crash left open
    writer.add(UserMessage(content="go"))
    state = agent.turn_state(
        history=writer.history,
        sink=recorder.sink(SESSION),
        cancel=cancel,
        on_append=writer.on_append,
        known_call_ids=writer.call_ids,
    )
    await agent.run_turn(state)
    return alone


def _rows(log: TurnLog) -> list[tuple[str, str | None]]:
    return [(e.type, e.body.get("status")) for e in log.after(SESSION, 0, limit=100)]


async def test_a_cancelled_round_commits_its_end_with_its_results(tmp_path: Path) -> None:
    cancel = CancelScope()

    @tool(read_only=True)
    def stop() -> str:
        """Stop the run."""
        cancel.cancel("the user stopped it")
        return "stopped"

    model = FunctionModel(lambda _r: ModelTurn.model_validate({"tool_calls": [{"name": "stop"}]}))
    store = SqliteSessionStore.open(tmp_path)
    log = SqliteTurnLog(store.conn)
    alone = await _turn(store, log, Agent(model=model, tools=[stop]), cancel)
    assert alone == []  # every record went with a history entry
    assert _rows(log) == [
        ("tool_call", None),
        ("tool_result", "interrupted"),  # cancelled while it ran
        ("cancelled", None),
    ]
    store.close()


async def test_an_answer_cut_off_by_a_failed_stream_commits_the_error_with_it(
    tmp_path: Path,
) -> None:
    class Dying:
        name = "dying"
        native_tools = True

        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelPart]:
            yield TextDelta(text="The answer is")
            raise StreamInterrupted("connection reset", partial_text="The answer is")

    store = SqliteSessionStore.open(tmp_path)
    log = SqliteTurnLog(store.conn)
    assert await _turn(store, log, Agent(model=Dying())) == []
    assert [kind for kind, _ in _rows(log)] == ["text", "error"]
    store.close()


async def test_an_end_without_a_history_entry_is_written_alone(tmp_path: Path) -> None:
    def failing(_request: ModelRequest) -> str:
        raise ModelError("no route to the model")

    store = SqliteSessionStore.open(tmp_path)
    log = SqliteTurnLog(store.conn)
    assert await _turn(store, log, Agent(model=FunctionModel(failing))) == ["error"]
    assert [kind for kind, _ in _rows(log)] == ["error"]
    store.close()


async def test_on_postgresql_a_repaired_call_and_the_answer_bring_their_rows(
    postgres_url: str,
) -> None:
    store = PostgresSessionStore.open(postgres_url)
    # A process died while `look` ran: the call is stored, its result never was.
    cut = AssistantMessage(tool_calls=(ToolCallPart(id="c1", name="look", arguments={}),))
    store.append(SESSION, [UserMessage(content="where?"), cut])
    log = PostgresTurnLog(store.pool)
    assert await _turn(store, log, Agent(model=FunctionModel(lambda _r: ANSWER))) == []
    assert [(kind, status) for kind, status in _rows(log)] == [
        ("tool_call", None),
        ("tool_result", "interrupted"),
        ("text", None),
        ("final", None),
    ]
    log.close()
    store.close()


def test_calls_a_process_closes_before_it_exits_keep_their_own_cards(tmp_path: Path) -> None:
    store = SqliteSessionStore.open(tmp_path)
    log = SqliteTurnLog(store.conn)
    recorder = TurnRecorder(log, clock=FakeClock(), stored=lambda _s: None, live=lambda *_a: None)
    store.companions.append(recorder.written)
    calls = AssistantMessage(tool_calls=(ToolCallPart(id="c1", name="look", arguments={}),))
    writer = SessionWriter.open(store, SESSION)
    writer.add(UserMessage(content="where?"), calls)
    sink = recorder.sink(SESSION)
    sink(ToolCallEvent(id="c1", name="look", arguments={"where": "drawer"}, turn_id="t"))
    assert [r.content for r in writer.close_open_calls()] == [INTERRUPTED_RESULT]
    assert [
        (e.type, e.body.get("arguments"), e.body.get("status"))
        for e in log.after(SESSION, 0, limit=9)
    ] == [
        ("tool_call", {"where": "drawer"}, None),  # the card it showed, once
        ("tool_result", None, "interrupted"),
    ]
    store.close()
