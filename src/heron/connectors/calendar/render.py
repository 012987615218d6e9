"""How the calendar tools show an event occurrence: as a dict for the result data, and as one line
for the model."""

from __future__ import annotations

import datetime as dt
from typing import Any

import icalendar

__all__ = ["attendees", "bounds", "instant", "line", "summary", "when"]


def when(value: dt.date | dt.datetime, tz: dt.tzinfo) -> dt.datetime:
    """A DTSTART/DTEND value as an aware datetime (dates as midnight in `tz`, floating times
    read in `tz`)."""
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=tz)
    return dt.datetime.combine(value, dt.time(), tzinfo=tz)


def instant(text: str, tz: dt.tzinfo) -> dt.datetime:
    """An ISO date or date-time from `summary` as an aware datetime."""
    value = dt.datetime.fromisoformat(text) if "T" in text else dt.date.fromisoformat(text)
    return when(value, tz)


def bounds(event: icalendar.Component) -> tuple[dt.date | dt.datetime, dt.date | dt.datetime]:
    """An occurrence's DTSTART and its end (DTEND, or DTSTART + DURATION, or DTSTART)."""
    start = event.decoded("DTSTART")
    end = start
    if "DTEND" in event:
        end = event.decoded("DTEND")
    elif "DURATION" in event:
        end = start + event.decoded("DURATION")
    return start, end


def attendees(event: icalendar.Component) -> list[str]:
    """The ATTENDEE addresses, without `mailto:`."""
    value = event.get("ATTENDEE")
    items = value if isinstance(value, list) else [value] if value is not None else []
    return [str(item).removeprefix("mailto:").removeprefix("MAILTO:") for item in items]


def summary(event: icalendar.Component, calendar: str) -> dict[str, Any]:
    """An occurrence as result data; times in ISO form as stored (dates for all-day events)."""
    start, end = bounds(event)
    recurrence = event.get("RECURRENCE-ID")
    return {
        "calendar": calendar,
        "uid": str(event.get("UID", "")),
        "summary": str(event.get("SUMMARY", "")),
        "start": start.isoformat(),
        "end": end.isoformat(),
        "all_day": not isinstance(start, dt.datetime),
        "location": str(event.get("LOCATION", "")),
        "attendees": attendees(event),
        "status": str(event.get("STATUS", "")),
        "transparent": str(event.get("TRANSP", "")).upper() == "TRANSPARENT",
        **({"occurrence": recurrence.dt.isoformat()} if recurrence else {}),
    }


def line(e: dict[str, Any]) -> str:
    """A `summary` as one line of a tool's text."""
    extra = f" @ {e['location']}" if e["location"] else ""
    extra += f", {len(e['attendees'])} attendees" if e["attendees"] else ""
    extra += f", {e['status'].lower()}" if e["status"] and e["status"] != "CONFIRMED" else ""
    where = f"[{e['calendar']} uid {e['uid']}]"
    return f"- {e['start']} → {e['end']}  {e['summary'] or '(no title)'}  {where}{extra}"
