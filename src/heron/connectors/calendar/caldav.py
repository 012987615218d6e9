"""The back end for calendar collections on a CalDAV server, through the `caldav` client.

The server expands recurring events (RFC 4791 `expand`). Credentials are read from environment
variables at call time and never appear in results or errors; `caldav_error` says what a client
exception means without them. A 429 is reported with its Retry-After, not waited out.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from collections.abc import Iterator
from typing import Any

import icalendar
from caldav.davclient import DAVClient
from caldav.lib import error as dav_error

from heron.connectors.calendar.base import CalDavCalendar, CalendarError, calendar_error
from heron.connectors.calendar.ics import master, new_calendar, parse

__all__ = ["CalDavBackend", "caldav_error"]


class CalDavBackend:
    """One calendar collection on a CalDAV server; a client per call, closed afterwards."""

    notifies = True

    def __init__(self, spec: CalDavCalendar) -> None:
        self.spec = spec

    @contextlib.contextmanager
    def _calendar(self) -> Iterator[Any]:
        """The calendar collection, over a client that is closed afterwards."""
        env = self.spec.username_env, self.spec.password_env
        user, password = (os.environ.get(name, "") if name else None for name in env)
        for name, value in zip(env, (user, password), strict=True):
            if name and not value:
                raise CalendarError("credentials", f"${name} is not set; nothing was sent")
        client = DAVClient(
            url=self.spec.url,
            username=user,
            password=password,
            timeout=self.spec.timeout_s,
            enable_rfc6764=False,
        )
        try:
            yield client.calendar(url=self.spec.url)  # type: ignore[no-untyped-call]
        finally:
            client.close()

    def occurrences(self, start: dt.datetime, end: dt.datetime) -> list[icalendar.Component]:
        with self._calendar() as calendar:
            found = calendar.search(start=start, end=end, event=True, expand=True)
            return [e for item in found for e in _parse(item.data).walk("VEVENT")]

    def get(self, uid: str) -> icalendar.Component | None:
        with self._calendar() as calendar:
            try:
                item = calendar.event_by_uid(uid)
            except dav_error.NotFoundError:
                return None
            return master(_parse(item.data).walk("VEVENT"), uid)

    def save(self, event: icalendar.Component) -> None:
        wrapper = new_calendar()
        wrapper.add_component(event)
        with self._calendar() as calendar:
            # The tools set SEQUENCE; the client must not bump it a second time.
            calendar.save_event(wrapper.to_ical().decode("utf-8"), increase_seqno=False)

    def schedules(self) -> bool:
        """Whether the server advertises RFC 6638 scheduling (it would deliver invitations)."""
        with self._calendar() as calendar:
            return bool(calendar.client.check_scheduling_support())


def _parse(data: str | bytes) -> icalendar.Calendar:
    try:
        return parse(data)
    except ValueError as exc:
        raise CalendarError(
            "bad_response", f"the server sent invalid iCalendar data: {exc}"
        ) from None


def caldav_error(exc: Exception) -> CalendarError:
    """What a caldav/niquests/lxml exception means, without credentials or URLs with secrets."""
    if isinstance(exc, dav_error.RateLimitError):
        wait = exc.retry_after_seconds
        when = f"try again in {wait:.0f} s" if wait is not None else "no retry time given"
        return CalendarError("rate_limited", f"the CalDAV server is rate limiting; {when}", wait)
    if isinstance(exc, dav_error.AuthorizationError):
        return CalendarError("auth", "the CalDAV server refused the credentials (HTTP 401/403)")
    if isinstance(exc, dav_error.NotFoundError):
        return CalendarError("not_found", "the CalDAV server has no such calendar or event")
    return calendar_error(exc)
