"""Calendar tools over iCalendar files and CalDAV servers, behind per-calendar authorisation.

`calendar_tools(config, confirmations)` builds five tools over the calendars the operator named
in `CalendarConfig` — nothing else is reachable, and each calendar is `read` or `read_write`:

- `calendar_list_events`, `calendar_check_conflicts`: occurrences in a time window, recurring
  events expanded (by the CalDAV server with RFC 4791 `expand`, locally for files).
- `calendar_create_event`, `calendar_update_event`: events without attendees, so no one is
  notified. Updating an event that has attendees on a CalDAV server would notify them, so that
  update takes preflight → confirm.
- `calendar_send_invitation`: adds ORGANIZER and ATTENDEEs (RSVP requested) to an event on a
  CalDAV server. A server with RFC 6638 scheduling then delivers the invitations — irreversible,
  so it is two-phase (preflight → confirm, `heron.safety.idempotency`). The preflight says
  whether the server advertises scheduling at all; without it the attendees are stored but no
  invitation is delivered. A file cannot deliver anything, so files refuse invitations.

Files are read and rewritten whole (atomically, other components and time zones kept). CalDAV
goes through the `caldav` client; its URL is checked by the `UrlPolicy` before every use (the
client connects itself, so the address is not pinned as `HttpApi` pins it). Credentials are read
from environment variables at call time and never appear in results or errors. A 429 from the
server is reported with its Retry-After, not waited out.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import icalendar
import recurring_ical_events  # type: ignore[import-untyped]
from caldav.davclient import DAVClient
from caldav.lib import error as dav_error
from pydantic import Field

from heron.connectors.http_api import ErrorKind
from heron.connectors.mail.send import address_problem
from heron.errors import HeronError
from heron.safety.idempotency import (
    Confirmations,
    InvalidAction,
    NotPerformed,
    Plan,
    PreflightConfirm,
)
from heron.safety.url_policy import UrlPolicy, UrlRefused
from heron.safety.workspace import atomic_write
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool

__all__ = ["CalDavCalendar", "CalendarConfig", "CalendarError", "IcsCalendar", "calendar_tools"]

Access = Literal["read", "read_write"]
_PRODID = "-//heron//calendar tools//EN"
# Failures after which the server certainly did not store anything.
_NOT_SENT = frozenset({"unreachable", "credentials", "refused", "auth", "rate_limited"})


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


# --- back ends ---------------------------------------------------------------------------------


class _Ics:
    notifies = False

    def __init__(self, spec: IcsCalendar, lock: threading.Lock) -> None:
        self.spec = spec
        self.lock = lock

    def _load(self) -> icalendar.Calendar:
        if not self.spec.path.exists():
            calendar = icalendar.Calendar()
            calendar.add("prodid", _PRODID)
            calendar.add("version", "2.0")
            return calendar
        try:
            return icalendar.Calendar.from_ical(self.spec.path.read_bytes())
        except ValueError as exc:
            raise CalendarError(
                "bad_response", f"{self.spec.path.name} is not iCalendar: {exc}"
            ) from None

    def occurrences(self, start: dt.datetime, end: dt.datetime) -> list[icalendar.Component]:
        with self.lock:
            calendar = self._load()
        return list(recurring_ical_events.of(calendar).between(start, end))

    def get(self, uid: str) -> icalendar.Component | None:
        with self.lock:
            return _master(self._load().walk("VEVENT"), uid)

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
            self.spec.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.spec.path, calendar.to_ical())


class _CalDav:
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
            return _master(_parse(item.data).walk("VEVENT"), uid)

    def save(self, event: icalendar.Component) -> None:
        wrapper = icalendar.Calendar()
        wrapper.add("prodid", _PRODID)
        wrapper.add("version", "2.0")
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
        return icalendar.Calendar.from_ical(data)
    except ValueError as exc:
        raise CalendarError(
            "bad_response", f"the server sent invalid iCalendar data: {exc}"
        ) from None


def _master(events: list[icalendar.Component], uid: str) -> icalendar.Component | None:
    found = [e for e in events if str(e.get("UID")) == uid and "RECURRENCE-ID" not in e]
    return found[0] if found else None


def _dav_error(exc: Exception) -> CalendarError:
    """What a caldav/niquests/lxml exception means, without credentials or URLs with secrets."""
    if isinstance(exc, CalendarError):
        return exc
    if isinstance(exc, UrlRefused):
        return CalendarError("refused", str(exc))
    if isinstance(exc, dav_error.RateLimitError):
        wait = exc.retry_after_seconds
        when = f"try again in {wait:.0f} s" if wait is not None else "no retry time given"
        return CalendarError("rate_limited", f"the CalDAV server is rate limiting; {when}", wait)
    if isinstance(exc, dav_error.AuthorizationError):
        return CalendarError("auth", "the CalDAV server refused the credentials (HTTP 401/403)")
    if isinstance(exc, dav_error.NotFoundError):
        return CalendarError("not_found", "the CalDAV server has no such calendar or event")
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


# --- rendering ---------------------------------------------------------------------------------


def _instant(text: str) -> dt.datetime:
    """An ISO date or date-time from `_summary` as an aware datetime."""
    return _when(dt.datetime.fromisoformat(text) if "T" in text else dt.date.fromisoformat(text))


def _when(value: Any) -> dt.datetime:
    """A DTSTART/DTEND value as an aware datetime (dates as UTC midnight, floating as UTC)."""
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    return dt.datetime.combine(value, dt.time(), tzinfo=dt.UTC)


def _attendees(event: icalendar.Component) -> list[str]:
    value = event.get("ATTENDEE")
    items = value if isinstance(value, list) else [value] if value is not None else []
    return [str(item).removeprefix("mailto:").removeprefix("MAILTO:") for item in items]


def _summary(event: icalendar.Component, calendar: str) -> dict[str, Any]:
    start = event.decoded("DTSTART")
    end = start
    if "DTEND" in event:
        end = event.decoded("DTEND")
    elif "DURATION" in event:
        end = start + event.decoded("DURATION")
    recurrence = event.get("RECURRENCE-ID")
    return {
        "calendar": calendar,
        "uid": str(event.get("UID", "")),
        "summary": str(event.get("SUMMARY", "")),
        "start": start.isoformat(),
        "end": end.isoformat(),
        "all_day": not isinstance(start, dt.datetime),
        "location": str(event.get("LOCATION", "")),
        "attendees": _attendees(event),
        "status": str(event.get("STATUS", "")),
        "transparent": str(event.get("TRANSP", "")).upper() == "TRANSPARENT",
        **({"occurrence": recurrence.dt.isoformat()} if recurrence else {}),
    }


def _line(e: dict[str, Any]) -> str:
    extra = f" @ {e['location']}" if e["location"] else ""
    extra += f", {len(e['attendees'])} attendees" if e["attendees"] else ""
    extra += f", {e['status'].lower()}" if e["status"] and e["status"] != "CONFIRMED" else ""
    where = f"[{e['calendar']} uid {e['uid']}]"
    return f"- {e['start']} → {e['end']}  {e['summary'] or '(no title)'}  {where}{extra}"


def _aware(name: str, value: dt.datetime) -> dt.datetime:
    if value.tzinfo is None:
        raise InvalidAction(f"{name} needs a UTC offset, e.g. 2024-03-15T14:30:00Z or +01:00")
    return value


# --- the tools ---------------------------------------------------------------------------------

Address = Annotated[str, Field(min_length=3, max_length=254)]


def _named(
    names: tuple[str, ...], **params: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Offer only the configured calendar names: the parameters' types become a `Literal`."""

    def attach(fn: Callable[..., Any]) -> Callable[..., Any]:
        choice = Literal[names]  # type: ignore[valid-type]
        for param, shape in params.items():
            fn.__annotations__[param] = choice if shape == "one" else list[choice] | None
        return fn

    return attach


def calendar_tools(config: CalendarConfig, confirmations: Confirmations) -> list[Tool]:
    """The calendar tools over `config.calendars`; invitations are two-phase via `confirmations`."""
    if not config.calendars:
        raise ValueError("calendar_tools needs at least one calendar")
    names = tuple(config.calendars)
    locks = {name: threading.Lock() for name in names}
    invite_gate = PreflightConfirm("calendar_send_invitation", confirmations)
    update_gate = PreflightConfirm("calendar_update_event", confirmations)

    def backend(name: str) -> _Ics | _CalDav:
        spec = config.calendars[name]
        return _Ics(spec, locks[name]) if isinstance(spec, IcsCalendar) else _CalDav(spec)

    async def run(name: str, work: Callable[[], Any]) -> Any:
        """Blocking calendar work in a thread, after the URL policy check; errors become
        `CalendarError`s."""
        spec = config.calendars[name]
        try:
            if isinstance(spec, CalDavCalendar):
                await config.policy.resolve(spec.url)
            return await asyncio.to_thread(work)
        except Exception as exc:
            raise _dav_error(exc) from None

    def writable(name: str) -> None:
        if config.calendars[name].access != "read_write":
            raise InvalidAction(
                f"calendar {name!r} is read-only for this agent; nothing was changed"
            )

    async def window(
        chosen: list[str], start: dt.datetime, end: dt.datetime
    ) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for name in chosen:
            events = await run(name, functools.partial(backend(name).occurrences, start, end))
            found += [_summary(e, name) for e in events]
        return sorted(found, key=lambda e: (_instant(e["start"]), e["uid"]))

    @tool(
        read_only=True,
        owner="builtin",
        open_world=True,
        examples=[
            {"calendar": names[0], "start": "2024-03-15T00:00:00Z", "end": "2024-03-22T00:00:00Z"}
        ],
    )
    @_named(names, calendar="one")
    async def calendar_list_events(
        calendar: str, start: dt.datetime, end: dt.datetime
    ) -> ToolResult:
        """List the events of one calendar that overlap a time window, recurring events
        expanded into their occurrences. Times are RFC 3339 with an offset, e.g.
        `2024-03-15T14:30:00Z`; all-day events show dates.

        Returns: one line per occurrence (start → end, title, uid, location, attendee count),
        sorted by start, and the same as structured data.

        Args:
            calendar: Which configured calendar.
            start: Window start (inclusive), e.g. `2024-03-15T00:00:00Z`.
            end: Window end (exclusive), e.g. `2024-03-22T00:00:00Z`.
        """
        try:
            found = await window([calendar], _aware("start", start), _aware("end", end))
        except InvalidAction as exc:
            return ToolResult.fail(str(exc))
        except CalendarError as exc:
            return exc.to_result(calendar)
        head = f"{len(found)} events in {calendar} from {start.isoformat()} to {end.isoformat()}"
        return ToolResult.ok(
            "\n".join([head + (":" if found else "."), *map(_line, found)]), data={"events": found}
        )

    @tool(
        read_only=True,
        owner="builtin",
        open_world=True,
        examples=[{"start": "2024-03-15T14:00:00Z", "end": "2024-03-15T15:00:00Z"}],
    )
    @_named(names, calendars="many")
    async def calendar_check_conflicts(
        start: dt.datetime, end: dt.datetime, calendars: list[str] | None = None
    ) -> ToolResult:
        """Check whether a time slot is free: lists the events (from all calendars, or the ones
        named) that overlap it. Events marked free (TRANSP:TRANSPARENT) or cancelled do not
        conflict. Use it before creating an event or inviting people.

        Returns: "free" or the conflicting events.

        Args:
            start: Slot start, e.g. `2024-03-15T14:00:00Z`.
            end: Slot end, e.g. `2024-03-15T15:00:00Z`.
            calendars: Calendars to check; omit for all.
        """
        try:
            if _aware("end", end) <= _aware("start", start):
                raise InvalidAction("end must be after start")
            found = await window(calendars or list(names), start, end)
        except InvalidAction as exc:
            return ToolResult.fail(str(exc))
        except CalendarError as exc:
            return exc.to_result(",".join(calendars or names))
        clashes = [
            e
            for e in found
            if not e["transparent"]
            and e["status"] != "CANCELLED"
            # Touching is not overlapping: an event ending at `start` leaves the slot free.
            and _instant(e["end"]) > start
            and _instant(e["start"]) < end
        ]
        slot = f"{start.isoformat()} → {end.isoformat()}"
        if not clashes:
            return ToolResult.ok(
                f"free: nothing overlaps {slot}", data={"free": True, "conflicts": []}
            )
        text = f"{len(clashes)} conflicts with {slot}:\n" + "\n".join(map(_line, clashes))
        return ToolResult.ok(text, data={"free": False, "conflicts": clashes})

    @tool(
        owner="builtin",
        open_world=True,
        examples=[
            {
                "calendar": names[0],
                "summary": "Design review",
                "start": "2024-03-15T14:30:00Z",
                "end": "2024-03-15T15:30:00Z",
                "location": "Room 2",
            }
        ],
    )
    @_named(names, calendar="one")
    async def calendar_create_event(
        calendar: str,
        summary: Annotated[str, Field(min_length=1, max_length=500)],
        start: dt.datetime,
        end: dt.datetime,
        location: str = "",
        description: str = "",
        all_day: bool = False,
    ) -> ToolResult:
        """Create an event without attendees (no one is notified; invite people afterwards
        with calendar_send_invitation). Check for conflicts first with
        calendar_check_conflicts. With `all_day`, only the dates of start and end count and
        end is the first day after the event.

        Returns: the new event's uid (needed to update it or invite people).

        Args:
            calendar: Which configured calendar (must be writable).
            summary: The title, e.g. `Design review`.
            start: RFC 3339 start with offset, e.g. `2024-03-15T14:30:00Z`.
            end: RFC 3339 end with offset, after start.
            location: Where, e.g. `Room 2`.
            description: Notes.
            all_day: Make an all-day event over the dates of start and end.
        """
        try:
            writable(calendar)
            if _aware("end", end) <= _aware("start", start):
                raise InvalidAction("end must be after start")
            event = icalendar.Event()
            event.add("uid", f"{uuid.uuid4()}@heron")
            event.add("dtstamp", dt.datetime.now(dt.UTC))
            event.add("summary", summary)
            event.add("dtstart", start.date() if all_day else start)
            event.add("dtend", end.date() if all_day else end)
            for key, value in (("location", location), ("description", description)):
                if value:
                    event.add(key, value)
            await run(calendar, lambda: backend(calendar).save(event))
        except InvalidAction as exc:
            return ToolResult.fail(str(exc))
        except CalendarError as exc:
            return exc.to_result(calendar)
        created = _summary(event, calendar)
        return ToolResult.ok(f"created in {calendar}:\n{_line(created)}", data=created)

    @tool(
        owner="builtin",
        open_world=True,
        examples=[
            {
                "calendar": names[0],
                "uid": "5f1c…@heron",
                "start": "2024-03-15T15:00:00Z",
                "end": "2024-03-15T16:00:00Z",
            }
        ],
    )
    @_named(names, calendar="one")
    async def calendar_update_event(
        calendar: str,
        uid: Annotated[str, Field(min_length=1, max_length=300)],
        summary: str | None = None,
        start: dt.datetime | None = None,
        end: dt.datetime | None = None,
        location: str | None = None,
        description: str | None = None,
        confirmation_token: str | None = None,
    ) -> ToolResult:
        """Change an event's title, time, location or description; fields left out stay as
        they are. For a recurring event this changes the whole series. On a CalDAV calendar,
        an event that has attendees is two-phase: the first call only shows the change and
        returns a confirmation_token, because saving it notifies the attendees; call again
        with the same arguments plus the token to save it.

        Args:
            calendar: Which configured calendar (must be writable).
            uid: The event's uid, from calendar_list_events or calendar_create_event.
            summary: New title.
            start: New RFC 3339 start with offset.
            end: New RFC 3339 end with offset.
            location: New location.
            description: New notes.
            confirmation_token: Only for events with attendees on CalDAV: the preflight's token.
        """
        changes: dict[str, Any] = {
            "summary": summary,
            "location": location,
            "description": description,
            "dtstart": start,
            "dtend": end,
        }
        changes = {k: v for k, v in changes.items() if v is not None}
        try:
            writable(calendar)
            for key, value in (("start", start), ("end", end)):
                if value is not None:
                    _aware(key, value)
            if not changes:
                raise InvalidAction("nothing to change: give at least one field")
            store = backend(calendar)
            event = await run(calendar, lambda: store.get(uid))
        except InvalidAction as exc:
            return ToolResult.fail(str(exc))
        except CalendarError as exc:
            return exc.to_result(calendar)
        if event is None:
            return ToolResult.fail(
                f"calendar {calendar!r} has no event with uid {uid!r}", data={"error": "not_found"}
            )
        if "dtend" in changes:
            event.pop("DURATION", None)
        for key, value in changes.items():
            event.pop(key.upper(), None)
            event.add(key, value)
        updated = _summary(event, calendar)
        if _instant(updated["end"]) < _instant(updated["start"]):
            return ToolResult.fail("the new end would be before the start; nothing was changed")
        sequence = int(event.get("SEQUENCE", 0)) + 1
        event.pop("SEQUENCE", None)
        event.add("sequence", sequence)

        def plan(_: str) -> Plan:
            async def execute() -> ToolResult:
                try:
                    await run(calendar, lambda: store.save(event))
                except CalendarError as exc:
                    if exc.kind in _NOT_SENT:
                        raise NotPerformed(str(exc)) from None
                    raise
                return ToolResult.ok(f"updated in {calendar}:\n{_line(updated)}", data=updated)

            shown = ", ".join(f"{k.lower()}={v}" for k, v in changes.items())
            who = ", ".join(updated["attendees"])
            return Plan(
                summary=f"Update {uid} in {calendar}: {shown}\nAttendees to be notified: {who}",
                execute=execute,
                if_unknown=f"list the events of {calendar} and look at {uid}",
            )

        if not (store.notifies and updated["attendees"]):
            try:
                return await plan("").execute()
            except (CalendarError, NotPerformed) as exc:
                return ToolResult.fail(
                    str(exc), data={"error": getattr(exc, "kind", "not_performed")}
                )
        arguments = {"calendar": calendar, "uid": uid, **{k: str(v) for k, v in changes.items()}}
        return await update_gate.run(
            arguments, confirmation_token=confirmation_token, idempotency_key=None, plan=plan
        )

    @tool(
        irreversible=True,
        open_world=True,
        owner="builtin",
        examples=[{"calendar": names[0], "uid": "5f1c…@heron", "attendees": ["ana@example.com"]}],
    )
    @_named(names, calendar="one")
    async def calendar_send_invitation(
        calendar: str,
        uid: Annotated[str, Field(min_length=1, max_length=300)],
        attendees: Annotated[list[Address], Field(min_length=1, max_length=50)],
        confirmation_token: str | None = None,
        idempotency_key: Annotated[str, Field(min_length=1, max_length=200)] | None = None,
    ) -> ToolResult:
        """Invite people to an existing event on a CalDAV calendar: adds you as organiser and
        them as attendees (RSVP requested); a server with CalDAV scheduling then e-mails the
        invitations. That cannot be undone, so it takes two calls: the first (without
        confirmation_token) changes nothing and shows exactly who is invited to what, whether
        the server will deliver invitations, and a token; call again with the same arguments
        plus that token to send. Refuses calendars kept in files and addresses that are not
        plain `name@example.com`.

        Args:
            calendar: A writable CalDAV calendar.
            uid: The event's uid.
            attendees: Addresses to invite, e.g. `["ana@example.com"]`.
            confirmation_token: The token from this tool's preflight result; omit to preflight.
            idempotency_key: A unique name for this invitation, so a retry never sends twice.
        """
        spec = config.calendars[calendar]
        arguments = {"calendar": calendar, "uid": uid, "attendees": attendees}
        try:
            writable(calendar)
            if not isinstance(spec, CalDavCalendar):
                raise InvalidAction(
                    f"calendar {calendar!r} is a file, which cannot deliver invitations"
                )
            if spec.organizer is None or address_problem(spec.organizer):
                raise InvalidAction(
                    f"calendar {calendar!r} has no valid organizer address configured"
                )
            problems = [f"{a!r} {p}" for a in attendees if (p := address_problem(a))]
            if problems:
                raise InvalidAction("; ".join(problems))
            store = _CalDav(spec)
            event = await run(calendar, lambda: store.get(uid))
            delivers = await run(calendar, store.schedules) if confirmation_token is None else None
        except InvalidAction as exc:
            return ToolResult.fail(
                f"calendar_send_invitation refused: {exc}", data={"error": "invalid_arguments"}
            )
        except CalendarError as exc:
            return exc.to_result(calendar)
        if event is None:
            return ToolResult.fail(
                f"calendar {calendar!r} has no event with uid {uid!r}", data={"error": "not_found"}
            )
        new = [a for a in attendees if a.lower() not in {x.lower() for x in _attendees(event)}]

        def plan(action_id: str) -> Plan:
            if not new:
                raise InvalidAction("everyone listed is already invited")
            event.pop("ORGANIZER", None)
            event.add("organizer", f"mailto:{spec.organizer}")
            for address in new:
                params = {"ROLE": "REQ-PARTICIPANT", "PARTSTAT": "NEEDS-ACTION", "RSVP": "TRUE"}
                event.add("attendee", f"mailto:{address}", parameters=params)
            sequence = int(event.get("SEQUENCE", 0)) + 1
            event.pop("SEQUENCE", None)
            event.add("sequence", sequence)
            info = _summary(event, calendar)

            async def execute() -> ToolResult:
                try:
                    await run(calendar, lambda: store.save(event))
                except CalendarError as exc:
                    if exc.kind in _NOT_SENT:
                        raise NotPerformed(str(exc)) from None
                    raise
                what = f"{info['summary']!r} ({info['start']}) in {calendar}"
                text = f"invited {', '.join(new)} to {what}"
                return ToolResult.ok(text, data={"phase": "sent", "invited": new, "uid": uid})

            delivery = {
                True: "The server supports scheduling: it will send the invitations.",
                False: "WARNING: the server does not advertise CalDAV scheduling; the "
                "attendees will be stored but NO invitation will be delivered.",
                None: "",
            }[delivers]
            summary = (
                f"Invite {', '.join(new)} to {_line(info)[2:]}\nOrganizer: {spec.organizer}"
                f" (on {spec.url})\n{delivery}"
            ).rstrip()
            return Plan(
                summary=summary,
                execute=execute,
                data={"invited": new, "delivers": delivers},
                if_unknown=f"list the events of {calendar} and look at the attendees of {uid}",
            )

        return await invite_gate.run(
            arguments,
            confirmation_token=confirmation_token,
            idempotency_key=idempotency_key,
            plan=plan,
        )

    return [
        calendar_list_events,
        calendar_check_conflicts,
        calendar_create_event,
        calendar_update_event,
        calendar_send_invitation,
    ]
