"""The stores of `heron serve` on a PostgreSQL database shared with other workers
(`heron serve --store`, docs/deployment.md)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from heron.always_on.sessions import HostIndex
from heron.connectors.mail.maildir import Maildir
from heron.sessions.lease import LeaseStore

if TYPE_CHECKING:
    from heron._support.clock import Clock
    from heron._support.postgres import Pool
    from heron.always_on.intake import Intake
    from heron.always_on.server import HeronServer
    from heron.always_on.subagents.postgres_store import PostgresSubagentStore
    from heron.always_on.subagents.runtime import SubagentRuntime
    from heron.audit.executions import ExecutionStore
    from heron.humans.postgres_store import PostgresRequestStore
    from heron.safety.idempotency import IdempotencyLedger
    from heron.turn.approval_audit import AuditLog

log = logging.getLogger("heron.always_on.shared_store")

__all__ = ["SharedRecords", "open_shared", "reap_children", "unowned_due"]


@dataclass(frozen=True, slots=True)
class SharedRecords:
    """The records a worker keeps beside the bus, on the shared database: requests to a human
    (answered from any worker or `heron approvals --store`), the ledger that runs an approved
    call once, both audit trails, sub-agent tasks. Each store is a view of the one pool,
    closed with the bus."""

    pool: Pool

    def requests(self) -> PostgresRequestStore:
        from heron.humans.postgres_store import PostgresRequestStore

        return PostgresRequestStore(self.pool)

    def ledger(self) -> IdempotencyLedger:
        from heron.safety.postgres_idempotency import PostgresIdempotencyLedger

        return PostgresIdempotencyLedger(self.pool)

    def approval_audit(self) -> AuditLog:
        from heron.audit.postgres_store import PostgresApprovalAudit

        return PostgresApprovalAudit(self.pool)

    def executions(self) -> ExecutionStore:
        from heron.audit.postgres_store import PostgresExecutionStore

        return PostgresExecutionStore(self.pool)

    def subagents(self) -> PostgresSubagentStore:
        from heron.always_on.subagents.postgres_store import PostgresSubagentStore

        return PostgresSubagentStore(self.pool)


def open_shared(server: HeronServer, intake: Intake) -> tuple[HostIndex, LeaseStore]:
    """Take over the shared stores the intake opened (`open_intake` on `store_url`), with
    this worker's leases; the other records on the bus's database in `server.shared`."""
    from heron.always_on.bus.postgres_store import PostgresBusStore
    from heron.always_on.channels.postgres_mail_inbound import PostgresThreadIndex
    from heron.always_on.postgres_workspaces import PostgresWorkspaceBindings
    from heron.sessions.postgres_leases import PostgresLeases

    cfg = server.config
    bus = intake.bus
    assert isinstance(bus, PostgresBusStore) and intake.triggers is not None
    pool = bus.sessions.pool
    if cfg.maildir is not None:
        server.maildir = Maildir(cfg.maildir)
        server.threads = PostgresThreadIndex(pool)
    server.bus = bus
    server.shared = SharedRecords(pool)
    server._trigger_stores = intake.triggers
    server.workspaces = PostgresWorkspaceBindings(pool)
    owner = f"{os.uname().nodename}:{os.getpid()}:{os.urandom(3).hex()}"
    return intake.index, PostgresLeases(pool, owner=owner, ttl_s=cfg.lease_s)


def unowned_due(server: HeronServer) -> Callable[[float], list[str]]:
    """The sessions whose timers fell due while no worker holds them, for the host's poller
    (a dead worker's timers: no alarm of another worker knows them)."""
    from heron.always_on.triggers.postgres_store import PostgresTimerStore

    assert server.trigger_stores is not None
    timers = server.trigger_stores.timers
    assert isinstance(timers, PostgresTimerStore)  # `open_shared` opened them
    return timers.unowned_due


async def reap_children(runtime: SubagentRuntime, *, every_s: float, clock: Clock) -> None:
    """Until cancelled, every `every_s` (a lease): end the sub-agents of workers that died as
    `lost`, each reported to its parent once (`SubagentRuntime.reap`; every worker sweeps,
    the store's compare-and-set lets one of them end each)."""
    while True:
        await clock.sleep(every_s)
        try:
            runtime.reap()
        except Exception:  # a store hiccup: the next sweep tries again
            log.exception("sweeping the sub-agents of dead workers failed")
