"""iCalendar data, and the back end for calendars kept in .ics files.

`expand` is heron's one recurrence expansion (RRULE, RDATE, EXDATE and overridden occurrences,
by `recurring_ical_events`); CalDAV servers expand on their side (RFC 4791 `expand`). A file is
read on every call, so edits by a calendar app count at once, and rewritten whole (atomically,
other components and time zones kept).
"""

from __future__ import annotations

import datetime as dt
import itertools
import threading
from pathlib import Path

import icalendar
import recurring_ical_events  # type: ignore[import-untyped]

from heron.connectors.calendar.base import CalendarError, IcsCalendar
from heron.safety.workspace import atomic_write

__all__ = ["MAX_OCCURRENCES", "IcsBackend", "expand", "master", "new_calendar", "parse"]

MAX_OCCURRENCES = 1_000
"""Per recurring event and call: a runaway rule cannot flood the agent."""
_PRODID = "-//heron//calendar tools//EN"


def new_calendar() -> icalendar.Calendar:
    """An empty VCALENDAR with heron's PRODID."""
    calendar = icalendar.Calendar()
    calendar.add("prodid", _PRODID)
    calendar.add("version", "2.0")
    return calendar


def parse(data: str | bytes) -> icalendar.Calendar:
    """iCalendar data; `ValueError` when it is not."""
    return icalendar.Calendar.from_ical(data)


def master(events: list[icalendar.Component], uid: str) -> icalendar.Component | None:
    """The event with this UID that is not an overridden occurrence (no RECURRENCE-ID)."""
    found = [e for e in events if str(e.get("UID")) == uid and "RECURRENCE-ID" not in e]
    return found[0] if found else None


def expand(
    calendar: icalendar.Calendar, start: dt.datetime, end: dt.datetime, tz: dt.tzinfo
) -> list[icalendar.Component]:
    """The VEVENT occurrences overlapping `[start, end)`, recurring events expanded; floating
    times and all-day dates are read in `tz`. Events without DTSTART are left out."""
    dated = icalendar.Calendar(calendar)  # the calendar's properties, without components
    dated.subcomponents = [
        c for c in calendar.subcomponents if c.name != "VEVENT" or "DTSTART" in c
    ]
    query = recurring_ical_events.of(dated)
    # The library reads floating times in the window's zone.
    start, end = start.astimezone(tz), end.astimezone(tz)
    return [
        occurrence.as_component(False)
        for series in query.series
        for occurrence in itertools.islice(series.between(start, end), MAX_OCCURRENCES)
    ]


class IcsBackend:
    """A calendar in one .ics file (a missing file is an empty calendar)."""

    notifies = False

    def __init__(
        self, spec: IcsCalendar, lock: threading.Lock, *, default_tz: dt.tzinfo = dt.UTC
    ) -> None:
        self.spec = spec
        self.lock = lock
        self.default_tz = default_tz

    @property
    def path(self) -> Path:
        return self.spec.path

    def _load(self) -> icalendar.Calendar:
        if not self.path.exists():
            return new_calendar()
        try:
            return parse(self.path.read_bytes())
        except ValueError as exc:
            raise CalendarError(
                "bad_response", f"{self.path.name} is not iCalendar: {exc}"
            ) from None

    def occurrences(self, start: dt.datetime, end: dt.datetime) -> list[icalendar.Component]:
        with self.lock:
            calendar = self._load()
        return expand(calendar, start, end, self.default_tz)

    def get(self, uid: str) -> icalendar.Component | None:
        with self.lock:
            return master(self._load().walk("VEVENT"), uid)

    def save(self, event: icalendar.Component) -> None:
        with self.lock:
            calendar = self._load()
            uid = str(event["UID"])
            calendar.subcomponents = [
                c
                for c in calendar.subcomponents
                if not (c.name == "VEVENT" and str(c.get("UID")) == uid)
            ]
            calendar.add_component(event)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, calendar.to_ical())
