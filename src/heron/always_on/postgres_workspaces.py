"""`PostgresWorkspaceBindings`: the `WorkspaceBindings` of `heron.always_on.workspaces` in the
shared PostgreSQL database (table `session_workspaces`), read by every worker."""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Sequence
from typing import Any

import psycopg

from heron._support.postgres import Pool, pg_errors, run
from heron.always_on.workspaces import WorkspaceBinding

_FIELDS = tuple(f.name for f in dataclasses.fields(WorkspaceBinding))
_COLUMNS = ", ".join(_FIELDS)


@pg_errors
class PostgresWorkspaceBindings:
    """`WorkspaceBindings` on a PostgreSQL pool (thread-safe)."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def bind(self, binding: WorkspaceBinding) -> WorkspaceBinding | None:
        def work(conn: psycopg.Connection[Any]) -> WorkspaceBinding | None:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM session_workspaces WHERE session = %s FOR UPDATE",
                (binding.session,),
            ).fetchone()
            previous = None if row is None else _binding(row)
            if previous is not None and previous.workspace == binding.workspace:
                return None
            conn.execute(
                f"INSERT INTO session_workspaces ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s)"
                " ON CONFLICT (session) DO UPDATE SET workspace = excluded.workspace,"
                " host = excluded.host, path = excluded.path, bound_at = excluded.bound_at",
                dataclasses.astuple(binding),
            )
            return previous

        return run(self._pool, work)

    def held_elsewhere(self, session: str, workspace: str, *, now: float) -> bool:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT 1 FROM session_workspaces mine JOIN session_workspaces held"
                " ON held.workspace = mine.workspace JOIN session_leases lease"
                " ON lease.session = held.session"
                " WHERE mine.session = %s AND mine.workspace <> %s AND lease.expires_at > %s"
                " LIMIT 1",
                (session, workspace, now),
            ).fetchone()
        return row is not None

    def list(self) -> builtins.list[WorkspaceBinding]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM session_workspaces ORDER BY session"
            ).fetchall()
        return [_binding(row) for row in rows]


def _binding(row: Sequence[Any]) -> WorkspaceBinding:
    return WorkspaceBinding(**dict(zip(_FIELDS, row, strict=True)))
