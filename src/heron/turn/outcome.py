"""How a turn ended (`TurnOutcome`), the value every front end reads back from the engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from heron.turn.events import FinalReason

__all__ = ["EMPTY_RESPONSE", "TurnOutcome", "TurnReason", "TurnStatus"]

TurnStatus = Literal["final", "cancelled", "error"]
TurnReason = FinalReason | Literal["aborted", "cancelled", "error"]

EMPTY_RESPONSE = "the model returned an empty response"
"""The error of a turn whose model answered with nothing at all (a sub-agent's `empty`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnOutcome:
    """How a turn ended: `status`, the final text, why (`reason`) and how many iterations ran."""

    status: TurnStatus
    text: str
    reason: TurnReason
    """A `FinalEvent` reason, or `aborted`, `cancelled`, `error` (an `iteration_cap` or
    `budget_exhausted` hit is an `error` under `cap_behavior = "error"`)."""
    iterations: int
    error: str | None = None
