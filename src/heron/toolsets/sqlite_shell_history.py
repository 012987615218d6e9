"""`SqliteShellHistory`: the shell tool's history in heron's SQLite database (table
`shell_history`)."""

from __future__ import annotations

import datetime as dt
import sqlite3
from pathlib import Path
from typing import Any

from heron._support.state import open_db, sqlite_errors
from heron.toolsets.shell import HistoryOutcome, ShellHistoryEntry

_SCHEMA = """
CREATE TABLE IF NOT EXISTS shell_history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    agent TEXT,
    command TEXT NOT NULL,
    cwd TEXT NOT NULL,
    outcome TEXT NOT NULL,
    risk TEXT NOT NULL,
    exit_code INTEGER,
    duration_s REAL,
    timed_out INTEGER NOT NULL DEFAULT 0
)
"""


@sqlite_errors
class SqliteShellHistory:
    """`ShellHistory` on a connection from `heron._support.state.open_db`."""

    def __init__(self, conn: sqlite3.Connection, *, owns_connection: bool = False) -> None:
        self._conn = conn
        self._owns = owns_connection
        with conn:
            conn.execute(_SCHEMA)

    @classmethod
    def open(cls, state_dir: Path) -> SqliteShellHistory:
        """History in `<state_dir>/heron.db`; `close()` closes the connection."""
        return cls(open_db(state_dir), owns_connection=True)

    def close(self) -> None:
        if self._owns:
            self._conn.close()

    def record(
        self,
        *,
        command: str,
        cwd: Path,
        outcome: HistoryOutcome,
        risk: str,
        agent: str | None = None,
        exit_code: int | None = None,
        duration_s: float | None = None,
        timed_out: bool = False,
    ) -> None:
        at = dt.datetime.now(dt.UTC).isoformat()
        with self._conn:
            self._conn.execute(
                "INSERT INTO shell_history (at, agent, command, cwd, outcome, risk, exit_code, "
                "duration_s, timed_out) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (at, agent, command, str(cwd), outcome, risk, exit_code, duration_s, timed_out),
            )

    def recent(self, limit: int = 20, *, agent: str | None = None) -> list[ShellHistoryEntry]:
        query = (
            "SELECT id, at, agent, command, cwd, outcome, risk, exit_code, duration_s, timed_out "
            "FROM shell_history"
        )
        params: tuple[Any, ...] = ()
        if agent is not None:
            query += " WHERE agent = ?"
            params = (agent,)
        rows = self._conn.execute(query + " ORDER BY id DESC LIMIT ?", (*params, limit))
        return [
            ShellHistoryEntry(
                id=row[0],
                at=dt.datetime.fromisoformat(row[1]),
                agent=row[2],
                command=row[3],
                cwd=row[4],
                outcome=row[5],
                risk=row[6],
                exit_code=row[7],
                duration_s=row[8],
                timed_out=bool(row[9]),
            )
            for row in rows
        ]
