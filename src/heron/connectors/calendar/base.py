"""What every calendar back end shares: the calendars an agent may use, the error, the protocol.

A calendar is either an iCalendar file (`IcsCalendar`, back end in `ics.py`) or a collection on
a CalDAV server (`CalDavCalendar`, back end in `caldav.py`); `CalendarConfig` names the ones an
agent is authorised to use. This module imports no iCalendar or CalDAV library, so a
configuration can be built (and checked) without the `connectors` extra.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from heron.connectors.http_api import ErrorKind
from heron.errors import HeronError
from heron.safety.url_policy import UrlPolicy, UrlRefused
from heron.tools.definition import ToolResult

if TYPE_CHECKING:
    import icalendar

__all__ = [
    "Access",
    "Backend",
    "CalDavCalendar",
    "CalendarConfig",
    "CalendarError",
    "IcsCalendar",
    "calendar_error",
]

Access = Literal["read", "read_write"]


@dataclass(frozen=True, kw_only=True, slots=True)
class IcsCalendar:
    """A calendar kept in one iCalendar (.ics) file; created on the first write."""

    path: Path
    access: Access = "read_write"


@dataclass(frozen=True, kw_only=True, slots=True)
class CalDavCalendar:
    """One calendar collection on a CalDAV server; credentials named by environment variable."""

    url: str
    """The collection URL, e.g. `https://dav.example.com/alice/work/`."""
    username_env: str | None = None
    password_env: str | None = None
    access: Access = "read_write"
    organizer: str | None = None
    """The organiser's address for invitations, e.g. `alice@example.com`."""
    timeout_s: int = 20


@dataclass(frozen=True, kw_only=True, slots=True)
class CalendarConfig:
    """The calendars the agent is authorised to use, by name."""

    calendars: Mapping[str, IcsCalendar | CalDavCalendar]
    policy: UrlPolicy = field(default_factory=UrlPolicy)
    """Checked before every use of a CalDAV URL."""
    default_tz: dt.tzinfo = dt.UTC
    """The zone of times without one (floating times) and of all-day dates in files."""

    @classmethod
    def from_files(
        cls, paths: Iterable[Path], *, access: Access = "read", default_tz: dt.tzinfo = dt.UTC
    ) -> CalendarConfig:
        """Calendars kept in .ics files, each named by its file name, or by its path when an
        earlier file has that name."""
        calendars: dict[str, IcsCalendar | CalDavCalendar] = {}
        for path in paths:
            name = path.name if path.name not in calendars else str(path)
            calendars[name] = IcsCalendar(path=path, access=access)
        return cls(calendars=calendars, default_tz=default_tz)


class CalendarError(HeronError):
    """A calendar operation that failed; `kind` is one of the `ApiError` kinds."""

    def __init__(self, kind: ErrorKind, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.retry_after_s = retry_after_s

    def to_result(self, calendar: str) -> ToolResult:
        data: dict[str, Any] = {"error": self.kind, "calendar": calendar}
        if self.retry_after_s is not None:
            data["retry_after_s"] = self.retry_after_s
        return ToolResult.fail(str(self), data=data)


def calendar_error(exc: Exception) -> CalendarError:
    """What an exception from calendar work means, for errors no back end named more closely.
    Messages carry neither credentials nor URLs."""
    if isinstance(exc, CalendarError):
        return exc
    if isinstance(exc, UrlRefused):
        return CalendarError("refused", str(exc))
    names = " ".join(k.__name__ for k in type(exc).__mro__)
    if isinstance(exc, OSError) and "Timeout" in names:
        return CalendarError("timeout", "the CalDAV server did not answer in time")
    if isinstance(exc, OSError):
        return CalendarError(
            "unreachable", "could not connect to the CalDAV server; nothing was sent"
        )
    if isinstance(exc, SyntaxError | ValueError):
        return CalendarError(
            "bad_response", f"the CalDAV server answered malformed data ({type(exc).__name__})"
        )
    return CalendarError("http", f"the CalDAV request failed: {type(exc).__name__}")


class Backend(Protocol):
    """One calendar's storage. Methods block (they run in a worker thread) and raise
    `CalendarError` or the client library's own errors."""

    @property
    def notifies(self) -> bool:
        """Whether saving an event that has attendees notifies them."""
        ...

    def occurrences(self, start: dt.datetime, end: dt.datetime) -> list[icalendar.Component]:
        """The VEVENT occurrences overlapping the window, recurring events expanded."""
        ...

    def get(self, uid: str) -> icalendar.Component | None:
        """The master VEVENT with this UID (not an overridden occurrence), if any."""
        ...

    def save(self, event: icalendar.Component) -> None:
        """Store the event, replacing the one with the same UID."""
        ...
