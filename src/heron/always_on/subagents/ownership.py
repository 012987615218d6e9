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
  Every write of a child's history carries that epoch too (`fence`): a worker paused past its
  lease whose session was taken over has its children's writes refused (`StaleEpochError`),
  and such a child ends without a result (`superseded`), left to the new owner to report
  `lost`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Protocol

from heron.always_on.subagents.store import SubagentError, SubagentRecord
from heron.sandbox.cgroups import pid_alive
from heron.sessions.lease import Fenced, Lease, LeaseStore

__all__ = ["LeaseOwnership", "Ownership", "ProcessOwnership", "owner_alive"]


class Ownership(Protocol):
    def owner(self, root_session: str) -> int:
        """The owner to record for a child spawned now under `root_session`."""
        ...

    def alive(self, record: SubagentRecord) -> bool:
        """Whether the runner of `record` may still be running it."""
        ...

    def fence(self, record: SubagentRecord) -> None:
        """From now on, the writes of the child's session carry its owner (while it runs)."""
        ...

    def unfence(self, record: SubagentRecord) -> None:
        """The child has ended: stop fencing its session."""
        ...

    def superseded(self, record: SubagentRecord) -> bool:
        """Whether another runner took the child's root session over: the child must end
        without a word (its writes are refused; the new owner reports it `lost`)."""
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

    # One process holds its sessions through a file lock: nothing else writes them.
    def fence(self, record: SubagentRecord) -> None:
        pass

    def unfence(self, record: SubagentRecord) -> None:
        pass

    def superseded(self, record: SubagentRecord) -> bool:
        return False


class LeaseOwnership:
    """Several workers: the owner is the epoch of the root session's lease (see the module
    docstring)."""

    def __init__(
        self,
        leases: LeaseStore,
        *,
        fence: Fenced | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`fence`: the session store the children write (`None` where no child runs, as in
        `heron agents`)."""
        self.leases = leases
        self._fence = fence
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

    def fence(self, record: SubagentRecord) -> None:
        if self._fence is not None:
            lease = Lease(
                session=record.root_session,
                owner=self.leases.owner,
                epoch=record.owner,
                expires_at=0.0,  # only the epoch fences
            )
            self._fence.fence(lease, session=record.session)

    def unfence(self, record: SubagentRecord) -> None:
        if self._fence is not None:
            self._fence.unfence(record.session)

    def superseded(self, record: SubagentRecord) -> bool:
        lease = self.leases.current(record.root_session)
        return lease is None or lease.epoch != record.owner
