"""Values of flags several commands share, checked where they enter (argparse types)."""

from __future__ import annotations

import argparse

MAX_ROWS = 1_000_000
"""The most rows a listing's `--limit` asks for (the stores take 64-bit integers only)."""


def row_limit(text: str) -> int:
    """`--limit N` of a listing: a whole number from 0 to `MAX_ROWS`."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 0 <= value <= MAX_ROWS:
        raise argparse.ArgumentTypeError(f"must be from 0 to {MAX_ROWS:,} (got {value})")
    return value
