"""`check_calendar`: a minimal availability check over local iCalendar (.ics) files.

Enough for triaging a meeting invitation: which events of the user's calendars overlap a
proposed slot. Cancelled events and events marked free (`TRANSP:TRANSPARENT`) do not block;
recurring events (`RRULE`, minus `EXDATE`) are expanded inside the asked window. Times without a
zone are read in `default_tz` (UTC unless configured); all-day events block their whole days in
that zone. The files are re-read on every call, so edits by a calendar app count at once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dateutil.rrule import rrulestr  # type: ignore[import-untyped]  # no stubs installed
from icalendar import Calendar, Event

from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool

__all__ = ["Busy", "busy_between", "calendar_tools"]

MAX_OCCURRENCES = 1_000
"""Per recurring event and call: a runaway rule cannot stall the agent."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Busy:
    """One event occurrence that blocks time."""

    summary: str
    start: dt.datetime
    end: dt.datetime
    calendar: str
    uid: str

    def to_json(self) -> dict[str, str]:
        return {
            "summary": self.summary,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "calendar": self.calendar,
            "uid": self.uid,
        }


def _aware(value: dt.date | dt.datetime, tz: dt.tzinfo) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=tz)
    return dt.datetime.combine(value, dt.time(), tzinfo=tz)


def _occurrences(
    event: Event, start: dt.datetime, end: dt.datetime, tz: dt.tzinfo
) -> Iterator[tuple[dt.datetime, dt.datetime]]:
    first = _aware(event.start, tz)
    length = event.duration
    rules = event.rrules
    if not rules:
        yield first, first + length
        return
    excluded = {_aware(d, tz) for d in event.exdates}
    for rule in rules:
        recurrence: Any = rrulestr(rule.to_ical().decode(), dtstart=first)
        # Occurrences that start before the window can still reach into it.
        for count, occurrence in enumerate(recurrence.between(start - length, end, inc=True)):
            if count >= MAX_OCCURRENCES:
                break
            if occurrence not in excluded:
                yield occurrence, occurrence + length


def busy_between(
    calendars: Sequence[Path],
    start: dt.datetime,
    end: dt.datetime,
    *,
    default_tz: dt.tzinfo = dt.UTC,
) -> list[Busy]:
    """Blocking event occurrences overlapping `[start, end)`, sorted by start."""
    start, end = _aware(start, default_tz), _aware(end, default_tz)
    found: list[Busy] = []
    for path in calendars:
        calendar = Calendar.from_ical(path.read_bytes())
        for event in calendar.walk("VEVENT"):
            assert isinstance(event, Event)  # walk("VEVENT") yields Event components
            if str(event.get("STATUS", "")).upper() == "CANCELLED":
                continue
            if str(event.get("TRANSP", "")).upper() == "TRANSPARENT":
                continue
            if event.get("DTSTART") is None:
                continue
            for begin, finish in _occurrences(event, start, end, default_tz):
                if begin < end and finish > start:
                    found.append(
                        Busy(
                            summary=str(event.get("SUMMARY", "(no title)")),
                            start=begin,
                            end=finish,
                            calendar=path.name,
                            uid=str(event.get("UID", "")),
                        )
                    )
    return sorted(found, key=lambda b: (b.start, b.end, b.summary))


def calendar_tools(calendars: Sequence[Path], *, default_tz: dt.tzinfo = dt.UTC) -> list[Tool]:
    """`check_calendar` over the given .ics files."""
    paths = list(calendars)

    @tool(
        read_only=True,
        idempotent=True,
        owner="builtin",
        examples=[{"start": "2025-03-14T10:00:00+01:00", "end": "2025-03-14T11:00:00+01:00"}],
    )
    def check_calendar(start: dt.datetime, end: dt.datetime) -> Any:
        """Check whether the user is free between `start` and `end` (RFC 3339 times). Returns
        `free` and the conflicting events (summary, start, end). Use it before accepting or
        proposing a meeting time.

        Args:
            start: Beginning of the slot, e.g. 2025-03-14T10:00:00+01:00.
            end: End of the slot; must be after `start`.
        """
        if end <= start:
            return ToolResult.fail("`end` must be after `start`")
        missing = [p.name for p in paths if not p.is_file()]
        if missing:
            return ToolResult.fail(f"calendar file(s) not found: {', '.join(missing)}")
        try:
            conflicts = busy_between(paths, start, end, default_tz=default_tz)
        except ValueError as exc:  # icalendar reports unreadable files as ValueError
            return ToolResult.fail(f"cannot read the calendar: {exc}")
        return {
            "start": _aware(start, default_tz).isoformat(),
            "end": _aware(end, default_tz).isoformat(),
            "free": not conflicts,
            "conflicts": [b.to_json() for b in conflicts],
        }

    return [check_calendar]
