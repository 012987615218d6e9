"""The usage prior: tools that worked for similar requests rank higher.

A prior is any callable from a `UsageQuery` to a mapping of tool (qualified name) → success
weight of past requests similar to this one. The audit trail will feed one (phase 2 of the
discovery work); `UsageTable` is the in-memory implementation over `UsageRecord`s, used by the
tests and the benchmark. The index scales the weights to [0, 1] (by the largest) and adds
`prior_weight` times that to the fused score, so a prior reorders close candidates and never
makes a distant tool a hit on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from heron.discovery.embeddings import Embedder, Vectors
from heron.discovery.lexical import tokenize

__all__ = ["UsagePrior", "UsageQuery", "UsageRecord", "UsageTable"]


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
