"""`BusStore`: the small interface every event-bus back end implements.

The embedded default is `heron.always_on.bus.sqlite_store.SqliteBusStore`; a PostgreSQL back end
implements the same methods and passes the same contract suite
(`tests/contracts/test_bus_store_contract.py`). Nothing here names a storage technology.

The contract:

- `publish` returns only after the event is durable: that return is the acknowledgement to the
  producer. Publishing is idempotent per `(session, idempotency_key)` (and per event id): a
  duplicate returns `False` and stores nothing, so producers may retry freely.
- `pending` lists a session's unconsumed events in timeline order (timestamp, then arrival).
- `consume` appends history messages to the session AND marks events consumed in one atomic
  step: after a crash either both happened or neither did, so no event is lost and none is
  appended twice. Consuming an event that is not pending raises `AlreadyConsumedError` and
  changes nothing.
- `watch` registers a callback run after each successful publish through this store object,
  so an in-process consumer wakes at once instead of polling.
- `pending_sessions` names the sessions with pending events, at a cost that grows with their
  number, not with the number of events (a host of many sessions polls it);
  `key_session` names the session that holds an idempotency key, so an ingress shared by many
  sessions can store each key once across all of them.
- `sessions` is the session store `consume` appends to: a bus back end and its session
  histories live in one database, because `consume` is one transaction over both.
- Poison messages are quarantined, never retried forever: `fail` records a failed attempt to
  consume events, and an event that failed `max_attempts` times leaves `pending` for the
  dead letters (`dead_letters`, `heron events tail --dead`), with its error and attempt count.
  A stored event that cannot even be read back (written by another version, damaged) is
  quarantined by `pending` at once: no attempt could ever succeed. The failure counts are
  durable, so a restart does not reset them.
- `events`, `consumed_into` and `dead_letters` are for inspection (`heron events tail`, tests).

The storage methods are `async`: the event loop calls them on the hot path of `heron serve`,
where a networked back end must not block the loop (the SQLite implementation runs its short
local transactions in line).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from heron.always_on.bus.model import BusEvent
from heron.errors import HeronError
from heron.messages import Message
from heron.sessions.store import ConcurrentWriteError, SessionStore

EventCallback = Callable[[BusEvent], None]
"""Called synchronously, on the publisher's thread, after the event is durable."""

Unwatch = Callable[[], None]


class BusStoreError(HeronError, RuntimeError):
    """A bus operation was refused; nothing was changed."""


class AlreadyConsumedError(BusStoreError):
    """`consume` named events that are unknown, belong to another session or were consumed."""

    def __init__(self, session: str, event_ids: Sequence[str]) -> None:
        self.session = session
        self.event_ids = tuple(event_ids)
        super().__init__(
            f"events {', '.join(self.event_ids)} are not pending in session {session!r}; "
            "nothing was consumed"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredEvent:
    """One event as the bus keeps it (`BusStore.events`)."""

    seq: int
    """Arrival order across the whole bus: increases with every stored event."""
    event: BusEvent
    consumed: bool
    dead: bool = False
    """Quarantined as a poison message (see `BusStore.dead_letters`); never consumed."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DeadLetter:
    """An event taken out of `pending` because it could not be consumed."""

    seq: int
    event_id: str
    session: str
    kind: str
    attempts: int
    """Failed attempts to consume it (0: it could not be read back at all)."""
    error: str
    """The last failure, one line: `ExceptionType: message`."""
    dead_at: float
    """Unix time of the quarantine."""
    event: BusEvent | None
    """The event, or `None` when what is stored cannot be read as an event."""
    body: str
    """The event as stored (its JSON), for an operator to inspect or repair."""


class BusStore(Protocol):
    """Durable, idempotent event storage with exactly-once consumption into a session."""

    @property
    def sessions(self) -> SessionStore:
        """The session store whose histories `consume` appends to."""
        ...

    async def publish(self, event: BusEvent) -> bool:
        """Persist `event`; `False` (and nothing stored) for a duplicate."""
        ...

    async def publish_many(self, events: Sequence[BusEvent]) -> list[bool]:
        """Persist a burst with one durable write (group commit); one flag per event."""
        ...

    async def pending(self, session: str, *, limit: int | None = None) -> list[BusEvent]:
        """Unconsumed events of `session`, oldest first."""
        ...

    async def consume(
        self,
        session: str,
        event_ids: Sequence[str],
        messages: Sequence[Message],
        *,
        expected_last_entry: int | None = None,
    ) -> int:
        """Append `messages` to the session history and mark `event_ids` consumed, atomically.

        Returns the session's new head entry. `expected_last_entry` is the optimistic
        single-writer check of `SessionStore.append` (`ConcurrentWriteError` on mismatch).
        """
        ...

    async def fail(
        self, session: str, event_ids: Sequence[str], error: str, *, max_attempts: int
    ) -> list[str]:
        """Record one failed attempt to consume each of `event_ids` (pending in `session`;
        others are ignored) with its `error`. Those that have now failed `max_attempts` times
        are quarantined: out of `pending` for good, into `dead_letters`. Returns their ids."""
        ...

    async def dead_letters(
        self, *, session: str | None = None, after: int | None = None, limit: int | None = None
    ) -> list[DeadLetter]:
        """Quarantined events in arrival order: of one `session` or all, only those after
        `seq` `after`, only the last `limit`."""
        ...

    def watch(self, callback: EventCallback) -> Unwatch:
        """Call `callback` after every successful publish; returns a function that stops it."""
        ...

    async def pending_sessions(self) -> list[str]:
        """The sessions with at least one pending event, in name order."""
        ...

    async def key_session(self, idempotency_key: str) -> str | None:
        """A session that holds an event with this idempotency key, or `None`."""
        ...

    async def consumed_into(self, event_id: str) -> int | None:
        """The history entry an event was consumed into (`0` when `consume` appended no
        message); `None` while it is pending or unknown."""
        ...

    async def events(
        self,
        *,
        session: str | None = None,
        pending_only: bool = False,
        after: int | None = None,
        limit: int | None = None,
    ) -> list[StoredEvent]:
        """Stored events in arrival order, consumed ones included unless `pending_only`:
        of one `session` or all, only those after `seq` `after`, only the last `limit`."""
        ...


__all__ = [
    "AlreadyConsumedError",
    "BusStore",
    "BusStoreError",
    "ConcurrentWriteError",
    "DeadLetter",
    "EventCallback",
    "StoredEvent",
    "Unwatch",
]
