"""What both bus back ends share about a stored event: reading bodies back, and the sort key
of its timestamp."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime

from pydantic import TypeAdapter

from heron.always_on.bus.model import STORED, BusEvent

_EVENTS: TypeAdapter[list[BusEvent]] = TypeAdapter(list[BusEvent])


def decode_stored(
    rows: Sequence[tuple[int, str]],
) -> tuple[list[BusEvent | None], list[tuple[int, str]]]:
    """The events of `(seq, body)` rows (None where a body cannot be read) and the unreadable
    rows' seq with the reason. One validation for the whole batch when every body reads."""
    try:
        blob = "[" + ",".join(body for _, body in rows) + "]"
        return list(_EVENTS.validate_json(blob, context=STORED)), []
    except ValueError:
        pass
    events: list[BusEvent | None] = []
    unreadable: list[tuple[int, str]] = []
    for seq, body in rows:
        try:
            events.append(BusEvent.model_validate_json(body, context=STORED))
        except ValueError as exc:
            events.append(None)
            unreadable.append((seq, " ".join(str(exc).split())[:1000]))
    return events, unreadable


def event_epoch(timestamp: str) -> float:
    """Sort key of an ISO 8601 timestamp; a naive one is read as UTC, a broken one as now."""
    try:
        parsed = datetime.fromisoformat(timestamp)
    except ValueError:
        return time.time()
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()
