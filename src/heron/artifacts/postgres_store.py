"""`PostgresArtifactCatalog`: artifact metadata in the shared PostgreSQL database (table
`artifacts`).

Only the metadata is shared: the contents stay in the worker's artifact directory (the limit
is in docs/deployment.md). `add`, `remove` and `remove_expired` run the store's content
operations inside their transaction, under a transaction-scoped advisory lock per content
digest, so a put racing a purge of the same content never loses it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from typing import Any

import psycopg

from heron._support.postgres import Pool, pg_errors
from heron.artifacts.store import ArtifactInfo, Drop

_FIELDS = tuple(f.name for f in dataclasses.fields(ArtifactInfo))
_COLUMNS = ", ".join(_FIELDS)

Conn = psycopg.Connection[Any]


@pg_errors
class PostgresArtifactCatalog:
    """`ArtifactCatalog` on a PostgreSQL pool (thread-safe)."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def add(self, info: ArtifactInfo, line_index: bytes, *, publish: Callable[[], None]) -> None:
        with self._pool.connection() as conn, conn.transaction():
            _lock(conn, [info.sha256])
            publish()
            row = (*(getattr(info, name) for name in _FIELDS), line_index)
            marks = ", ".join(["%s"] * len(row))
            conn.execute(f"INSERT INTO artifacts ({_COLUMNS}, line_index) VALUES ({marks})", row)

    def get(self, artifact_id: str) -> tuple[ArtifactInfo, bytes] | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS}, line_index FROM artifacts WHERE id = %s", (artifact_id,)
            ).fetchone()
        if row is None:
            return None
        return ArtifactInfo(**dict(zip(_FIELDS, row[:-1], strict=True))), bytes(row[-1])

    def remove(self, artifact_id: str, *, drop: Drop) -> None:
        with self._pool.connection() as conn, conn.transaction():
            row = conn.execute(
                "DELETE FROM artifacts WHERE id = %s RETURNING sha256", (artifact_id,)
            ).fetchone()
            if row is not None:
                _drop_unreferenced(conn, [row[0]], drop)

    def remove_expired(self, now: float, *, drop: Drop) -> int:
        with self._pool.connection() as conn, conn.transaction():
            rows = conn.execute(
                "DELETE FROM artifacts WHERE expires <= %s RETURNING sha256", (now,)
            ).fetchall()
            _drop_unreferenced(conn, sorted({r[0] for r in rows}), drop)
        return len(rows)


def _lock(conn: Conn, digests: Collection[str]) -> None:
    for sha in digests:
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (sha,))


def _drop_unreferenced(conn: Conn, digests: Collection[str], drop: Drop) -> None:
    _lock(conn, digests)
    for sha in digests:
        found = conn.execute("SELECT 1 FROM artifacts WHERE sha256 = %s", (sha,)).fetchone()
        if found is None:
            drop(sha)
