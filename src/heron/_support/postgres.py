"""heron's PostgreSQL database: the connection pool, transactions with retry, and errors.

What every PostgreSQL store (the `postgres_*` modules next to each store protocol) shares, as
`heron._support.state` is for the SQLite ones. The driver is psycopg 3: the store protocols
are synchronous (a history append is called in line by the session writer) and psycopg offers
the same API synchronously and asynchronously, with a thread-safe pool (`psycopg_pool`); the
async bus methods run the same code on a worker thread, so one implementation serves both.

Transactions run at READ COMMITTED with explicit row locks (`FOR UPDATE`, `SKIP LOCKED`), so
conflicts show up as waits, not as errors. The rare error that a retry resolves — a
serialisation failure or a deadlock between two workers — is retried (`run`), with the whole
transaction, a few times. A dropped connection (the server restarted) is replaced by the pool:
each connection is checked when it is taken.

The schema is versioned (`heron._support.migrations`); `open_pool` refuses a database whose
schema is older than this heron (`heron db migrate` brings it up to date).
"""

from __future__ import annotations

import atexit
import random
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors_module
from psycopg_pool import ConnectionPool, PoolTimeout

from heron._support.migrations import POSTGRESQL, Migration
from heron._support.store_errors import translate_errors
from heron.errors import StoreError

_T = TypeVar("_T")

RETRIES = 8
"""Attempts of one transaction that hits a serialisation failure or a deadlock."""

GETCONN_TIMEOUT_S = 5.0
"""Seconds a store call waits for a pooled connection (the server restarting, the pool full)."""

IDLE_IN_TRANSACTION_S = 5.0
"""Seconds the server lets one of heron's connections sit idle inside a transaction before it
ends that connection. heron's transactions do database work only, so an idle one belongs to a
process that is stopped (SIGSTOP, a paused VM) while its row locks hold every other worker:
a takeover's claim would skip that session's lease for as long as the process stays stopped."""

_RETRYABLE = (pg_errors_module.SerializationFailure, pg_errors_module.DeadlockDetected)

Pool = ConnectionPool[psycopg.Connection[Any]]


def is_postgres_url(url: str) -> bool:
    """Whether a `--store` / `[store] url` value names a PostgreSQL database."""
    return url.startswith(("postgresql://", "postgres://"))


def open_pool(url: str, *, max_size: int = 8, migrate: bool = False) -> Pool:
    """A pool of connections to `url`, opened and checked; with `migrate` the schema is
    brought up to date first, else a database behind this heron's schema is refused
    (`StoreError`)."""
    try:
        if migrate:
            with psycopg.connect(url, autocommit=True) as conn:
                apply_migrations(conn)
        pool: Pool = ConnectionPool(
            url,
            min_size=1,
            max_size=max_size,
            # A caller waits this long for a connection, then fails (`StoreError`): an
            # ingress answers 503 and its sender retries, instead of hanging while the server
            # is away.
            timeout=GETCONN_TIMEOUT_S,
            kwargs={"autocommit": True},
            check=ConnectionPool.check_connection,
            configure=_configure,
            open=False,
        )
        pool.open(wait=True, timeout=30)
    except psycopg.Error as exc:
        raise StoreError(f"cannot open the PostgreSQL store: {exc}") from exc
    try:
        with pool.connection() as conn:
            applied = applied_versions(conn)
    except BaseException:
        pool.close()
        raise
    missing = [m.version for m in POSTGRESQL if m.version not in applied]
    if missing:
        pool.close()
        raise StoreError(
            f"the PostgreSQL store's schema is not up to date (missing versions {missing}); "
            "run `heron db migrate --store <url>`"
        )
    return pool


def _configure(conn: psycopg.Connection[Any]) -> None:
    """Settings of each new pooled connection (autocommit: they hold for its lifetime)."""
    timeout_ms = round(IDLE_IN_TRANSACTION_S * 1000)
    conn.execute(f"SET idle_in_transaction_session_timeout = {timeout_ms}")


_shared: dict[str, Pool] = {}
_shared_lock = threading.Lock()


def process_pool(url: str) -> Pool:
    """The process's one pool of `url` for the stores that are opened where nothing could
    close them (each session's agent, the built-in tool sets): opened on first use, closed at
    exit (or by `close_process_pools`)."""
    with _shared_lock:
        pool = _shared.get(url)
        if pool is None or pool.closed:
            if not _shared:
                atexit.register(close_process_pools)
            pool = _shared[url] = open_pool(url, max_size=8)
        return pool


def close_process_pools() -> None:
    """Close every pool `process_pool` opened."""
    with _shared_lock:
        pools = list(_shared.values())
        _shared.clear()
    for pool in pools:
        pool.close()


def run(pool: Pool, work: Callable[[psycopg.Connection[Any]], _T]) -> _T:
    """`work(conn)` inside one transaction, committed when it returns; retried as a whole
    after a serialisation failure or a deadlock (so `work` must only touch the database)."""
    for attempt in range(RETRIES):
        try:
            with pool.connection() as conn, conn.transaction():
                return work(conn)
        except _RETRYABLE:
            if attempt == RETRIES - 1:
                raise
            # Jittered back-off, so two workers that collided do not collide again.
            time.sleep(random.uniform(0, 0.005 * 2**attempt))
    raise AssertionError("unreachable")


def applied_versions(conn: psycopg.Connection[Any]) -> set[int]:
    """The schema versions recorded in the database (empty for a new one)."""
    exists = conn.execute("SELECT to_regclass('schema_migrations')").fetchone()
    if exists is None or exists[0] is None:
        return set()
    return {int(r[0]) for r in conn.execute("SELECT version FROM schema_migrations")}


def apply_migrations(conn: psycopg.Connection[Any]) -> list[Migration]:
    """Apply the migrations `conn`'s database lacks, each in its own transaction, under an
    advisory lock (two workers starting at once migrate once); returns those applied."""
    done: list[Migration] = []
    with conn.transaction():
        # Held to the end of this transaction: the whole migration run is one critical section.
        conn.execute("SELECT pg_advisory_xact_lock(7710415)")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
            " applied_at DOUBLE PRECISION NOT NULL)"
        )
        applied = applied_versions(conn)
        for migration in POSTGRESQL:
            if migration.version in applied:
                continue
            conn.execute(migration.script.encode())
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
                (migration.version, migration.name, time.time()),
            )
            done.append(migration)
    return done


def schema_of(url: str, *, migrate: bool) -> tuple[set[int], list[Migration]]:
    """The versions applied to `url`'s database and, with `migrate`, those applied now
    (`heron db`); `StoreError` when the database cannot be reached."""
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            done = apply_migrations(conn) if migrate else []
            return applied_versions(conn), done
    except psycopg.Error as exc:
        raise StoreError(f"cannot reach the PostgreSQL store: {exc}") from exc


pg_errors = translate_errors(psycopg.Error, PoolTimeout)
"""Class decorator for a PostgreSQL store: its public methods raise `StoreError` where
psycopg raised `psycopg.Error` (or the pool timed out), so callers name no back end."""


def columns(fields: Sequence[str]) -> str:
    """A quoted column list (some field names, like `offset`, are reserved words)."""
    return ", ".join(f'"{name}"' for name in fields)


def update_row(
    pool: Pool,
    table: str,
    row_id: str,
    changes: dict[str, Any],
    *,
    fields: Collection[str],
    what: str,
) -> bool:
    """`UPDATE table SET <changes> WHERE id = row_id`, committed; whether a row matched.
    `ValueError` (and nothing changed) when a name in `changes` is not one of `fields` of a
    `what` (`job`, `timer`)."""
    unknown = set(changes) - set(fields)
    if unknown:
        raise ValueError(f"unknown {what} fields: {sorted(unknown)}")
    if not changes:
        with pool.connection() as conn:
            return (
                conn.execute(f"SELECT 1 FROM {table} WHERE id = %s", (row_id,)).fetchone()
                is not None
            )
    sets = ", ".join(f'"{name}" = %s' for name in changes)
    with pool.connection() as conn:
        cursor = conn.execute(
            f"UPDATE {table} SET {sets} WHERE id = %s", [*changes.values(), row_id]
        )
        return cursor.rowcount == 1
