"""The one way heron writes an instant: RFC 3339 in UTC with a `Z` suffix.

Audit records, bus events, job and timer summaries, artifact and confirmation expiries all use
it, so two timestamps from different subsystems compare as text.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

__all__ = ["Precision", "utc_rfc3339"]

Precision = Literal["seconds", "milliseconds"]


def utc_rfc3339(epoch: float, *, precision: Precision = "seconds") -> str:
    """Seconds since the epoch as RFC 3339 UTC: `2024-03-15T14:30:00Z`, or with
    `precision="milliseconds"` `2024-03-15T14:30:00.250Z`. Finer digits are cut, not rounded."""
    moment = datetime.fromtimestamp(epoch, UTC)
    return moment.isoformat(timespec=precision).replace("+00:00", "Z")
