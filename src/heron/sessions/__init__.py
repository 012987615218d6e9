"""Durable, append-only session histories."""

from heron.sessions.store import (
    ConcurrentWriteError,
    SessionEntry,
    SessionInfo,
    SessionStore,
    transaction,
)

__all__ = ["ConcurrentWriteError", "SessionEntry", "SessionInfo", "SessionStore", "transaction"]
