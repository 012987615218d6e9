"""The WAL of heron's database is checkpointed by a thread of the process, never by a commit."""

from __future__ import annotations

import gc
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

from heron._support.state import CHECKPOINTS, Checkpointer, checkpoint, open_db, wal_log


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
        before = wal_log(db)
        assert before.frames > 1500
        assert checkpoint(db)
        size = (tmp_path / "heron.db-wal").stat().st_size
        _write(conn, 10)
        after = wal_log(db)
        assert after.salts != before.salts  # the WAL started over instead of growing
        assert 0 < after.frames <= 3 * 10
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
        left = wal_log(db)
        assert 50 <= left.frames < 1000  # below the threshold: left alone
        _write(conn, 400)
        assert checkpointer.wait_pass()
        _write(conn, 1)
        assert wal_log(db).salts != left.salts  # checkpointed: the next commit started over
        assert wal_log(db).frames <= 3
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


# A process that writes its database while the checkpointer thread runs must outlive another
# process opening the same database over and over: each opening learns whether the WAL index
# is in use from the POSIX locks the writer's SQLite holds on it.
_WRITER = """
import sys
from pathlib import Path
from heron._support import state

state.CHECKPOINTS.interval_s = 0.001  # many passes while the other process opens the database
conn = state.open_db(Path(sys.argv[1]))
conn.isolation_level = None
conn.execute("CREATE TABLE t (n INTEGER)")
print("ready", flush=True)
written = 0
while not Path(sys.argv[2]).exists():
    conn.execute("INSERT INTO t (n) VALUES (1)")
    written += 1
    assert conn.execute("SELECT COUNT(*) FROM t").fetchone()[0] == written
print(written, flush=True)
"""


def test_another_process_opening_the_database_does_not_break_a_writers_wal_index(
    tmp_path: Path,
) -> None:
    stop = tmp_path / "stop"
    with subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path), str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    ) as writer:
        assert writer.stdout is not None
        assert writer.stdout.readline() == "ready\n"
        for _ in range(1500):
            other = sqlite3.connect(tmp_path / "heron.db", timeout=10)
            try:
                other.execute("SELECT COUNT(*) FROM t").fetchone()
            finally:
                other.close()
            if writer.poll() is not None:
                break
        stop.touch()
        written = writer.stdout.read()
        assert writer.wait(timeout=30) == 0, f"the writer ended with {writer.returncode}"
    conn = sqlite3.connect(tmp_path / "heron.db")
    try:
        assert conn.execute("SELECT COUNT(*) FROM t").fetchone()[0] == int(written)
    finally:
        conn.close()
