"""The usage prior: tools that worked for similar requests rank higher.

A prior is any callable from a `UsageQuery` to a mapping of tool (qualified name) → success
weight of past requests similar to this one. `UsageTable` is the implementation over
`UsageRecord`s; `heron.audit.usage` reads them from the execution audit trail (a need given to
the search tool, then the tools the turn called and whether they succeeded), and
`usage_table` builds the table with the requests' embeddings from the embedding cache. The
index scales the weights to [0, 1] (by the largest) and adds
`prior_weight` times that to the fused score, so a prior reorders close candidates and never
makes a distant tool a hit on its own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from heron.discovery.embeddings import Embedder, Vectors
from heron.discovery.lexical import tokenize
from heron.discovery.sqlite_cache import EmbeddingCache, embed_cached

__all__ = [
    "DENSE_MIN_SIMILARITY",
    "LEXICAL_MIN_SIMILARITY",
    "UsagePrior",
    "UsageQuery",
    "UsageRecord",
    "UsageTable",
    "usage_table",
]

DENSE_MIN_SIMILARITY = 0.87
"""A past request counts when its embedding's cosine with the query reaches this. On the tune
split 99 % of pairs of requests for *different* tools are below it (their median is 0.81, that
of pairs for the same tool 0.85): a short, unrelated history must not pull every query to
the few tools it used."""
LEXICAL_MIN_SIMILARITY = 0.3
"""The same without embeddings: the Jaccard overlap of the requests' index tokens."""


@dataclass(frozen=True, kw_only=True, slots=True)
class UsageQuery:
    text: str
    vector: Vectors | None = None
    """The query's embedding when the index has one (a prior need not embed again)."""


UsagePrior = Callable[[UsageQuery], Mapping[str, float]]


@dataclass(frozen=True, kw_only=True, slots=True)
class UsageRecord:
    """One past request and how the tool it led to fared."""

    request: str
    tool: str
    """The tool's qualified name (`server__tool`)."""
    successes: int = 1
    failures: int = 0


class UsageTable:
    """Success counts of the `neighbours` past requests most similar to the query.

    Similarity is the cosine of the requests' embeddings when both sides have one, else the
    Jaccard overlap of their index tokens. Each neighbour at or above `min_similarity` adds
    `(successes - failures) * similarity` to its tool; negative totals count as zero.
    """

    def __init__(
        self,
        records: Sequence[UsageRecord],
        *,
        embedder: Embedder | None = None,
        vectors: Vectors | None = None,
        neighbours: int = 10,
        min_similarity: float = 0.0,
    ) -> None:
        self.records = tuple(records)
        if vectors is None and embedder is not None and self.records:
            vectors = embedder.embed_queries([r.request for r in self.records])
        self._vectors = vectors
        self._tokens = [frozenset(tokenize(r.request)) for r in self.records]
        self._net = np.array([r.successes - r.failures for r in self.records], dtype=np.float64)
        self.neighbours = neighbours
        self.min_similarity = min_similarity

    def _similarity(self, query: UsageQuery) -> np.ndarray:
        if query.vector is not None and self._vectors is not None:
            return np.asarray(self._vectors @ query.vector, dtype=np.float64)
        words = frozenset(tokenize(query.text))
        return np.array(
            [len(words & t) / len(words | t) if words | t else 0.0 for t in self._tokens]
        )

    def __call__(self, query: UsageQuery) -> Mapping[str, float]:
        if not self.records:
            return {}
        sim = self._similarity(query)
        count = min(self.neighbours, len(sim))
        nearest = np.argpartition(-sim, count - 1)[:count]
        totals: dict[str, float] = {}
        for i in nearest:
            if sim[i] < self.min_similarity or sim[i] <= 0:
                continue
            tool = self.records[i].tool
            totals[tool] = totals.get(tool, 0.0) + float(self._net[i] * sim[i])
        return {tool: w for tool, w in totals.items() if w > 0}


def usage_table(
    records: Sequence[UsageRecord],
    *,
    embedder: Embedder | None,
    cache: EmbeddingCache | None = None,
    neighbours: int = 10,
) -> UsageTable:
    """A `UsageTable` over `records`, their requests embedded through `cache` (a rebuild embeds
    only new requests), with the similarity floor of the mode (`DENSE_MIN_SIMILARITY` or
    `LEXICAL_MIN_SIMILARITY`)."""
    vectors: Vectors | None = None
    if embedder is not None and records:
        vectors, _ = embed_cached(
            embedder,
            (
                (f"request:{hashlib.sha256(r.request.encode('utf-8')).hexdigest()}", r.request)
                for r in records
            ),
            cache,
            queries=True,
        )
    return UsageTable(
        records,
        vectors=vectors,
        neighbours=neighbours,
        min_similarity=DENSE_MIN_SIMILARITY if vectors is not None else LEXICAL_MIN_SIMILARITY,
    )
