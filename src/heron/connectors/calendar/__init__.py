"""Calendars: one tool set over iCalendar files and CalDAV servers, each calendar named and
authorised (read or read-write) by the operator.

`calendar_tools(CalendarConfig(...), confirmations)` builds the calendar tools (list, check
conflicts, create, update, invite); `calendar_tools(config, offer="availability")` builds only
`check_calendar`, the availability check `heron serve` uses to triage invitations. Modules, from
the bottom up: `base` (the configuration, the error and the back-end protocol), `ics` (iCalendar
data, the one recurrence expansion, the file back end), `caldav` (the CalDAV back end),
`calendars` (the authorised calendars as tools see them), `render`, then the tools in `tools`
and `availability`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from heron._support.lazy import lazy_getattr

if TYPE_CHECKING:
    from heron.connectors.calendar.base import (
        Access,
        CalDavCalendar,
        CalendarConfig,
        CalendarError,
        IcsCalendar,
    )
    from heron.connectors.calendar.tools import Offer, calendar_tools

# A configuration can be built without importing the iCalendar and CalDAV libraries.
_EXPORTS: dict[str, str] = {
    "Access": "heron.connectors.calendar.base",
    "CalDavCalendar": "heron.connectors.calendar.base",
    "CalendarConfig": "heron.connectors.calendar.base",
    "CalendarError": "heron.connectors.calendar.base",
    "IcsCalendar": "heron.connectors.calendar.base",
    "Offer": "heron.connectors.calendar.tools",
    "calendar_tools": "heron.connectors.calendar.tools",
}

__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())

__all__ = [
    "Access",
    "CalDavCalendar",
    "CalendarConfig",
    "CalendarError",
    "IcsCalendar",
    "Offer",
    "calendar_tools",
]
