"""The crash-point sweep of `test_bus_crash` on the PostgreSQL store: the child process
hard-exits right before its N-th write statement reaches the server (so the transaction it
belongs to never commits), for every N the scenario has; a restart on the same database must
lose nothing, duplicate nothing, and leave histories a real provider accepts."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool
from test_bus_crash import BOUND, CRASHED, SESSION, _marker, run_scenario

from heron.always_on.bus.model import BusEvent
from heron.always_on.bus.postgres_store import PostgresBusStore
from heron.messages import AssistantMessage, UserMessage
from heron.models.history_rules import HistoryChecker
from heron.sessions.postgres_store import PostgresSessionStore
from support.postgres import PostgresServer, postgres_server

__all__ = ["postgres_server"]  # the fixture, found by pytest here


class WriteCounter:
    """Counts write statements sent through the pool; may hard-exit before one."""

    def __init__(self, crash_at: int | None = None) -> None:
        self.crash_at = crash_at
        self.writes = 0
        self._lock = threading.Lock()

    def saw(self, query: Any) -> None:
        text = query if isinstance(query, str) else str(query)
        if text.lstrip()[:6].upper() not in ("INSERT", "UPDATE", "DELETE"):
            return
        with self._lock:
            self.writes += 1
            if self.writes == self.crash_at:
                os._exit(CRASHED)  # like kill -9: the open transaction never commits


def open_bus(url: str, counter: WriteCounter | None = None) -> PostgresBusStore:
    class Counted(psycopg.Cursor[Any]):
        def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
            if counter is not None:
                counter.saw(query)
            return super().execute(query, *args, **kwargs)

        def executemany(self, query: Any, *args: Any, **kwargs: Any) -> Any:
            if counter is not None:
                counter.saw(query)
            return super().executemany(query, *args, **kwargs)

    pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
        url,
        min_size=2,  # ready at once: a scenario is short
        max_size=4,
        kwargs={"autocommit": True, "cursor_factory": Counted},
        open=True,
    )
    pool.wait()
    return PostgresBusStore(PostgresSessionStore(pool))


def scenario(url: str, counter: WriteCounter | None = None) -> None:
    asyncio.run(asyncio.wait_for(run_scenario(open_bus(url, counter)), BOUND))


def _child(url: str, crash_at: int) -> None:
    try:
        scenario(url, WriteCounter(crash_at))
    finally:
        os._exit(0)  # never return into the parent's test runner


def check_invariants(url: str) -> list[Any]:
    bus = open_bus(url)
    try:
        stored = asyncio.run(bus.events(session=SESSION))
        history = bus.sessions.load(SESSION)
        HistoryChecker().check(history)  # a real provider would accept it
        last = history[-1]
        assert isinstance(last, AssistantMessage) and not last.tool_calls, last
        user_text = [m.content for m in history if isinstance(m, UserMessage)]
        for item in stored:
            event: BusEvent = item.event
            marker = _marker(event)
            assert item.consumed, f"{marker} was never consumed"
            if event.kind == "tool.result":
                continue  # late results carry no marker of their own
            appended = sum(text.count(marker) for text in user_text)
            assert appended == 1, f"{marker} appears {appended} times in the history"
        assert {"ev-A", "ev-B", "ev-C", "ev-F"} <= {_marker(i.event) for i in stored}
        for info in bus.sessions.list_sessions():
            HistoryChecker().check(bus.sessions.load(info.session))
        return list(history)
    finally:
        bus.close()


def test_a_crash_before_any_write_on_postgresql_loses_nothing_and_duplicates_nothing(
    postgres_server: PostgresServer,
) -> None:
    counter = WriteCounter()
    url = postgres_server.fresh_database()
    scenario(url, counter)
    check_invariants(url)
    postgres_server.drop_database(url)
    assert counter.writes >= 10  # the sweep below really covers many crash points
    fork = multiprocessing.get_context("fork")
    crashed = 0
    for n in range(1, counter.writes + 1):
        url = postgres_server.fresh_database()
        child = fork.Process(target=_child, args=(url, n))
        child.start()
        child.join(BOUND)
        assert child.exitcode in (CRASHED, 0), (n, child.exitcode)
        crashed += child.exitcode == CRASHED
        scenario(url)  # restart: a fresh process state on the same database
        history = check_invariants(url)
        scenario(url)  # a second restart finds nothing left to do and changes nothing
        assert check_invariants(url) == history
        postgres_server.drop_database(url)
    assert crashed == counter.writes
