"""`SessionStore`: append-only conversation histories, the interface every back end implements.

Each entry is one `Message` (user, assistant, tool result) with its own id, the id of the entry
before it in the same session (`parent_id`), a timestamp and the role. Entries are never
updated or deleted, so a history can be read back exactly as the model saw it. Entry ids grow
with every append across the whole store (they are unique per store, not per session).

Beside the entries the store keeps token counts (`TokenCounts`, `token_counts`): an entry's
tokens as one counter counts them, keyed by the entry's position in its session (0 for the
first; entries are never removed, so a position always names the same entry). Derived data,
stored with a later append or by itself, never changed: a resumed session's context-window
trimmer need not count its history again.

Write before show: callers append a message before they display it, so whatever a user saw
survives a crash.

Concurrent writers are refused, never interleaved: `append(..., expected_last_entry=head)`
checks, atomically with the write, that the session still ends at the entry the writer last
saw, and raises `ConcurrentWriteError` otherwise. A writer that owns a session keeps the head
`append` returns and passes it on its next call; `0` means "the session must still be empty".

The embedded implementation is `heron.sessions.sqlite_store.SqliteSessionStore`. The event bus
appends to the same histories inside its own atomic `consume` (`heron.always_on.bus.store`), so
a bus back end comes with the session store it appends to (`BusStore.sessions`). The methods
are synchronous: a local SQLite append takes microseconds, and the callers (the CLI, the
session writer, the event loop between turns) call them in line.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Protocol

from pydantic import Json, TypeAdapter, ValidationError

from heron.errors import HeronError, StoreError
from heron.messages import Message

MESSAGE: TypeAdapter[Message] = TypeAdapter(Message)
"""Validates and serialises one history message (the `role` field discriminates)."""
_HISTORY: TypeAdapter[list[Message]] = TypeAdapter(list[Json[Message]])
"""Stored rows' JSON texts, each one message."""
_BODY = itemgetter(-1)

Companion = Callable[[Any, str, Sequence[Message]], None]
"""A write that joins every append's transaction: a store's `companions` run inside it, after
the history rows, with `(connection, session, messages)`, so rows of another store on the same
database (the gateway's turn log) commit with the history or not at all."""


class ConcurrentWriteError(HeronError, RuntimeError):
    """Another writer appended to the session since this writer last saw it."""

    def __init__(self, session: str, expected: int, actual: int) -> None:
        self.session = session
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"session {session!r} was written by someone else: expected it to end at entry "
            f"{expected}, it ends at entry {actual}; refusing to interleave"
        )


class SessionExistsError(HeronError, ValueError):
    """`create` named a session that already has entries; nothing was written."""

    def __init__(self, session: str, entries: int) -> None:
        self.session = session
        self.entries = entries
        super().__init__(f"session {session!r} already exists ({entries} entries)")


class CorruptEntryError(StoreError):
    """A stored entry is not one valid message (the database was written by something else,
    or damaged); nothing of the history is returned."""

    def __init__(self, session: str, entry_id: int, reasons: str) -> None:
        self.session = session
        self.entry_id = entry_id
        super().__init__(
            f"stored entry {entry_id} of session {session!r} is not a valid message ({reasons})"
        )


class _FullCollectionsHeld:
    """`reading_history()`: no full collection while any thread reads a whole history.

    Decoding thousands of entries makes tens of thousands of objects that live on, none in
    a cycle. The cyclic collector's young generations take them in small, cache-warm steps,
    but each full collection meanwhile walks every live object of the process (every other
    history in memory included), again and again as the read grows: a third to a half of a
    3,000-turn read, more at 100,000 entries. Pausing the collector altogether was slower: one
    pass over all the new objects at the end, with cold caches. The oldest generation's
    threshold is held high from the first reader in to the last reader out, then restored."""

    _HELD = 1_000_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._readers = 0
        self._threshold = gc.get_threshold()

    def __enter__(self) -> None:
        with self._lock:
            if not self._readers:
                self._threshold = gc.get_threshold()
                young, middle, *_ = self._threshold
                gc.set_threshold(young, middle, self._HELD)
            self._readers += 1

    def __exit__(self, *_exc: object) -> None:
        with self._lock:
            self._readers -= 1
            if not self._readers:
                gc.set_threshold(*self._threshold)


_FULL_COLLECTIONS_HELD = _FullCollectionsHeld()


def reading_history() -> _FullCollectionsHeld:
    """Hold off full garbage collections while a whole history is read (`with
    reading_history(): ...`; see `_FullCollectionsHeld`)."""
    return _FULL_COLLECTIONS_HELD


def decode_history(session: str, rows: Sequence[Sequence[Any]]) -> list[Message]:
    """The messages of stored rows `(entry_id, ..., message JSON)`, oldest first, parsed and
    validated in one call over all of them (several times faster than one call per row, and
    faster than joining the rows into one JSON array: no copy of the whole text).

    Raises `CorruptEntryError` naming the first row that is not one valid message."""
    try:
        return _HISTORY.validate_python(list(map(_BODY, rows)))
    except ValidationError as exc:
        errors = exc.errors()
        at = errors[0]["loc"][0]  # a list's errors are located by the item's index first
        assert isinstance(at, int)
        # The first bad row's reasons, without the stored input (outside data).
        reasons = "; ".join(
            f"{'.'.join(map(str, e['loc'][1:])) or 'message'}: {e['msg']}"
            for e in errors[:3]
            if e["loc"][0] == at
        )
        raise CorruptEntryError(session, int(rows[at][0]), reasons) from None


@dataclass(frozen=True, kw_only=True, slots=True)
class TokenCounts:
    """Token counts of a session's entries made by the counter `counted_by` names
    (`heron.models.tokens.counter_key`)."""

    counted_by: str
    tokens: Mapping[int, int]
    """Tokens by the entry's position in its session (0 for the first)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionEntry:
    """One stored history message."""

    entry_id: int
    session: str
    parent_id: int | None
    """The previous entry of the same session; `None` for the first."""
    timestamp: float
    """Seconds since the epoch, when the entry was written."""
    message: Message


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionInfo:
    """One session of `SessionStore.list_sessions`."""

    session: str
    entries: int
    last_entry: int
    updated: float
    """Seconds since the epoch of its last entry."""


class SessionStore(Protocol):
    """Append-only session histories with a single-writer check (see the module docstring)."""

    def head(self, session: str) -> int:
        """The id of the session's last entry; `0` when it has none."""
        ...

    def append(
        self,
        session: str,
        messages: Sequence[Message],
        *,
        expected_last_entry: int | None = None,
        tokens: TokenCounts | None = None,
    ) -> int:
        """Append `messages` in order, atomically, and return the session's new head.

        `expected_last_entry` (when not `None`) must equal the current head, else
        `ConcurrentWriteError` and nothing is written. `tokens`: counts of the session's
        entries (stored before or by this append), stored in the same transaction.
        """
        ...

    def create(self, session: str, entries: Sequence[tuple[float, Message]]) -> tuple[int, int]:
        """Write a new session from `(timestamp, message)` pairs (an import or a fork), keeping
        the timestamps, atomically; returns its first and last entry ids (`(0, 0)` for none).

        Raises `SessionExistsError` (and writes nothing) when `session` already has entries.
        """
        ...

    def load(self, session: str) -> list[Message]:
        """The session's history, oldest first (empty for an unknown session).

        Every read of entries raises `CorruptEntryError` for a stored entry that is not one
        valid message."""
        ...

    def load_with_head(self, session: str) -> tuple[list[Message], int]:
        """The history and its head, read from one snapshot: what a new writer starts from."""
        ...

    def load_tail(self, session: str) -> tuple[list[Message], int]:
        """The end of the history and its head, read from one snapshot, without reading the
        rest: the last message that is not a tool result and every message after it (its
        last tool round, when it is an assistant message with calls). What a writer needs to
        repair a session and decide whether it waits for the model; the cost does not grow
        with the history's length."""
        ...

    def entries(self, session: str) -> list[SessionEntry]:
        """The session's entries with their ids, parents and timestamps, oldest first."""
        ...

    def token_counts(self, session: str, counted_by: str) -> dict[int, int]:
        """The session's stored counts made by `counted_by`, by position, without reading the
        messages (positions without a count are absent)."""
        ...

    def add_token_counts(self, session: str, tokens: TokenCounts) -> None:
        """Store counts of the session's entries; a count already stored is kept (the same
        counter counts an entry the same way)."""
        ...

    def list_sessions(self) -> list[SessionInfo]:
        """Every session with at least one entry, most recently written first."""
        ...

    def close(self) -> None:
        """Release the store's connections; the store is not used afterwards."""
        ...


__all__ = [
    "MESSAGE",
    "Companion",
    "ConcurrentWriteError",
    "CorruptEntryError",
    "SessionEntry",
    "SessionExistsError",
    "SessionInfo",
    "SessionStore",
    "TokenCounts",
    "decode_history",
    "reading_history",
]
