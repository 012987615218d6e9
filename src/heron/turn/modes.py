"""The engine's modes that the configuration names too: here, apart from `heron.turn.context`,
so reading a configuration does not import the engine (`heron serve` reads it before it
listens)."""

from __future__ import annotations

from typing import Literal

ParallelMode = Literal["off", "read-only", "all"]
"""Which batches of calls may run concurrently: none, read-only ones only, or all."""
