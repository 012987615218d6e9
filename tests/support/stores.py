"""Store back ends for the contract suites (`tests/contracts/`).

A `StoreBackend` opens a store of every protocol on one fresh database. Each call opens a new
store object (a second connection, as another process would have), so a suite checks that
something is durable by reading it back through a second store. `BACKENDS` names every back
end the suites run against: the embedded SQLite one and PostgreSQL (a fresh database of the
test process's server per test, `support.postgres`). A back end lists the stores it
implements (`implements`); a suite runs against every back end that implements all the stores
it opens (`tests/contracts/conftest.py`), so a store added to a back end is tested at once.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, cast

import pytest

from heron._support.postgres import Pool, open_pool
from heron._support.state import open_db
from heron.always_on.bus.postgres_store import PostgresBusStore
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.always_on.bus.store import BusStore
from heron.always_on.channels.mail_inbound import ThreadIndex
from heron.always_on.channels.postgres_mail_inbound import PostgresThreadIndex
from heron.always_on.channels.sqlite_mail_inbound import SqliteThreadIndex
from heron.always_on.jobs.postgres_store import PostgresJobStore
from heron.always_on.jobs.sqlite_store import SqliteJobStore
from heron.always_on.jobs.store import JobStore
from heron.always_on.postgres_sessions import PostgresHostIndex
from heron.always_on.postgres_workspaces import PostgresWorkspaceBindings
from heron.always_on.sessions import HostIndex
from heron.always_on.sqlite_sessions import SqliteHostIndex
from heron.always_on.sqlite_workspaces import SqliteWorkspaceBindings
from heron.always_on.subagents.postgres_store import PostgresSubagentStore
from heron.always_on.subagents.sqlite_store import SqliteSubagentStore
from heron.always_on.subagents.store import SubagentStore
from heron.always_on.triggers.monitor import MonitorStore
from heron.always_on.triggers.postgres_store import (
    PostgresMonitorStore,
    PostgresSubscriptionStore,
    PostgresTimerStore,
)
from heron.always_on.triggers.sqlite_store import (
    SqliteMonitorStore,
    SqliteSubscriptionStore,
    SqliteTimerStore,
)
from heron.always_on.triggers.subscriptions import SubscriptionStore
from heron.always_on.triggers.timers import TimerStore
from heron.always_on.workspaces import WorkspaceBindings
from heron.artifacts.postgres_contents import PostgresArtifactContents
from heron.artifacts.postgres_store import PostgresArtifactCatalog
from heron.artifacts.sqlite_store import SqliteArtifactCatalog
from heron.artifacts.store import ArtifactCatalog, ArtifactStore
from heron.audit.executions import ExecutionStore
from heron.audit.postgres_store import PostgresApprovalAudit, PostgresExecutionStore
from heron.audit.sqlite_store import SqliteApprovalAudit, SqliteExecutionStore
from heron.collaboration.postgres_store import PostgresMessageStore
from heron.collaboration.sqlite_store import SqliteMessageStore
from heron.collaboration.store import MessageStore
from heron.gateway.eventlog import TurnLog
from heron.gateway.postgres_store import PostgresTurnLog
from heron.gateway.sqlite_store import SqliteTurnLog
from heron.humans.postgres_store import PostgresRequestStore
from heron.humans.sqlite_store import SqliteRequestStore
from heron.humans.store import RequestStore
from heron.mcp.trust.pins import TrustStore
from heron.mcp.trust.postgres_store import PostgresTrustStore
from heron.mcp.trust.sqlite_store import SqliteTrustStore
from heron.safety.idempotency import IdempotencyLedger
from heron.safety.postgres_idempotency import PostgresIdempotencyLedger
from heron.safety.sqlite_idempotency import SqliteIdempotencyLedger
from heron.sessions.postgres_store import PostgresSessionStore
from heron.sessions.sqlite_store import SqliteSessionStore
from heron.sessions.store import SessionStore
from heron.toolsets.postgres_shell_history import PostgresShellHistory
from heron.toolsets.shell import ShellHistory
from heron.toolsets.sqlite_shell_history import SqliteShellHistory
from heron.turn.approval_audit import AuditLog
from heron.turn.postgres_keys import PostgresKeyStore
from heron.turn.receipts import KeyKind, KeyStore, ReceiptKeyStore


class StoreBackend(Protocol):
    """Opens stores of every protocol on one database; see the module docstring."""

    name: str
    implements: frozenset[str]
    """The names of the methods below that this back end provides."""

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
    def artifacts(self, *, clock: Callable[[], float] = time.time) -> ArtifactStore:
        """A whole artifact store: catalog and contents, on `clock`."""
        ...

    def keys(self, kind: KeyKind) -> KeyStore: ...
    def workspace_bindings(self) -> WorkspaceBindings: ...
    def host_index(self) -> HostIndex: ...
    def thread_index(self) -> ThreadIndex: ...
    def subagents(self) -> SubagentStore: ...
    def turn_log(self) -> TurnLog: ...
    def close(self) -> None:
        """Close every store this back end opened."""


class SqliteBackend:
    """Every store in `<root>/heron.db`, each on its own connection."""

    name = "sqlite"
    implements = frozenset(
        name for name in dir(StoreBackend) if not name.startswith("_") and name != "close"
    )

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

    def artifacts(self, *, clock: Callable[[], float] = time.time) -> ArtifactStore:
        return ArtifactStore(self.artifact_catalog(), self.root / "artifacts", clock=clock)

    def keys(self, kind: KeyKind) -> ReceiptKeyStore:
        return ReceiptKeyStore(self.root, kind=kind)

    def workspace_bindings(self) -> SqliteWorkspaceBindings:
        return SqliteWorkspaceBindings(self._conn())

    def host_index(self) -> SqliteHostIndex:
        return SqliteHostIndex(self._conn())

    def thread_index(self) -> SqliteThreadIndex:
        return SqliteThreadIndex(self._conn())

    def subagents(self) -> SqliteSubagentStore:
        return SqliteSubagentStore(self._conn())

    def turn_log(self) -> SqliteTurnLog:
        return SqliteTurnLog(self._conn())

    def close(self) -> None:
        for close in reversed(self._closers):
            close()
        self._closers.clear()


class PostgresBackend:
    """The stores PostgreSQL implements, in one fresh database; each store on its own pool."""

    name = "postgresql"
    implements = frozenset(
        {
            "sessions",
            "bus",
            "jobs",
            "timers",
            "monitors",
            "subscriptions",
            "idempotency",
            "artifact_catalog",
            "host_index",
            "thread_index",
            "approval_audit",
            "executions",
            "human_requests",
            "shell_history",
            "trust",
            "turn_log",
            "subagents",
            "messages",
            "artifacts",
            "keys",
            "workspace_bindings",
        }
    )

    def __init__(self, url: str) -> None:
        self.url = url
        self._closers: list[Callable[[], None]] = []

    def sessions(self) -> PostgresSessionStore:
        store = PostgresSessionStore(open_pool(self.url, max_size=4))
        self._closers.append(store.close)
        return store

    def bus(self) -> PostgresBusStore:
        store = PostgresBusStore(self.sessions())
        self._closers.append(store.close)
        return store

    def _pool(self) -> Pool:
        pool = open_pool(self.url, max_size=4)
        self._closers.append(pool.close)
        return pool

    def jobs(self) -> PostgresJobStore:
        return PostgresJobStore(self._pool())

    def timers(self) -> PostgresTimerStore:
        return PostgresTimerStore(self._pool())

    def monitors(self) -> PostgresMonitorStore:
        return PostgresMonitorStore(self._pool())

    def subscriptions(self) -> PostgresSubscriptionStore:
        return PostgresSubscriptionStore(self._pool())

    def idempotency(self) -> PostgresIdempotencyLedger:
        return PostgresIdempotencyLedger(self._pool())

    def artifact_catalog(self) -> PostgresArtifactCatalog:
        return PostgresArtifactCatalog(self._pool())

    def host_index(self) -> PostgresHostIndex:
        return PostgresHostIndex(self._pool())

    def thread_index(self) -> PostgresThreadIndex:
        return PostgresThreadIndex(self._pool())

    def approval_audit(self) -> PostgresApprovalAudit:
        return PostgresApprovalAudit(self._pool())

    def executions(self) -> PostgresExecutionStore:
        return PostgresExecutionStore(self._pool())

    def human_requests(self) -> PostgresRequestStore:
        return PostgresRequestStore(self._pool())

    def shell_history(self) -> PostgresShellHistory:
        return PostgresShellHistory(self._pool())

    def trust(self) -> PostgresTrustStore:
        return PostgresTrustStore(self._pool())

    def turn_log(self) -> PostgresTurnLog:
        return PostgresTurnLog(self._pool())

    def subagents(self) -> PostgresSubagentStore:
        return PostgresSubagentStore(self._pool())

    def messages(self) -> PostgresMessageStore:
        return PostgresMessageStore(self._pool())

    def artifacts(self, *, clock: Callable[[], float] = time.time) -> ArtifactStore:
        pool = self._pool()
        contents = PostgresArtifactContents(pool)
        return ArtifactStore(PostgresArtifactCatalog(pool), contents, clock=clock)

    def keys(self, kind: KeyKind) -> PostgresKeyStore:
        return PostgresKeyStore(self._pool(), kind)

    def workspace_bindings(self) -> PostgresWorkspaceBindings:
        return PostgresWorkspaceBindings(self._pool())

    def close(self) -> None:
        for close in reversed(self._closers):
            close()
        self._closers.clear()


def open_backend(name: str, request: pytest.FixtureRequest, root: Path) -> StoreBackend:
    """Back end `name` on a fresh database (PostgreSQL: the `postgres_url` fixture's)."""
    if name == "postgresql":
        return cast(StoreBackend, PostgresBackend(request.getfixturevalue("postgres_url")))
    return SqliteBackend(root)


BACKENDS: dict[str, frozenset[str]] = {
    "sqlite": SqliteBackend.implements,
    "postgresql": PostgresBackend.implements,
}
"""Every back end the contract suites run against, by name, with the stores it implements."""
