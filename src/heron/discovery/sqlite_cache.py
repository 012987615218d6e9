"""On-disk cache of tool embeddings, keyed by model and by a hash of each tool definition.

Rebuilding an index embeds only the definitions the cache has not seen for this model: adding
or changing one server's tools re-embeds only those tools. The cache is one SQLite file (WAL,
so several processes can share it); a damaged or foreign file is a cache miss, never an error
the user sees.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from heron.discovery.embeddings import Embedder, Vectors

__all__ = ["EmbeddingCache", "default_cache_path", "embed_cached"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    model TEXT NOT NULL,
    key TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model, key)
)
"""
_BATCH = 500


def default_cache_path() -> Path:
    """`$XDG_CACHE_HOME/heron/discovery-embeddings.sqlite`, else under `~/.cache/heron`."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "heron" / "discovery-embeddings.sqlite"


class EmbeddingCache:
    """Vectors by `(model_id, key)` in one SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(_SCHEMA)
        self._db.commit()

    def close(self) -> None:
        self._db.close()

    def get(self, model: str, keys: Sequence[str]) -> dict[str, Vectors]:
        found: dict[str, Vectors] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), _BATCH):
            chunk = unique[start : start + _BATCH]
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(
                f"SELECT key, vector FROM embeddings WHERE model = ? AND key IN ({marks})",
                (model, *chunk),
            )
            for key, blob in rows:
                found[key] = np.frombuffer(blob, dtype=np.float32)
        return found

    def put(self, model: str, vectors: Mapping[str, Vectors]) -> None:
        self._db.executemany(
            "INSERT OR REPLACE INTO embeddings (model, key, vector) VALUES (?, ?, ?)",
            ((model, key, np.asarray(v, dtype=np.float32).tobytes()) for key, v in vectors.items()),
        )
        self._db.commit()

    def count(self, model: str | None = None) -> int:
        if model is None:
            row = self._db.execute("SELECT COUNT(*) FROM embeddings").fetchone()
        else:
            row = self._db.execute(
                "SELECT COUNT(*) FROM embeddings WHERE model = ?", (model,)
            ).fetchone()
        return int(row[0])


def embed_cached(
    embedder: Embedder,
    items: Iterable[tuple[str, str]],
    cache: EmbeddingCache | None,
) -> tuple[Vectors, int]:
    """Document vectors for `(key, text)` items, embedding only what the cache lacks.

    Returns the matrix (rows in item order) and how many texts were embedded.
    """
    pairs = list(items)
    keys = [k for k, _ in pairs]
    known = cache.get(embedder.model_id, keys) if cache is not None else {}
    missing: dict[str, str] = {}
    for key, text in pairs:
        if key not in known:
            missing.setdefault(key, text)
    if missing:
        fresh = embedder.embed_documents(list(missing.values()))
        new = dict(zip(missing, fresh, strict=True))
        if cache is not None:
            cache.put(embedder.model_id, new)
        known.update(new)
    if not pairs:
        return np.zeros((0, 0), dtype=np.float32), 0
    dims = {known[k].shape[0] for k in keys}
    if len(dims) != 1:  # a cache written by another build of the model: start over
        fresh = embedder.embed_documents([t for _, t in pairs])
        if cache is not None:
            cache.put(embedder.model_id, dict(zip(keys, fresh, strict=True)))
        return np.asarray(fresh, dtype=np.float32), len(pairs)
    return np.stack([known[k] for k in keys]).astype(np.float32), len(missing)
