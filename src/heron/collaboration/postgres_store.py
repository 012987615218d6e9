"""`PostgresMessageStore`: the `MessageStore` in the shared PostgreSQL database (tables
`messages` and `message_deliveries`), so every worker of a shared store sees every message,
and a delivery that comes due is handed out once whichever worker asks (`take_due` claims
the rows with `FOR UPDATE SKIP LOCKED`)."""

from __future__ import annotations

import builtins
import json
from typing import Any

import psycopg

from heron._support.postgres import Pool, open_pool, pg_errors, run
from heron.collaboration.store import (
    COLUMNS,
    Delivery,
    StoredMessage,
    list_filter,
    message_of_row,
    message_row,
)

Conn = psycopg.Connection[Any]


@pg_errors
class PostgresMessageStore:
    """`MessageStore` on a PostgreSQL pool (thread-safe)."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    @classmethod
    def open(cls, url: str) -> PostgresMessageStore:
        """A store on its own pool of `url`; close it with `close()`."""
        return cls(open_pool(url, max_size=4))

    def close(self) -> None:
        self._pool.close()

    def add(self, message: StoredMessage) -> None:
        row = message_row(message)

        def work(conn: Conn) -> None:
            marks = ", ".join(["%s"] * len(row))
            conn.execute(f"INSERT INTO messages ({COLUMNS}) VALUES ({marks})", row)
            with conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO message_deliveries (message_id, channel, outcome, at, ref)"
                    " VALUES (%s, %s, %s, %s, %s)",
                    [(message.id, d.channel, d.outcome, d.at, d.ref) for d in message.deliveries],
                )

        run(self._pool, work)

    def get(self, message_id: str) -> StoredMessage | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                f"SELECT {COLUMNS} FROM messages WHERE id = %s", (message_id,)
            ).fetchone()
            return None if row is None else _message(conn, row)

    def list(
        self,
        *,
        unread_only: bool = False,
        session: str | None = None,
        thread: str | None = None,
        limit: int = 100,
    ) -> builtins.list[StoredMessage]:
        clause, params = list_filter(
            "%s", unread_only=unread_only, session=session, thread=thread, limit=limit
        )
        with self._pool.connection() as conn:
            rows = conn.execute(
                f"SELECT {COLUMNS} FROM messages WHERE {clause}"
                " ORDER BY created DESC, seq DESC LIMIT %s",
                params,
            ).fetchall()
            return [_message(conn, row) for row in reversed(rows)]

    def record_delivery(self, message_id: str, delivery: Delivery) -> None:
        def work(conn: Conn) -> None:
            found = conn.execute(
                "SELECT 1 FROM messages WHERE id = %s FOR UPDATE", (message_id,)
            ).fetchone()
            if found is None:
                raise KeyError(message_id)
            conn.execute(
                "INSERT INTO message_deliveries (message_id, channel, outcome, at, ref)"
                " VALUES (%s, %s, %s, %s, %s)",
                (message_id, delivery.channel, delivery.outcome, delivery.at, delivery.ref),
            )

        run(self._pool, work)

    def find_by_ref(self, refs: builtins.list[str]) -> StoredMessage | None:
        with self._pool.connection() as conn:
            for ref in refs:
                row = conn.execute(
                    "SELECT message_id FROM message_deliveries WHERE ref = %s ORDER BY seq LIMIT 1",
                    (ref,),
                ).fetchone()
                if row is not None:
                    found = conn.execute(
                        f"SELECT {COLUMNS} FROM messages WHERE id = %s", (row[0],)
                    ).fetchone()
                    return None if found is None else _message(conn, found)
        return None

    def mark_read(self, message_id: str, *, via: str, at: float) -> bool:
        with self._pool.connection() as conn:
            cursor = conn.execute(
                "UPDATE messages SET read_at = %s, read_via = %s, due_at = NULL, pending = '[]'"
                " WHERE id = %s AND read_at IS NULL",
                (at, via, message_id),
            )
            return cursor.rowcount == 1

    def mark_answered(self, message_id: str, *, via: str, at: float) -> bool:
        with self._pool.connection() as conn:
            cursor = conn.execute(
                "UPDATE messages SET answered_at = %s, answered_via = %s,"
                " read_at = COALESCE(read_at, %s), read_via = COALESCE(read_via, %s),"
                " due_at = NULL, pending = '[]' WHERE id = %s AND answered_at IS NULL",
                (at, via, at, via, message_id),
            )
            return cursor.rowcount == 1

    def schedule(self, message_id: str, *, pending: tuple[str, ...], due_at: float | None) -> None:
        with self._pool.connection() as conn:
            cursor = conn.execute(
                "UPDATE messages SET pending = %s, due_at = %s WHERE id = %s",
                (json.dumps(list(pending)), due_at if pending else None, message_id),
            )
            if cursor.rowcount != 1:
                raise KeyError(message_id)

    def take_due(self, now: float) -> builtins.list[StoredMessage]:
        def work(conn: Conn) -> builtins.list[StoredMessage]:
            # Rows another worker is taking are skipped, not waited for: they are its to send.
            rows = conn.execute(
                f"SELECT {COLUMNS} FROM messages WHERE due_at IS NOT NULL AND due_at <= %s"
                " AND read_at IS NULL ORDER BY due_at, seq FOR UPDATE SKIP LOCKED",
                (now,),
            ).fetchall()
            conn.execute(
                "UPDATE messages SET due_at = NULL WHERE id = ANY(%s)", ([r[0] for r in rows],)
            )
            return [_message(conn, row) for row in rows]

        return run(self._pool, work)

    def next_due(self) -> float | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT MIN(due_at) FROM messages WHERE due_at IS NOT NULL AND read_at IS NULL"
            ).fetchone()
        return None if row is None or row[0] is None else float(row[0])


def _message(conn: Conn, row: tuple[Any, ...]) -> StoredMessage:
    deliveries = conn.execute(
        "SELECT channel, outcome, at, ref FROM message_deliveries WHERE message_id = %s"
        " ORDER BY seq",
        (row[0],),
    ).fetchall()
    return message_of_row(row, deliveries)
