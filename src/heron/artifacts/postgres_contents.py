"""`PostgresArtifactContents`: artifact contents in the shared PostgreSQL database (table
`artifact_chunks`), so an artifact one worker stored is read by any other.

A content is kept once per digest in chunks of `CHUNK_BYTES` (one row each); a page reads only
the chunks it touches (`_Chunks`, a read-only view with the few operations the page reader
uses), holding at most `_CACHED` of them in memory, so reading deep inside a 100 MB artifact
costs a couple of chunks, not the whole content. A content over `max_bytes` is refused
(`StoreError`): the spill then says the full output could not be saved.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from heron._support.postgres import Pool, pg_errors, run
from heron.errors import StoreError

__all__ = ["CHUNK_BYTES", "DEFAULT_MAX_BYTES", "PostgresArtifactContents"]

CHUNK_BYTES = 1024 * 1024
"""The bytes of one stored chunk (a row of `artifact_chunks`)."""
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
"""The largest content stored in the database by default."""
_CACHED = 4

Conn = psycopg.Connection[Any]


@pg_errors
class PostgresArtifactContents:
    """`heron.artifacts.contents.ArtifactContents` on a PostgreSQL pool (thread-safe)."""

    where = "the shared store"

    def __init__(self, pool: Pool, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        self._pool = pool
        self.max_bytes = max_bytes

    def stage(self, sha256: str, data: bytes) -> _StagedChunks:
        if len(data) > self.max_bytes:
            raise StoreError(
                f"an artifact of {len(data):,} bytes is over the shared store's limit of "
                f"{self.max_bytes:,} bytes"
            )
        return _StagedChunks(self, sha256, data)

    def drop(self, sha256: str) -> None:
        with self._pool.connection() as conn:
            conn.execute("DELETE FROM artifact_chunks WHERE sha256 = %s", (sha256,))

    @contextmanager
    def open(self, sha256: str, size: int) -> Iterator[_Chunks]:
        with self._pool.connection() as conn:
            # Chunk 0 exists for every stored content (an empty one too).
            if (
                conn.execute(
                    "SELECT 1 FROM artifact_chunks WHERE sha256 = %s AND n = 0", (sha256,)
                ).fetchone()
                is None
            ):
                raise FileNotFoundError(sha256)
        yield _Chunks(self, sha256, size)

    def _publish(self, sha256: str, data: bytes) -> None:
        def work(conn: Conn) -> None:
            # Already there (the same output stored before): content is immutable per digest.
            if conn.execute(
                "SELECT 1 FROM artifact_chunks WHERE sha256 = %s AND n = 0", (sha256,)
            ).fetchone():
                return
            rows = [
                (sha256, n, data[start : start + CHUNK_BYTES])
                for n, start in enumerate(range(0, max(len(data), 1), CHUNK_BYTES))
            ]
            with conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO artifact_chunks (sha256, n, data) VALUES (%s, %s, %s)"
                    " ON CONFLICT DO NOTHING",
                    rows,
                )

        run(self._pool, work)

    def _chunk(self, sha256: str, n: int) -> bytes:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT data FROM artifact_chunks WHERE sha256 = %s AND n = %s", (sha256, n)
            ).fetchone()
        if row is None:  # dropped while it was being read
            raise FileNotFoundError(f"{sha256} chunk {n}")
        return bytes(row[0])


class _StagedChunks:
    def __init__(self, owner: PostgresArtifactContents, sha256: str, data: bytes) -> None:
        self._owner, self._sha256, self._data = owner, sha256, data

    def publish(self) -> None:
        self._owner._publish(self._sha256, self._data)

    def discard(self) -> None:
        self._data = b""


class _Chunks:
    """The bytes of one stored content, fetched a chunk at a time (see the module docstring).
    `find` and `rfind` look for one byte (the page reader looks for newlines)."""

    def __init__(self, owner: PostgresArtifactContents, sha256: str, size: int) -> None:
        self._owner, self._sha256, self.size = owner, sha256, size
        self._cache: OrderedDict[int, bytes] = OrderedDict()

    def _get(self, n: int) -> bytes:
        data = self._cache.get(n)
        if data is None:
            data = self._cache[n] = self._owner._chunk(self._sha256, n)
            if len(self._cache) > _CACHED:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(n)
        return data

    def find(self, sub: bytes, start: int = 0, end: int | None = None, /) -> int:
        assert len(sub) == 1, "one byte at a time"
        stop = self.size if end is None else min(end, self.size)
        pos = max(start, 0)
        while pos < stop:
            n, offset = divmod(pos, CHUNK_BYTES)
            base = n * CHUNK_BYTES
            found = self._get(n).find(sub, offset, stop - base)
            if found >= 0:
                return base + found
            pos = base + CHUNK_BYTES
        return -1

    def rfind(self, sub: bytes, start: int = 0, end: int | None = None, /) -> int:
        assert len(sub) == 1, "one byte at a time"
        low = max(start, 0)
        pos = self.size if end is None else min(end, self.size)
        while pos > low:
            n = (pos - 1) // CHUNK_BYTES
            base = n * CHUNK_BYTES
            found = self._get(n).rfind(sub, max(low - base, 0), pos - base)
            if found >= 0:
                return base + found
            pos = base
        return -1

    def __getitem__(self, index: slice, /) -> bytes:
        begin, end, step = index.indices(self.size)
        assert step == 1, "contiguous slices only"
        parts: list[bytes] = []
        pos = begin
        while pos < end:
            n, offset = divmod(pos, CHUNK_BYTES)
            part = self._get(n)[offset : offset + end - pos]
            parts.append(part)
            pos += len(part)
        return b"".join(parts)
