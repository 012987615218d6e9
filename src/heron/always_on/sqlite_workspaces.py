"""`SqliteWorkspaceBindings`: the `WorkspaceBindings` of `heron.always_on.workspaces` in heron's
SQLite database (table `session_workspaces`): one worker, whose workspace root may change
between two starts."""

from __future__ import annotations

import builtins
import dataclasses
import sqlite3
from collections.abc import Sequence
from typing import Any

from heron._support.state import sqlite_errors, transaction
from heron.always_on.workspaces import WorkspaceBinding

_SCHEMA = """
CREATE TABLE IF NOT EXISTS session_workspaces (
    session   TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    host      TEXT NOT NULL,
    path      TEXT NOT NULL,
    bound_at  REAL NOT NULL
) WITHOUT ROWID
"""
_FIELDS = tuple(f.name for f in dataclasses.fields(WorkspaceBinding))
_COLUMNS = ", ".join(_FIELDS)


@sqlite_errors
class SqliteWorkspaceBindings:
    """`WorkspaceBindings` on a connection to `<state_dir>/heron.db` (the caller closes it;
    explicit transactions, like the session store it shares the server's connection with)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        conn.isolation_level = None
        conn.execute(_SCHEMA)
        self._conn = conn

    def bind(self, binding: WorkspaceBinding) -> WorkspaceBinding | None:
        # Each wake of a session bound here already changes nothing: one read, and no write
        # lock. A binding that changes is read again in the write transaction.
        if self._bound(binding.session) == binding.workspace:
            return None
        with transaction(self._conn) as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM session_workspaces WHERE session = ?", (binding.session,)
            ).fetchone()
            previous = None if row is None else _binding(row)
            if previous is not None and previous.workspace == binding.workspace:
                return None
            conn.execute(
                f"INSERT OR REPLACE INTO session_workspaces ({_COLUMNS}) VALUES (?, ?, ?, ?, ?)",
                dataclasses.astuple(binding),
            )
        return previous

    def _bound(self, session: str) -> str | None:
        row = self._conn.execute(
            "SELECT workspace FROM session_workspaces WHERE session = ?", (session,)
        ).fetchone()
        return None if row is None else str(row[0])

    def held_elsewhere(self, session: str, workspace: str, *, now: float) -> bool:
        return False  # one worker per state directory: no other to leave a session to

    def list(self) -> builtins.list[WorkspaceBinding]:
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM session_workspaces ORDER BY session"
        ).fetchall()
        return [_binding(row) for row in rows]


def _binding(row: Sequence[Any]) -> WorkspaceBinding:
    return WorkspaceBinding(**dict(zip(_FIELDS, row, strict=True)))
