"""`PostgresIdempotencyLedger`: idempotency keys and used confirmation tokens in the shared
PostgreSQL database (tables `idempotency_keys` and `confirmation_tokens_used`).

A claim is one conditional upsert (insert, or replace a record that expired), so two workers
cannot both claim a key: the loser reads the winner's live record.
"""

from __future__ import annotations

from typing import Any

import psycopg

from heron._support.postgres import Pool, pg_errors, run
from heron.safety.idempotency import KeyRecord

Conn = psycopg.Connection[Any]


@pg_errors
class PostgresIdempotencyLedger:
    """`IdempotencyLedger` on a PostgreSQL pool (thread-safe)."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def claim(
        self, tool: str, key: str, arguments_sha256: str, *, now: float, expires: float
    ) -> KeyRecord | None:
        def work(conn: Conn) -> KeyRecord | None:
            claimed = conn.execute(
                "INSERT INTO idempotency_keys AS k"
                " (tool, key, arguments_sha256, state, result, created, expires)"
                " VALUES (%s, %s, %s, 'running', NULL, %s, %s)"
                " ON CONFLICT (tool, key) DO UPDATE"
                " SET arguments_sha256 = excluded.arguments_sha256,"
                " state = 'running', result = NULL, created = excluded.created,"
                " expires = excluded.expires WHERE k.expires <= %s RETURNING 1",
                (tool, key, arguments_sha256, now, expires, now),
            ).fetchone()
            return None if claimed is not None else _live(conn, tool, key, now)

        return run(self._pool, work)

    def get(self, tool: str, key: str, *, now: float) -> KeyRecord | None:
        with self._pool.connection() as conn:
            return _live(conn, tool, key, now)

    def complete(self, tool: str, key: str, result: str) -> None:
        with self._pool.connection() as conn:
            conn.execute(
                "UPDATE idempotency_keys SET state = 'done', result = %s"
                " WHERE tool = %s AND key = %s",
                (result, tool, key),
            )

    def release(self, tool: str, key: str) -> None:
        with self._pool.connection() as conn:
            conn.execute("DELETE FROM idempotency_keys WHERE tool = %s AND key = %s", (tool, key))

    def use_token(self, nonce: str, tool: str, expires: float) -> bool:
        with self._pool.connection() as conn:
            cursor = conn.execute(
                "INSERT INTO confirmation_tokens_used (nonce, tool, expires) VALUES (%s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                (nonce, tool, expires),
            )
        return cursor.rowcount == 1

    def purge_expired(self, now: float) -> int:
        def work(conn: Conn) -> int:
            gone = conn.execute("DELETE FROM idempotency_keys WHERE expires <= %s", (now,))
            used = conn.execute("DELETE FROM confirmation_tokens_used WHERE expires <= %s", (now,))
            return gone.rowcount + used.rowcount

        return run(self._pool, work)


def _live(conn: Conn, tool: str, key: str, now: float) -> KeyRecord | None:
    row = conn.execute(
        "SELECT arguments_sha256, state, result, created FROM idempotency_keys"
        " WHERE tool = %s AND key = %s AND expires > %s",
        (tool, key, now),
    ).fetchone()
    if row is None:
        return None
    digest, state, result, created = row
    return KeyRecord(arguments_sha256=digest, state=state, result=result, created=created)
