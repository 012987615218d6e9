"""heron's state directory and its SQLite database.

Every SQLite store implementation (the `sqlite_*` modules next to each store protocol) shares
one database, `<state_dir>/heron.db`. Each creates its own tables (`CREATE TABLE IF NOT
EXISTS`) on the connection returned by `open_db`, so this module knows nothing about their
schemas. It also holds what those implementations share: explicit write transactions
(`transaction`, `write_transaction`), the translation of `sqlite3` errors into
`heron.errors.StoreError` (`sqlite_errors`), and the schema versions of the database
(`migrate_sqlite`, `heron._support.migrations`).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from collections import deque
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from heron._support.migrations import SQLITE, Migration
from heron._support.own_paths import claim_state_dir
from heron._support.store_errors import translate_errors
from heron.errors import StoreError


def default_state_dir() -> Path:
    """`$HERON_STATE_DIR`, else `$XDG_STATE_HOME/heron`, else `~/.local/state/heron`."""
    explicit = os.environ.get("HERON_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    # The XDG spec says relative values are invalid and must be ignored.
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "heron"
    return Path.home() / ".local" / "state" / "heron"


def open_db(state_dir: Path) -> sqlite3.Connection:
    """Open `<state_dir>/heron.db`, creating the directory (mode 0700) if needed.

    The connection uses WAL journaling (readers never block the writer), `synchronous=NORMAL`
    (durable across application crashes; a power loss may drop the last commits) and enforces
    foreign keys. Its WAL is checkpointed by a thread of the process (`Checkpointer`), never by
    a commit. The caller owns the connection and closes it.
    """
    path = state_dir / "heron.db"
    try:
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        claim_state_dir(state_dir)
        if not path.exists():
            # Audit records and histories are private: create it owner-only, whatever the umask.
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        conn = sqlite3.connect(path, factory=_Connection)
    except (OSError, ValueError, sqlite3.Error) as exc:  # a file in its place, a NUL in the name
        raise StoreError(f"cannot open the state database {path}: {_reason(exc)}") from exc
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA wal_autocheckpoint=0")
    except sqlite3.Error as exc:  # not a database, or a damaged one
        conn.close()
        raise StoreError(f"cannot open the state database {path}: {_reason(exc)}") from exc
    except BaseException:
        conn.close()
        raise
    CHECKPOINTS.hold(path, conn)
    return conn


def _reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


class _Connection(sqlite3.Connection):
    """A connection the checkpointer can follow (`sqlite3.Connection` takes no weak
    reference)."""


class Checkpointer:
    """Checkpoints the WAL of every database the process has open, in a thread of its own.

    SQLite's automatic checkpoint runs inside the commit that takes the WAL past 1,000 pages:
    that commit copies them into the database and fsyncs it, 5–20 ms in the writer's call
    (every ~75 tool turns of a session: the append's p99). Here a daemon thread counts the
    frames in each database's WAL every `interval_s` (`wal_log`) and, past `frames`, runs a
    checkpoint on a short-lived connection of its own. Commits stay exactly as durable: a
    checkpoint only copies committed pages into the database.
    """

    def __init__(self, interval_s: float = 0.25, frames: int = 4000) -> None:
        self.interval_s = interval_s
        self.frames = frames
        """Checkpoint past this many frames (4× SQLite's automatic threshold: fewer, longer
        checkpoints, each costing the writers one wait for the last few frames)."""
        self._lock = threading.Lock()
        self._open: dict[Path, int] = {}
        self._copied: dict[Path, WalLog] = {}  # the log as the last checkpoint left it
        # A finalizer may run in any frame of this thread, the checkpointer's own locked ones
        # included (a collection while `hold` hashes a path): it only queues the release, and
        # the queue is settled under the lock.
        self._released: deque[Path] = deque()
        self._thread: threading.Thread | None = None
        self.passes = 0
        """Passes over the open databases so far."""
        self._passed = threading.Condition(self._lock)

    @property
    def followed(self) -> frozenset[Path]:
        """The databases with an open connection."""
        with self._lock:
            self._settle()
            return frozenset(self._open)

    def hold(self, path: Path, conn: sqlite3.Connection) -> None:
        """Follow `path` while `conn` (from `open_db`) is open, until closed or collected."""
        with self._lock:
            self._settle()
            self._open[path] = self._open.get(path, 0) + 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="heron-checkpoints", daemon=True
                )
                self._thread.start()
        released = weakref.finalize(conn, self._release, path)
        close = conn.close

        def closing() -> None:
            close()
            released()  # once: a finalizer runs at most once

        conn.close = closing  # type: ignore[method-assign]

    def _release(self, path: Path) -> None:
        self._released.append(path)

    def _settle(self) -> None:
        """Apply the queued releases (the lock held)."""
        while self._released:
            path = self._released.popleft()
            left = self._open.pop(path, 0) - 1
            if left > 0:
                self._open[path] = left
            else:
                self._copied.pop(path, None)

    def wait_pass(self, timeout_s: float = 10.0) -> bool:
        """Wait until a whole pass over the open databases has run after this call."""
        with self._passed:
            target = self.passes + 2  # the pass running now may have started before the call
            return self._passed.wait_for(lambda: self.passes >= target, timeout_s)

    def _run(self) -> None:
        while True:
            time.sleep(self.interval_s)
            with self._lock:
                self._settle()
                paths = list(self._open)
            for path in paths:
                log = wal_log(path)
                done = self._copied.get(path)
                copied = done.frames if done is not None and done.salts == log.salts else 0
                if log.frames - copied >= self.frames and checkpoint(path):
                    # The log starts over at the next commit (new salts); until then every
                    # frame in it is copied.
                    self._copied[path] = wal_log(path)
            with self._passed:
                self.passes += 1
                self._passed.notify_all()


@dataclass(frozen=True, slots=True)
class WalLog:
    """Where a WAL stands: the salts of its current round and how many frames it holds."""

    salts: bytes
    frames: int


def wal_log(path: Path) -> WalLog:
    """How many frames `path`'s WAL holds since the log last started over; no frames without
    a WAL.

    Read from the WAL file itself (sqlite.org/walformat.html): its header's salts, and a
    binary search for the last frame that carries them (frames of an earlier round of the
    log carry other salts). Never from the `-shm` WAL index, though it holds the count: closing
    any descriptor of the index (or of the database) drops every POSIX lock the process's
    SQLite connections hold on that file, and another process opening the database would then
    find the index unused, reset it, and crash this one with SIGBUS as it touches its mapping.
    SQLite locks nothing in the WAL file."""
    try:
        with open(f"{path}-wal", "rb") as wal:
            fd = wal.fileno()
            header = os.pread(fd, 32, 0)
            if len(header) < 32:
                return WalLog(b"", 0)
            salts = header[16:24]
            frame_bytes = 24 + int.from_bytes(header[8:12], "big")  # the page size
            low, high = 0, (os.fstat(fd).st_size - 32) // frame_bytes
            while low < high:  # frames 1..low carry the salts; does frame `middle`?
                middle = (low + high + 1) // 2
                if os.pread(fd, 8, 32 + (middle - 1) * frame_bytes + 8) == salts:
                    low = middle
                else:
                    high = middle - 1
            return WalLog(salts, low)
    except OSError:
        return WalLog(b"", 0)


_CHECKPOINT_WAIT_S = 0.05


def checkpoint(path: Path) -> bool:
    """Copy `path`'s WAL into the database so that the next commit starts the WAL over; True
    when it did.

    The bulk copy (`PASSIVE`) waits for nobody. Under a steady stream of commits it ends a few
    frames behind, and the WAL would never start over: those few are then copied holding the
    writers off (`RESTART`). Busy or gone: the next pass tries again."""
    try:
        # `mode=rw`: never create a database that was removed meanwhile. A short busy timeout:
        # `RESTART` holds writers off while it waits for a reader, so it must give up soon.
        conn = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=rw", uri=True, timeout=_CHECKPOINT_WAIT_S
        )
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            busy: int = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return busy == 0


CHECKPOINTS = Checkpointer()
"""The process's checkpointer (see `Checkpointer`)."""


@contextmanager
def connect(state_dir: Path) -> Iterator[sqlite3.Connection]:
    """A connection to `<state_dir>/heron.db` in autocommit mode, closed on exit."""
    db = open_db(state_dir)
    db.isolation_level = None  # transactions are explicit (`write_transaction`)
    try:
        yield db
    finally:
        db.close()


@contextmanager
def write_transaction(state_dir: Path) -> Iterator[sqlite3.Connection]:
    """A connection inside `BEGIN IMMEDIATE`: committed when the block ends, rolled back when
    it raises."""
    with connect(state_dir) as db, transaction(db):
        yield db


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """An explicit write transaction (`BEGIN IMMEDIATE` … `COMMIT`), rolled back on any error.

    `IMMEDIATE` takes the write lock at the start, so a read-check-write inside it (the head
    check of a session append) cannot race another process. Needs `isolation_level = None`.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def update_row(
    conn: sqlite3.Connection,
    table: str,
    row_id: str,
    changes: dict[str, Any],
    *,
    fields: Collection[str],
    what: str,
) -> None:
    """`UPDATE table SET <changes> WHERE id = row_id`, committed; `ValueError` (and nothing
    changed) when a name in `changes` is not one of `fields` of a `what` (`job`, `timer`)."""
    unknown = set(changes) - set(fields)
    if unknown:
        raise ValueError(f"unknown {what} fields: {sorted(unknown)}")
    sets = ", ".join(f"{name} = ?" for name in changes)
    with conn:
        conn.execute(f"UPDATE {table} SET {sets} WHERE id = ?", [*changes.values(), row_id])


sqlite_errors = translate_errors(sqlite3.Error)
"""Class decorator for a SQLite store: its public methods (sync, async and class methods)
raise `StoreError` where SQLite raised `sqlite3.Error`, so callers name no back end."""


def sqlite_versions(conn: sqlite3.Connection) -> set[int]:
    """The schema versions recorded in a SQLite database (`heron._support.migrations`)."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    ).fetchone()
    if exists is None:
        return set()
    return {int(r[0]) for r in conn.execute("SELECT version FROM schema_migrations")}


def migrate_sqlite(conn: sqlite3.Connection) -> list[Migration]:
    """Apply the SQLite migrations `conn`'s database lacks, in one transaction; returns them."""
    conn.isolation_level = None
    with transaction(conn):
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
        )
        applied = sqlite_versions(conn)
        done = [m for m in SQLITE if m.version not in applied]
        for migration in done:
            for statement in filter(str.strip, migration.script.split(";")):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.name, time.time()),
            )
    return done
