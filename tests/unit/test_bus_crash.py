"""Crash safety: kill the process at every durable write of one scenario, restart, check.

A child process runs a scripted scenario (a burst of events, a side question, a tool that
publishes while it runs, an urgent stop during a tool) and hard-exits with `os._exit` right
before its N-th write transaction commits — for every N the scenario has. The test then
restarts the scenario in a fresh process state (producers re-publish what they published,
relying on idempotency) and checks that no event was lost, none was appended twice, and every
stored history would be accepted by a real provider.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from heron import Agent, FunctionModel, ModelTurn, tool
from heron.always_on.bus.loop import EventDrivenAgent
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.bus.postgres_store import PostgresBusStore
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.messages import AssistantMessage, Message, UserMessage
from heron.models.base import ModelRequest
from heron.models.history_rules import HistoryChecker

SESSION = "main"
CRASHED = 3
BOUND = 10.0


def _event(
    marker: str, kind: str, source: str, channel: str, text: str = "", **fields: Any
) -> BusEvent:
    return BusEvent(
        kind=kind,  # type: ignore[arg-type]
        source=source,  # type: ignore[arg-type]
        channel=channel,  # type: ignore[arg-type]
        session=SESSION,
        idempotency_key=marker,
        content=EventContent(text=f"{text or kind} [{marker}]"),
        **fields,
    )


INITIAL = [
    _event("ev-A", "user.input", "user", "cli"),
    _event("ev-B", "mail.received", "stranger", "mail"),
    _event("ev-C", "timer.trigger", "system", "timer"),
    _event("ev-F", "user.input", "user", "cli", side_question=True),
]
DURING_WORK = _event("ev-D", "user.input", "user", "cli")
STOP = _event("ev-E", "user.interrupt", "user", "cli", "stop everything")
"""Starts with "stop": routed as a stop request, so the running tool is cancelled, not detached."""


def _called(history: list[Message], name: str) -> bool:
    return any(
        isinstance(m, AssistantMessage) and any(c.name == name for c in m.tool_calls)
        for m in history
    )


def _main_model(request: ModelRequest) -> ModelTurn | str:
    """A pure function of the history, so a restarted run picks up where the crash left it."""
    history = list(request.messages)
    if any(isinstance(m, UserMessage) and "ev-E" in m.content for m in history):
        return "Stopped as asked."
    if not _called(history, "work"):
        return ModelTurn.model_validate({"tool_calls": [{"name": "work"}]})
    if not _called(history, "slow"):
        return ModelTurn.model_validate({"tool_calls": [{"name": "slow"}]})
    return "All done."


async def scenario(state_dir: Path, on_trace: Callable[[str], None] | None = None) -> None:
    """Publish (idempotently) and process everything; safe to run again after a crash."""
    bus = SqliteBusStore.open(state_dir)
    if on_trace is not None:
        bus.sessions.conn.set_trace_callback(on_trace)
    await run_scenario(bus)


async def run_scenario(bus: SqliteBusStore | PostgresBusStore) -> None:
    """The scenario on `bus` (closed at the end), whichever back end it is."""
    eda: EventDrivenAgent

    @tool(name="work")
    async def work() -> str:
        """Work that brings in another message while it runs."""
        await eda.publish(DURING_WORK)
        return "worked"

    @tool(name="slow")
    async def slow() -> str:
        """Runs until it is stopped; the stop arrives while it runs."""
        await eda.publish(STOP)
        await asyncio.Event().wait()
        return "never"

    agent = Agent(model=FunctionModel(_main_model), tools=[work, slow], autonomy="full")
    side = Agent(model=FunctionModel(lambda request: "It is noon."))
    eda = EventDrivenAgent(agent, bus, bus.sessions, session=SESSION, side_agent=side)
    try:
        await eda.publish_many(INITIAL)
        await eda.run_until_idle()
        await eda.wait_background()
        await eda.run_until_idle()
    finally:
        await eda.aclose()
        bus.close()


class CommitCounter:
    """SQLite trace hook: counts committed write transactions; may hard-exit before one."""

    def __init__(self, crash_at: int | None = None) -> None:
        self.crash_at = crash_at
        self.commits = 0
        self._dirty = False

    def __call__(self, sql: str) -> None:
        verb = sql.lstrip()[:6].upper()
        if verb in ("INSERT", "UPDATE", "DELETE"):
            self._dirty = True
        elif verb == "ROLLBA":
            self._dirty = False
        elif verb == "COMMIT" and self._dirty:
            self._dirty = False
            self.commits += 1
            if self.commits == self.crash_at:
                os._exit(CRASHED)  # like kill -9: no cleanup, the transaction never commits


def _child(state_dir: str, crash_at: int) -> None:
    try:
        asyncio.run(asyncio.wait_for(scenario(Path(state_dir), CommitCounter(crash_at)), BOUND))
    finally:
        os._exit(0)  # never return into the parent's test runner


def check_invariants(state_dir: Path) -> None:
    conn = sqlite3.connect(state_dir / "heron.db")
    try:
        rows = conn.execute(
            "SELECT id, body, consumed_at FROM bus_events WHERE session = ?", (SESSION,)
        ).fetchall()
    finally:
        conn.close()
    bus = SqliteBusStore.open(state_dir)
    try:
        history = bus.sessions.load(SESSION)
        HistoryChecker().check(history)  # a real provider would accept it
        last = history[-1]
        assert isinstance(last, AssistantMessage) and not last.tool_calls, last
        user_text = [m.content for m in history if isinstance(m, UserMessage)]
        for _, body, consumed_at in rows:
            event = BusEvent.model_validate_json(body)
            marker = _marker(event)
            assert consumed_at is not None, f"{marker} was never consumed"
            if event.kind == "tool.result":
                continue  # late results carry no marker of their own
            appended = sum(text.count(marker) for text in user_text)
            assert appended == 1, f"{marker} appears {appended} times in the history"
        markers = {_marker(BusEvent.model_validate_json(b)) for _, b, _ in rows}
        assert {"ev-A", "ev-B", "ev-C", "ev-F"} <= markers
        for info in bus.sessions.list_sessions():
            HistoryChecker().check(bus.sessions.load(info.session))
    finally:
        bus.close()


def test_an_uninterrupted_run_consumes_every_event_once(tmp_path: Path) -> None:
    counter = CommitCounter()
    asyncio.run(scenario(tmp_path, counter))
    check_invariants(tmp_path)
    assert counter.commits >= 10  # the sweep below really covers many crash points


def test_a_crash_at_any_durable_write_loses_nothing_and_duplicates_nothing(
    tmp_path: Path,
) -> None:
    counter = CommitCounter()
    asyncio.run(scenario(tmp_path / "count", counter))
    fork = multiprocessing.get_context("fork")
    crashed = 0
    for n in range(1, counter.commits + 1):
        state_dir = tmp_path / f"crash-{n}"
        child = fork.Process(target=_child, args=(str(state_dir), n))
        child.start()
        child.join(BOUND)
        assert child.exitcode in (CRASHED, 0), (n, child.exitcode)
        crashed += child.exitcode == CRASHED
        # Restart: a fresh process state on the same database.
        asyncio.run(asyncio.wait_for(scenario(state_dir), BOUND))
        check_invariants(state_dir)
        # A second restart finds nothing left to do and changes nothing.
        before = (state_dir / "heron.db").stat().st_size, _history(state_dir)
        asyncio.run(asyncio.wait_for(scenario(state_dir), BOUND))
        assert _history(state_dir) == before[1]
    assert crashed == counter.commits


def _marker(event: BusEvent) -> str:
    found = re.search(r"\[(ev-[A-Z])\]", event.content.text)
    return found.group(1) if found else ""


def _history(state_dir: Path) -> list[Message]:
    bus = SqliteBusStore.open(state_dir)
    try:
        return bus.sessions.load(SESSION)
    finally:
        bus.close()
