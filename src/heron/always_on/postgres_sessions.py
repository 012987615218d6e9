"""`PostgresHostIndex`: the `HostIndex` of `heron.always_on.sessions` in the shared PostgreSQL
database (table `serve_sessions`)."""

from __future__ import annotations

from heron._support.postgres import Pool, pg_errors


@pg_errors
class PostgresHostIndex:
    """`HostIndex` on a PostgreSQL pool (thread-safe)."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def add(self, host: str, session: str, *, now: float) -> bool:
        with self._pool.connection() as conn:
            cursor = conn.execute(
                "INSERT INTO serve_sessions (host, session, first_seen, last_active)"
                " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (host, session, now, now),
            )
        return cursor.rowcount == 1

    def sessions(self, host: str) -> list[str]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT session FROM serve_sessions WHERE host = %s ORDER BY first_seen, session",
                (host,),
            ).fetchall()
        return [str(r[0]) for r in rows]

    def touch(self, host: str, session: str, *, now: float) -> None:
        with self._pool.connection() as conn:
            conn.execute(
                "UPDATE serve_sessions SET last_active = %s WHERE host = %s AND session = %s",
                (now, host, session),
            )
