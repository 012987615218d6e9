"""Who runs a sub-agent, and whether that runner still lives: the `owner` of its record.

A child runs inside the process that spawned it. After a crash the next process ends the
children of a runner that is gone as `lost` (`SubagentRuntime.recover`), so it must tell a
dead runner from a living one:

- one host (`ProcessOwnership`, the default): the owner is the process id, alive while that
  process runs;
- several workers on a shared store (`LeaseOwnership`): a process id means nothing on another
  host, so the owner is the epoch of the root session's lease when the child was spawned — the
  child runs in the worker holding that lease, and lives while that same lease does. A worker
  that took the session over (a new epoch) knows at once that the old owner's children are gone.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Protocol

from heron.always_on.subagents.store import SubagentError, SubagentRecord
from heron.sandbox.cgroups import pid_alive
from heron.sessions.lease import LeaseStore

__all__ = ["LeaseOwnership", "Ownership", "ProcessOwnership", "owner_alive"]


class Ownership(Protocol):
    def owner(self, root_session: str) -> int:
        """The owner to record for a child spawned now under `root_session`."""
        ...

    def alive(self, record: SubagentRecord) -> bool:
        """Whether the runner of `record` may still be running it."""
        ...


def owner_alive(pid: int) -> bool:
    """Whether process `pid` (a record's owner) still runs."""
    return pid == os.getpid() or pid_alive(pid)


class ProcessOwnership:
    """One host: the owner is this process's id."""

    def owner(self, root_session: str) -> int:
        return os.getpid()

    def alive(self, record: SubagentRecord) -> bool:
        return owner_alive(record.owner)


class LeaseOwnership:
    """Several workers: the owner is the epoch of the root session's lease (see the module
    docstring)."""

    def __init__(self, leases: LeaseStore, *, clock: Callable[[], float] = time.time) -> None:
        self.leases = leases
        self._clock = clock

    def owner(self, root_session: str) -> int:
        lease = self.leases.current(root_session)
        if lease is None or lease.owner != self.leases.owner:
            raise SubagentError(
                f"this worker no longer holds session {root_session!r}; it cannot spawn"
            )
        return lease.epoch

    def alive(self, record: SubagentRecord) -> bool:
        lease = self.leases.current(record.root_session)
        return (
            lease is not None and lease.epoch == record.owner and lease.expires_at > self._clock()
        )
