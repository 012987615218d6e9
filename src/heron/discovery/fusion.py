"""Fusing the lexical and dense rankings into one score per tool.

Two methods, both chosen between on the MetaTool tune split only (docs/discovery.md):

- reciprocal rank fusion, `sum 1 / (k + rank)`, which ignores score scales;
- a linear mix of the per-query normalised scores, `alpha * dense + (1 - alpha) * lexical`,
  where dense cosines are min-max scaled over the catalogue and lexical scores divided by the
  best one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from heron.discovery.lexical import FloatArray, normalised

__all__ = ["FusionMethod", "fuse", "minmax", "ranks", "rrf"]

FusionMethod = Literal["rrf", "linear"]


def ranks(scores: FloatArray) -> FloatArray:
    """0-based rank of each entry under descending scores (ties broken by position)."""
    order = np.argsort(-scores, kind="stable")
    out = np.empty(len(scores), dtype=np.float64)
    out[order] = np.arange(len(scores), dtype=np.float64)
    return out


def rrf(score_sets: Sequence[FloatArray], *, k: float) -> FloatArray:
    total = np.zeros(len(score_sets[0]), dtype=np.float64)
    for scores in score_sets:
        total += 1.0 / (k + ranks(scores) + 1.0)
    return total


def minmax(scores: FloatArray) -> FloatArray:
    if not scores.size:
        return scores
    low, high = float(scores.min()), float(scores.max())
    return (scores - low) / (high - low) if high > low else np.zeros_like(scores)


def fuse(
    lexical: FloatArray,
    dense: FloatArray,
    *,
    method: FusionMethod,
    alpha: float,
    rrf_k: float,
) -> FloatArray:
    """One fused score per tool (higher is better; comparable within one query)."""
    if method == "rrf":
        return rrf([dense, lexical], k=rrf_k)
    return alpha * minmax(dense) + (1.0 - alpha) * normalised(lexical)
