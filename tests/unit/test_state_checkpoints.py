"""The WAL of heron's database is checkpointed by a thread of the process, never by a commit."""

from __future__ import annotations

import gc
import sqlite3
import threading
from pathlib import Path

from heron._support.state import CHECKPOINTS, Checkpointer, checkpoint, open_db, uncopied_frames


def _write(conn: sqlite3.Connection, rows: int) -> None:
    for _ in range(rows):
        conn.execute("INSERT INTO t (body) VALUES (randomblob(3000))")


def test_commits_leave_the_wal_to_the_checkpointer(tmp_path: Path) -> None:
    conn = open_db(tmp_path)
    conn.isolation_level = None
    try:
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        conn.execute("CREATE TABLE t (body BLOB)")
        _write(conn, 1500)  # past SQLite's own threshold of 1,000 pages
        db = tmp_path / "heron.db"
        assert uncopied_frames(db) > 1500
        checkpoint(db)
        assert uncopied_frames(db) == 0
        size = (tmp_path / "heron.db-wal").stat().st_size
        _write(conn, 10)
        assert 0 < uncopied_frames(db) <= 3 * 10  # the WAL started over instead of growing
        assert (tmp_path / "heron.db-wal").stat().st_size == size
        assert conn.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 1510
    finally:
        conn.close()


def test_the_thread_checkpoints_past_its_threshold_and_forgets_closed_databases(
    tmp_path: Path,
) -> None:
    checkpointer = Checkpointer(interval_s=0.01, frames=1000)
    conn = open_db(tmp_path)
    conn.isolation_level = None
    db = tmp_path / "heron.db"
    try:
        checkpointer.hold(db, conn)
        assert db in checkpointer.followed and db in CHECKPOINTS.followed
        conn.execute("CREATE TABLE t (body BLOB)")
        _write(conn, 50)
        assert checkpointer.wait_pass()
        left = uncopied_frames(db)
        assert 50 <= left < 1000  # below the threshold: left alone
        _write(conn, 400)
        assert checkpointer.wait_pass()
        assert uncopied_frames(db) == 0
    finally:
        conn.close()
    assert db not in checkpointer.followed and db not in CHECKPOINTS.followed


def test_a_connection_collected_while_the_checkpointer_holds_its_lock_does_not_deadlock(
    tmp_path: Path,
) -> None:
    # What a garbage collection inside `hold` does: the finalizer of an unreferenced connection
    # runs in a frame of this thread that already holds the lock.
    checkpointer = Checkpointer(interval_s=60)
    db = tmp_path / "heron.db"
    conns = [open_db(tmp_path)]
    checkpointer.hold(db, conns[0])

    def collect_while_locked() -> None:
        with checkpointer._lock:
            conns.clear()
            gc.collect()

    worker = threading.Thread(target=collect_while_locked, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "the finalizer waited for a lock its own thread holds"
    assert db not in checkpointer.followed
