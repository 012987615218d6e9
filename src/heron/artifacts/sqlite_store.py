"""`SqliteArtifactCatalog`: artifact metadata in heron's SQLite database (table `artifacts`).

Every operation opens its own short-lived connection (`heron._support.state`), so one catalog
is safe to share between threads and processes; `add`, `remove` and `remove_expired` run the
store's content operations inside their `BEGIN IMMEDIATE` write transaction.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable, Collection
from pathlib import Path

from heron._support.state import connect, sqlite_errors, write_transaction
from heron.artifacts.store import ArtifactInfo, Drop

_SCHEMA = """
CREATE TABLE IF NOT EXISTS artifacts (
    id TEXT PRIMARY KEY,
    sha256 TEXT NOT NULL,
    tool TEXT NOT NULL,
    call_id TEXT NOT NULL,
    size INTEGER NOT NULL,
    lines INTEGER NOT NULL,
    created REAL NOT NULL,
    expires REAL NOT NULL,
    line_index BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS artifacts_by_expiry ON artifacts (expires);
CREATE INDEX IF NOT EXISTS artifacts_by_sha256 ON artifacts (sha256);
"""
_FIELDS = tuple(f.name for f in dataclasses.fields(ArtifactInfo))
_COLUMNS = ", ".join(_FIELDS)


@sqlite_errors
class SqliteArtifactCatalog:
    """`ArtifactCatalog` in `<state_dir>/heron.db` (the directory is created mode 0700)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        with connect(self.state_dir) as db:
            db.executescript(_SCHEMA)

    def add(self, info: ArtifactInfo, line_index: bytes, *, publish: Callable[[], None]) -> None:
        with write_transaction(self.state_dir) as db:
            publish()
            row = (*(getattr(info, name) for name in _FIELDS), line_index)
            marks = ", ".join("?" * len(row))
            db.execute(f"INSERT INTO artifacts ({_COLUMNS}, line_index) VALUES ({marks})", row)

    def get(self, artifact_id: str) -> tuple[ArtifactInfo, bytes] | None:
        with connect(self.state_dir) as db:
            row = db.execute(
                f"SELECT {_COLUMNS}, line_index FROM artifacts WHERE id = ?", (artifact_id,)
            ).fetchone()
        if row is None:
            return None
        return ArtifactInfo(**dict(zip(_FIELDS, row[:-1], strict=True))), bytes(row[-1])

    def remove(self, artifact_id: str, *, drop: Drop) -> None:
        with write_transaction(self.state_dir) as db:
            row = db.execute("SELECT sha256 FROM artifacts WHERE id = ?", (artifact_id,)).fetchone()
            db.execute("DELETE FROM artifacts WHERE id = ?", (artifact_id,))
            if row is not None:
                _drop_unreferenced(db, {row[0]}, drop)

    def remove_expired(self, now: float, *, drop: Drop) -> int:
        with write_transaction(self.state_dir) as db:
            rows = db.execute(
                "SELECT id, sha256 FROM artifacts WHERE expires <= ?", (now,)
            ).fetchall()
            db.execute("DELETE FROM artifacts WHERE expires <= ?", (now,))
            _drop_unreferenced(db, {sha for _, sha in rows}, drop)
        return len(rows)


def _drop_unreferenced(db: sqlite3.Connection, digests: Collection[str], drop: Drop) -> None:
    for sha in digests:
        if db.execute("SELECT 1 FROM artifacts WHERE sha256 = ?", (sha,)).fetchone() is None:
            drop(sha)
