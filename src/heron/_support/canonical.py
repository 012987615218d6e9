"""Canonical JSON: the one serialisation heron hashes, signs and compares.

Two values that differ only in the order of their keys give the same string, so the form is
used wherever equality or a digest must not depend on how a mapping was built: receipts, the
duplicate-call guard, idempotency keys, MCP trust pins and the tool-result cache.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["canonical_json"]


# One encoder for the process: `json.dumps` with options builds a new one on every call, and
# this runs several times per tool call. An encoder keeps no state between `encode` calls.
_ENCODER = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def canonical_json(value: Any) -> str:
    """Serialise `value` as compact JSON with sorted keys and unescaped non-ASCII text."""
    return _ENCODER.encode(value)
