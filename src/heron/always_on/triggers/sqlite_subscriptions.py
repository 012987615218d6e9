"""The subscriptions' store in heron's SQLite database (table `subscriptions`): apart from the
other triggers' stores (`heron.always_on.triggers.sqlite_store`) because `heron serve`'s intake
opens it alone, before the agent side is imported (`heron.always_on.intake`)."""

from __future__ import annotations

import builtins
import sqlite3

from heron._support.state import sqlite_errors
from heron.always_on.triggers.subscriptions import Subscription, SubscriptionFilter

_SUBSCRIPTIONS = """
CREATE TABLE IF NOT EXISTS subscriptions (
    id         TEXT PRIMARY KEY,
    session    TEXT NOT NULL,
    source     TEXT NOT NULL,
    filter     TEXT NOT NULL,
    note       TEXT NOT NULL,
    created_at REAL NOT NULL
)
"""
_SUBSCRIPTIONS_INDEX = (
    "CREATE INDEX IF NOT EXISTS subscriptions_by_session ON subscriptions (session, created_at)"
)


@sqlite_errors
class SqliteSubscriptionStore:
    """`SubscriptionStore` on SQLite; the filter is stored as JSON."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        with conn:
            conn.execute(_SUBSCRIPTIONS)
            conn.execute(_SUBSCRIPTIONS_INDEX)

    def insert(self, subscription: Subscription) -> None:
        with self._conn:
            self._conn.execute(
                "INSERT INTO subscriptions (id, session, source, filter, note, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                subscription.row(),
            )

    def remove(self, session: str, subscription_id: str) -> bool:
        with self._conn:
            cursor = self._conn.execute(
                "DELETE FROM subscriptions WHERE id = ? AND session = ?",
                (subscription_id, session),
            )
        return cursor.rowcount == 1

    def list(self, session: str) -> builtins.list[Subscription]:
        rows = self._conn.execute(
            "SELECT id, source, filter, note, created_at FROM subscriptions WHERE session = ?"
            " ORDER BY created_at, rowid",
            (session,),
        )
        return [
            Subscription(
                id=row[0],
                session=session,
                source=row[1],
                filter=SubscriptionFilter.model_validate_json(row[2]),
                note=row[3],
                created_at=row[4],
            )
            for row in rows
        ]
