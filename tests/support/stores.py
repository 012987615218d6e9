"""Store back ends for the contract suites (`tests/contracts/`).

A `StoreBackend` opens a store of every protocol on one fresh database. Each call opens a new
store object (a second connection, as another process would have), so a suite checks that
something is durable by reading it back through a second store. `BACKENDS` names every back
end the suites run against: today the embedded SQLite one; the PostgreSQL issue adds its own
here and every contract suite runs against it unchanged.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from heron._support.state import open_db
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.always_on.bus.store import BusStore
from heron.always_on.channels.mail_inbound import ThreadIndex
from heron.always_on.channels.sqlite_mail_inbound import SqliteThreadIndex
from heron.always_on.jobs.sqlite_store import SqliteJobStore
from heron.always_on.jobs.store import JobStore
from heron.always_on.sessions import HostIndex
from heron.always_on.sqlite_sessions import SqliteHostIndex
from heron.always_on.subagents.sqlite_store import SqliteSubagentStore
from heron.always_on.subagents.store import SubagentStore
from heron.always_on.triggers.monitor import MonitorStore
from heron.always_on.triggers.sqlite_store import (
    SqliteMonitorStore,
    SqliteSubscriptionStore,
    SqliteTimerStore,
)
from heron.always_on.triggers.subscriptions import SubscriptionStore
from heron.always_on.triggers.timers import TimerStore
from heron.artifacts.sqlite_store import SqliteArtifactCatalog
from heron.artifacts.store import ArtifactCatalog
from heron.audit.executions import ExecutionStore
from heron.audit.sqlite_store import SqliteApprovalAudit, SqliteExecutionStore
from heron.collaboration.sqlite_store import SqliteMessageStore
from heron.collaboration.store import MessageStore
from heron.humans.sqlite_store import SqliteRequestStore
from heron.humans.store import RequestStore
from heron.mcp.trust.pins import TrustStore
from heron.mcp.trust.sqlite_store import SqliteTrustStore
from heron.safety.idempotency import IdempotencyLedger
from heron.safety.sqlite_idempotency import SqliteIdempotencyLedger
from heron.sessions.sqlite_store import SqliteSessionStore
from heron.sessions.store import SessionStore
from heron.toolsets.shell import ShellHistory
from heron.toolsets.sqlite_shell_history import SqliteShellHistory
from heron.turn.approval_audit import AuditLog


class StoreBackend(Protocol):
    """Opens stores of every protocol on one database; see the module docstring."""

    name: str

    def sessions(self) -> SessionStore: ...
    def bus(self) -> BusStore: ...
    def jobs(self) -> JobStore: ...
    def timers(self) -> TimerStore: ...
    def monitors(self) -> MonitorStore: ...
    def subscriptions(self) -> SubscriptionStore: ...
    def approval_audit(self) -> AuditLog: ...
    def executions(self) -> ExecutionStore: ...
    def messages(self) -> MessageStore: ...
    def human_requests(self) -> RequestStore: ...
    def trust(self) -> TrustStore: ...
    def idempotency(self) -> IdempotencyLedger: ...
    def shell_history(self) -> ShellHistory: ...
    def artifact_catalog(self) -> ArtifactCatalog: ...
    def host_index(self) -> HostIndex: ...
    def thread_index(self) -> ThreadIndex: ...
    def subagents(self) -> SubagentStore: ...
    def close(self) -> None:
        """Close every store this back end opened."""


class SqliteBackend:
    """Every store in `<root>/heron.db`, each on its own connection."""

    name = "sqlite"

    def __init__(self, root: Path) -> None:
        self.root = root
        self._closers: list[Callable[[], None]] = []

    def _conn(self) -> sqlite3.Connection:
        conn = open_db(self.root)
        self._closers.append(conn.close)
        return conn

    def sessions(self) -> SqliteSessionStore:
        return SqliteSessionStore(self._conn())

    def bus(self) -> SqliteBusStore:
        return SqliteBusStore(self.sessions())

    def jobs(self) -> SqliteJobStore:
        return SqliteJobStore(self._conn())

    def timers(self) -> SqliteTimerStore:
        return SqliteTimerStore(self._conn())

    def monitors(self) -> SqliteMonitorStore:
        return SqliteMonitorStore(self._conn())

    def subscriptions(self) -> SqliteSubscriptionStore:
        return SqliteSubscriptionStore(self._conn())

    def approval_audit(self) -> SqliteApprovalAudit:
        return SqliteApprovalAudit(self._conn())

    def executions(self) -> SqliteExecutionStore:
        return SqliteExecutionStore(self._conn())

    def messages(self) -> SqliteMessageStore:
        return SqliteMessageStore(self._conn())

    def human_requests(self) -> SqliteRequestStore:
        return SqliteRequestStore(self._conn())

    def trust(self) -> SqliteTrustStore:
        return SqliteTrustStore(self.root)

    def idempotency(self) -> SqliteIdempotencyLedger:
        return SqliteIdempotencyLedger(self.root)

    def shell_history(self) -> SqliteShellHistory:
        return SqliteShellHistory(self._conn())

    def artifact_catalog(self) -> SqliteArtifactCatalog:
        return SqliteArtifactCatalog(self.root)

    def host_index(self) -> SqliteHostIndex:
        return SqliteHostIndex(self._conn())

    def thread_index(self) -> SqliteThreadIndex:
        return SqliteThreadIndex(self._conn())

    def subagents(self) -> SqliteSubagentStore:
        return SqliteSubagentStore(self._conn())

    def close(self) -> None:
        for close in reversed(self._closers):
            close()
        self._closers.clear()


BACKENDS: dict[str, Callable[[Path], StoreBackend]] = {"sqlite": SqliteBackend}
"""Every back end the contract suites run against, by name."""
