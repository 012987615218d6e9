"""The calendars one tool set may use, as its tools see them: a back end per configured name,
the URL policy checked before every CalDAV use, the read-only refusal, and blocking back-end work
run in a worker thread with its errors made `CalendarError`s."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from heron.connectors.calendar import render
from heron.connectors.calendar.base import (
    Backend,
    CalDavCalendar,
    CalendarConfig,
    IcsCalendar,
    calendar_error,
)
from heron.connectors.calendar.ics import IcsBackend
from heron.safety.idempotency import InvalidAction

if TYPE_CHECKING:
    from heron.connectors.calendar.caldav import CalDavBackend

__all__ = ["Calendars"]

_T = TypeVar("_T")


class Calendars:
    """The calendars one tool set may use: their back ends, and blocking work run off the loop."""

    def __init__(self, config: CalendarConfig) -> None:
        self.config = config
        self.names = tuple(config.calendars)
        self._locks = {name: threading.Lock() for name in self.names}

    def backend(self, name: str) -> Backend:
        spec = self.config.calendars[name]
        if isinstance(spec, IcsCalendar):
            return IcsBackend(spec, self._locks[name], default_tz=self.config.default_tz)
        return self.caldav(name)

    def caldav(self, name: str) -> CalDavBackend:
        # The CalDAV client takes a fifth of a second to import: only when a calendar needs it.
        from heron.connectors.calendar.caldav import CalDavBackend

        spec = self.config.calendars[name]
        assert isinstance(spec, CalDavCalendar)  # callers check the kind first
        return CalDavBackend(spec)

    async def run(self, name: str, work: Callable[[], _T]) -> _T:
        """Blocking calendar work in a worker thread, after the URL policy check; any error
        comes out as a `CalendarError`."""
        spec = self.config.calendars[name]
        try:
            if isinstance(spec, CalDavCalendar):
                await self.config.policy.resolve(spec.url)
            return await asyncio.to_thread(work)
        except Exception as exc:
            if isinstance(spec, CalDavCalendar):
                from heron.connectors.calendar.caldav import caldav_error

                raise caldav_error(exc) from None
            raise calendar_error(exc) from None

    def writable(self, name: str) -> None:
        if self.config.calendars[name].access != "read_write":
            raise InvalidAction(
                f"calendar {name!r} is read-only for this agent; nothing was changed"
            )

    def instant(self, text: str) -> dt.datetime:
        """An ISO date or date-time from `render.summary` as an aware datetime."""
        return render.instant(text, self.config.default_tz)

    async def window(
        self, chosen: list[str], start: dt.datetime, end: dt.datetime
    ) -> list[dict[str, Any]]:
        """The occurrences in the chosen calendars overlapping the window, as `render.summary`
        dicts sorted by start."""
        found: list[dict[str, Any]] = []
        for name in chosen:
            events = await self.run(
                name, functools.partial(self.backend(name).occurrences, start, end)
            )
            found += [render.summary(e, name) for e in events]
        return sorted(found, key=lambda e: (self.instant(e["start"]), e["uid"]))
