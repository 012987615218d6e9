"""Ownership of a session across workers: a lease with an epoch (a fencing token).

Several `heron serve` workers on one shared store must not write one session at once. A worker
owns a session while it holds its lease; the lease expires unless renewed, so a dead worker's
sessions are taken over by another after `ttl`. Every new owner gets a greater epoch, and every
write of a session by a store that holds a lease checks, atomically with the write, that the
epoch is still current: a worker that was paused (a GC pause, SIGSTOP, a network partition)
past its lease and comes back has its writes refused (`StaleEpochError`) instead of corrupting
a history another worker now owns. The new owner opens the session the way a restart does, so
the same repair answers the calls the old owner left open.

The PostgreSQL implementation is `heron.sessions.postgres_leases.PostgresLeases`; the embedded
SQLite back end serves one process, which holds its sessions through a file lock
(`heron.sessions.lock`) instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from heron.errors import HeronError
from heron.sessions.lock import SessionInUseError


class StaleEpochError(HeronError, RuntimeError):
    """A write carried an epoch that is no longer the session's: another worker owns it now.
    Nothing was written."""

    def __init__(self, session: str, epoch: int, current: int | None) -> None:
        self.session = session
        self.epoch = epoch
        self.current = current
        super().__init__(
            f"session {session!r}: this worker's lease (epoch {epoch}) was taken over "
            f"(the current epoch is {current}); refusing a stale write"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Lease:
    """One worker's ownership of one session."""

    session: str
    owner: str
    epoch: int
    """The fencing token: greater for every new owner of the session."""
    expires_at: float
    """Unix time after which another worker may take the session over."""
    taken_over: bool = False
    """The session had another owner before (whose lease expired)."""


class LeaseStore(Protocol):
    """Session leases of one worker (`owner`) on a shared store."""

    owner: str
    ttl_s: float
    """How long a lease lasts unless renewed."""

    def acquire(self, session: str) -> Lease | None:
        """Take the session when it has no owner or its owner's lease expired (a new epoch);
        `None` while another worker holds it."""
        ...

    def claim(self, limit: int) -> list[Lease]:
        """Take up to `limit` sessions that have pending events and no living owner, skipping
        those another worker is claiming at the same moment."""
        ...

    def renew(self, lease: Lease) -> Lease | None:
        """Extend a lease this worker still holds; `None` when it was taken over."""
        ...

    def release(self, lease: Lease) -> None:
        """Give the session up at once (its epoch stays, so the next owner's is greater)."""
        ...

    def current(self, session: str) -> Lease | None:
        """The session's lease as stored (living or expired), or `None`."""
        ...


class Fenced(Protocol):
    """A store whose writes of a session check the epoch of the lease it was told."""

    def fence(self, lease: Lease, *, session: str | None = None) -> None:
        """Fence `session` (by default `lease.session`) with the epoch of `lease`."""
        ...

    def unfence(self, session: str) -> None: ...


class LeaseHold:
    """A worker's hold on one session through its lease: what `heron serve` on a shared store
    takes where one process takes the file lock (`heron.sessions.lock.SessionLock`)."""

    def __init__(self, leases: LeaseStore, store: Fenced, session: str) -> None:
        self.leases = leases
        self.store = store
        self.session = session
        self.lease: Lease | None = None

    def acquire(self) -> None:
        """Take the lease (a new epoch) and fence the store's writes of the session with it;
        `SessionInUseError` naming the owner while another worker's lease is alive."""
        lease = self.leases.acquire(self.session)
        if lease is None:
            current = self.leases.current(self.session)
            owner = current.owner if current is not None else "unknown"
            raise SessionInUseError(self.session, f"worker {owner}")
        self.store.fence(lease)
        self.lease = lease

    def renew(self) -> bool:
        """Extend the lease; `False` when it was taken over (the store keeps refusing the
        session's writes: the old epoch stays fenced until `release`)."""
        if self.lease is None:
            return False
        renewed = self.leases.renew(self.lease)
        if renewed is None:
            return False
        self.lease = renewed
        return True

    def release(self) -> None:
        """Give the session up (a no-op when it is not held)."""
        if self.lease is not None:
            self.leases.release(self.lease)
            self.store.unfence(self.session)
            self.lease = None


__all__ = ["Fenced", "Lease", "LeaseHold", "LeaseStore", "StaleEpochError"]
