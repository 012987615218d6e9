"""Durable, append-only session histories: the `SessionStore` protocol and its SQLite
implementation."""

from heron.sessions.sqlite_store import SqliteSessionStore
from heron.sessions.store import (
    ConcurrentWriteError,
    SessionEntry,
    SessionExistsError,
    SessionInfo,
    SessionStore,
)

__all__ = [
    "ConcurrentWriteError",
    "SessionEntry",
    "SessionExistsError",
    "SessionInfo",
    "SessionStore",
    "SqliteSessionStore",
]
