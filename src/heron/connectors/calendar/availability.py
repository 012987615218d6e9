"""`check_calendar`: the read-only availability check the always-on agent uses to triage a
meeting invitation — is the user free in a slot, and which event occurrences block it.

Cancelled events and events marked free (`TRANSP:TRANSPARENT`) do not block; recurring events
are expanded inside the asked window; times without an offset and all-day dates are read in
`CalendarConfig.default_tz`. Files are re-read on every call: a calendar app's edits count at
once.
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any

from heron.connectors.calendar import render
from heron.connectors.calendar.base import CalendarError, IcsCalendar
from heron.connectors.calendar.calendars import Calendars
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool

__all__ = ["check_calendar_tool"]


def check_calendar_tool(cals: Calendars) -> Tool:
    """`check_calendar` over every calendar of `cals`."""
    tz = cals.config.default_tz

    @tool(
        read_only=True,
        idempotent=True,
        owner="builtin",
        examples=[{"start": "2025-03-14T10:00:00+01:00", "end": "2025-03-14T11:00:00+01:00"}],
    )
    async def check_calendar(start: dt.datetime, end: dt.datetime) -> Any:
        """Check whether the user is free between `start` and `end` (RFC 3339 times). Returns
        `free` and the conflicting events (summary, start, end). Use it before accepting or
        proposing a meeting time.

        Args:
            start: Beginning of the slot, e.g. 2025-03-14T10:00:00+01:00.
            end: End of the slot; must be after `start`.
        """
        start, end = render.when(start, tz), render.when(end, tz)
        if end <= start:
            return ToolResult.fail("`end` must be after `start`")
        files = [s.path for s in cals.config.calendars.values() if isinstance(s, IcsCalendar)]
        missing = [path.name for path in files if not path.is_file()]
        if missing:
            return ToolResult.fail(f"calendar file(s) not found: {', '.join(missing)}")
        conflicts: list[tuple[dt.datetime, dt.datetime, str, dict[str, str]]] = []
        for name in cals.names:
            occurrences = functools.partial(cals.backend(name).occurrences, start, end)
            try:
                events = await cals.run(name, occurrences)
            except CalendarError as exc:
                data = {"error": exc.kind, "calendar": name}
                return ToolResult.fail(f"cannot read the calendar: {exc}", data=data)
            for event in events:
                if str(event.get("STATUS", "")).upper() == "CANCELLED":
                    continue
                if str(event.get("TRANSP", "")).upper() == "TRANSPARENT":
                    continue
                begin, finish = (render.when(value, tz) for value in render.bounds(event))
                if begin < end and finish > start:
                    busy = {
                        "summary": str(event.get("SUMMARY", "(no title)")),
                        "start": begin.isoformat(),
                        "end": finish.isoformat(),
                        "calendar": name,
                        "uid": str(event.get("UID", "")),
                    }
                    conflicts.append((begin, finish, busy["summary"], busy))
        return {
            "start": start.isoformat(),
            "end": end.isoformat(),
            "free": not conflicts,
            "conflicts": [busy for *_, busy in sorted(conflicts, key=lambda c: c[:3])],
        }

    return check_calendar
