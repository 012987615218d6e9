"""`PostgresThreadIndex`: the `ThreadIndex` of `heron.always_on.channels.mail_inbound` in the
shared PostgreSQL database (table `mail_threads`), so a reply finds its thread's session
whichever worker triages it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from heron._support.postgres import Pool, pg_errors


@pg_errors
class PostgresThreadIndex:
    """`ThreadIndex` on a PostgreSQL pool (thread-safe). `record` commits on its own: a pool
    has no caller's transaction to join."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def session_of(self, message_ids: Sequence[str]) -> str | None:
        if not message_ids:
            return None
        with self._pool.connection() as conn:
            rows = dict(
                conn.execute(
                    "SELECT message_id, session FROM mail_threads WHERE message_id = ANY(%s)",
                    (list(message_ids),),
                ).fetchall()
            )
        # The first id that is known wins, as the references are ordered.
        return next((str(rows[m]) for m in message_ids if m in rows), None)

    def record(self, pairs: Iterable[tuple[str, str]], *, now: float) -> None:
        rows = [(m, s, now) for m, s in pairs if m]
        if not rows:
            return
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO mail_threads (message_id, session, recorded_at)"
                " VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                rows,
            )
