"""Short-lived connections to the state database with explicit transactions.

Stores in `<state_dir>/heron.db` that open a connection per operation (the artifact store, the
idempotency store) use these, which keeps them safe to share between threads and processes.
Writers take the write lock up front (`BEGIN IMMEDIATE`), so a read followed by a write in one
transaction never interleaves with another writer.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from heron.state import open_db


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
    with connect(state_dir) as db:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
