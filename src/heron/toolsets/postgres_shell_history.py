"""`PostgresShellHistory`: the shell tool's history in the shared PostgreSQL database (table
`shell_history`)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from heron._support.postgres import Pool, pg_errors
from heron.toolsets.shell import HistoryOutcome, ShellHistoryEntry


@pg_errors
class PostgresShellHistory:
    """`ShellHistory` on a PostgreSQL pool (thread-safe)."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

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
        with self._pool.connection() as conn:
            conn.execute(
                "INSERT INTO shell_history (at, agent, command, cwd, outcome, risk, exit_code,"
                " duration_s, timed_out) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (at, agent, command, str(cwd), outcome, risk, exit_code, duration_s, timed_out),
            )

    def recent(self, limit: int = 20, *, agent: str | None = None) -> list[ShellHistoryEntry]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT id, at, agent, command, cwd, outcome, risk, exit_code, duration_s,"
                " timed_out FROM shell_history WHERE %(a)s::text IS NULL OR agent = %(a)s"
                " ORDER BY id DESC LIMIT %(n)s",
                {"a": agent, "n": limit},
            ).fetchall()
        return [
            ShellHistoryEntry(
                id=int(row[0]),
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
