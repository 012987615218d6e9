"""`PostgresTurnLog`: the `TurnLog` of `heron.gateway.eventlog` on the shared PostgreSQL
database (tables `gateway_turn_events` and `gateway_meta`), so any worker serves any
session's event stream.

Records join the session store's append transaction (`append_in`, on the pool the log shares
with its `PostgresSessionStore`) and notify channel `heron_turns` with the session's name in
it, delivered on commit. The log listens on that channel with a connection of its own (a
thread), so a stream served by one worker wakes within milliseconds when another worker's
turn writes its session; while the listening connection is lost, the streams' polling
(`poll_interval_s`) covers the gap.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from heron._support.postgres import Pool, pg_errors, run
from heron.gateway.eventlog import LoggedEvent

CHANNEL = "heron_turns"
_RECONNECT_S = 1.0
_STOP_CHECK_S = 0.05
"""How often the listener looks whether the log is closing (a socket wait, no round trip)."""
_READY_S = 5.0
"""How long opening a listening log waits for its `LISTEN` before it goes on."""

Conn = psycopg.Connection[Any]


@pg_errors
class PostgresTurnLog:
    """`TurnLog` on a PostgreSQL pool (the session store's; the pool's owner closes it)."""

    def __init__(self, pool: Pool, *, news: Callable[[str], None] | None = None) -> None:
        """`news(session)`: called from the listening thread when records of `session` were
        committed (by any worker, this one too)."""
        self._pool = pool
        with pool.connection() as conn:
            row = conn.execute("SELECT value FROM gateway_meta WHERE key = 'epoch'").fetchone()
        self._epoch = str(row[0]) if row else ""
        self._stopped = threading.Event()
        self._listening = threading.Event()
        self._thread: threading.Thread | None = None
        if news is not None:
            conninfo = pool.conninfo
            assert isinstance(conninfo, str)  # heron opens its pools from a URL
            self._thread = threading.Thread(
                target=self._listen, args=(conninfo, news), name="heron-turns-listen", daemon=True
            )
            self._thread.start()
            # A commit notified before `LISTEN` ran would reach this worker's streams only at
            # their next poll: the log is ready once it listens (or, with the server away, at
            # once: polling covers that gap anyway).
            self._listening.wait(_READY_S)

    @property
    def epoch(self) -> str:
        return self._epoch

    def append(self, session: str, records: Sequence[tuple[str, dict[str, Any]]], at: float) -> int:
        return run(self._pool, lambda conn: self.append_in(conn, session, records, at))

    def append_in(
        self, conn: Conn, session: str, records: Sequence[tuple[str, dict[str, Any]]], at: float
    ) -> int:
        seq = 0
        for kind, body in records:
            row = conn.execute(
                "INSERT INTO gateway_turn_events (session, type, body, at)"
                " VALUES (%s, %s, %s, %s) RETURNING seq",
                (session, kind, json.dumps(body, ensure_ascii=False), at),
            ).fetchone()
            assert row is not None  # RETURNING of a one-row INSERT
            seq = int(row[0])
        if records:
            conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, session))
        return seq

    def after(self, session: str, seq: int, *, limit: int) -> list[LoggedEvent]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT seq, type, body, at FROM gateway_turn_events"
                " WHERE session = %s AND seq > %s ORDER BY seq LIMIT %s",
                (session, seq, limit),
            ).fetchall()
        return [
            LoggedEvent(
                seq=int(r[0]), session=session, type=str(r[1]), body=json.loads(r[2]), at=r[3]
            )
            for r in rows
        ]

    def last(self, session: str) -> int:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT MAX(seq) FROM gateway_turn_events WHERE session = %s", (session,)
            ).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def close(self) -> None:
        """Stops listening (the pool stays open: its session store closes it)."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _listen(self, conninfo: str, news: Callable[[str], None]) -> None:
        while not self._stopped.is_set():
            try:
                with psycopg.connect(conninfo, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self._listening.set()
                    while not self._stopped.is_set():
                        for note in conn.notifies(timeout=_STOP_CHECK_S):
                            news(note.payload)
            except psycopg.Error:
                # The server went away: the streams' polling covers the gap until it is back.
                self._listening.set()
                self._stopped.wait(_RECONNECT_S)
