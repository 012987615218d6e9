"""The SQLite statements one event to a parked session costs `heron serve`: its publish, the
wake, the turn and the park, on a real `HeronServer` over a real state directory (only the
model is scripted). Every statement is per-event floor (issue 17's 1,000 events/s), so a
statement removed must not come back unnoticed."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from heron.agent import Agent
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.server import HeronServer, ServeConfig
from heron.models.scripted import FunctionModel

BOUND = 10.0


class Statements:
    """Every statement run on the event loop's thread by the connections opened meanwhile
    (the checkpoint thread's are its own business), with the numbers they carry left out."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[str] = []
        self.on = False
        self._thread = threading.get_ident()
        connect = sqlite3.connect

        def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn = connect(*args, **kwargs)
            conn.set_trace_callback(self._record)
            return conn

        monkeypatch.setattr(sqlite3, "connect", traced)

    def _record(self, statement: str) -> None:
        if self.on and threading.get_ident() == self._thread:
            self.seen.append(re.sub(r"\d+(\.\d+)?", "N", " ".join(statement.split())))

    def counted(self, prefix: str) -> int:
        return sum(1 for s in self.seen if s.startswith(prefix))


async def _event_to_a_parked_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Statements:
    statements = Statements(monkeypatch)
    parked: asyncio.Queue[str] = asyncio.Queue()

    def announce(record: dict[str, Any]) -> None:
        if record.get("type") == "session_parked":
            parked.put_nowait(record["session"])

    server = HeronServer(
        ServeConfig(
            state_dir=tmp_path / "state",
            workspace=tmp_path,
            idle_timeout_s=0.05,
            poll_interval_s=3600,  # no poll in the middle of the measured event
        ),
        lambda tools: Agent(model=FunctionModel(lambda _r: "ok"), tools=tools, autonomy="full"),
        announce=announce,
    )
    await server.start()
    serving = asyncio.ensure_future(server.serve())
    try:
        assert server.bus is not None and server.host is not None
        server.host.claim("alpha")  # as the intake does for a webhook's new session
        for round_no in range(2):  # the first one creates the session (its index row, binding)
            statements.on = round_no == 1
            await server.bus.publish(
                BusEvent(
                    kind="webhook.received",
                    source="system",
                    channel="webhook",
                    session="alpha",
                    content=EventContent(text=f"event {round_no}"),
                )
            )
            assert await asyncio.wait_for(parked.get(), BOUND) == "alpha"
        statements.on = False
    finally:
        server.stop()
        await asyncio.wait_for(serving, BOUND)
    return statements


async def test_an_event_to_a_parked_session_costs_a_bounded_set_of_statements(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    statements = await _event_to_a_parked_session(tmp_path, monkeypatch)
    seen = statements.seen
    kinds = Counter(s.split()[0] for s in seen)
    # Write transactions: the publish, the consume with its append, the answer's append. The
    # park's index update commits on its own; the reads are single statements.
    assert kinds["BEGIN"] == 3, seen
    assert len(seen) <= 31, "\n".join(seen)
    # The woken tail (one chunk) and the history's first read: one statement each, the
    # history's head its last row.
    assert statements.counted("SELECT entry_id, role, message FROM session_entries") == 1
    assert statements.counted("SELECT entry_id, message FROM session_entries") == 1
    assert statements.counted("SELECT MAX(entry_id)") == 2  # the two appends' head checks
    # A session waking where it was bound: read, not rewritten under the write lock.
    assert statements.counted("SELECT workspace FROM session_workspaces") == 1
    assert not [s for s in seen if "INTO session_workspaces" in s]
    assert statements.counted("UPDATE serve_sessions") == 1
    # Its timers: read once by the woken scheduler (what is due and the next one), once by
    # the park (its alarm).
    assert statements.counted("SELECT id, session, call_id, message, kind") == 2
    assert not [s for s in seen if "MIN(next_fire)" in s]
