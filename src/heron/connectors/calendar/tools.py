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

`calendar_tools(config, offer="availability")` builds only `check_calendar`, the read-only
availability check the always-on agent uses to triage an invitation: is the user free in a slot,
and which event occurrences block it. Cancelled events and events marked free
(`TRANSP:TRANSPARENT`) do not block; times without an offset are read in `config.default_tz`.

The back ends are `ics.py` (files) and `caldav.py` (CalDAV, imported on first use); a CalDAV URL
is checked by the `UrlPolicy` before every use (the client connects itself, so the address is
not pinned as `HttpApi` pins it).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Annotated, Any, Literal, assert_never

import icalendar
from pydantic import Field

from heron.connectors.calendar import render
from heron.connectors.calendar.availability import check_calendar_tool
from heron.connectors.calendar.base import CalDavCalendar, CalendarConfig, CalendarError
from heron.connectors.calendar.calendars import Calendars
from heron.connectors.mail.send import address_problem
from heron.safety.idempotency import (
    Confirmations,
    InvalidAction,
    NotPerformed,
    Plan,
    PreflightConfirm,
)
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool

__all__ = ["Offer", "calendar_tools"]

Offer = Literal["full", "availability"]
"""Which tools `calendar_tools` builds: the five calendar tools, or only `check_calendar`."""
# Failures after which the server certainly did not store anything.
_NOT_SENT = frozenset({"unreachable", "credentials", "refused", "auth", "rate_limited"})


def calendar_tools(
    config: CalendarConfig, confirmations: Confirmations | None = None, *, offer: Offer = "full"
) -> list[Tool]:
    """The calendar tools over `config.calendars` (see the module docs for the two offers).
    The full offer needs `confirmations`: invitations and notifying updates are two-phase."""
    if not config.calendars:
        raise ValueError("calendar_tools needs at least one calendar")
    calendars = Calendars(config)
    if offer == "full":
        if confirmations is None:
            raise ValueError("the full calendar tools need confirmations for two-phase actions")
        return _full(calendars, confirmations)
    if offer == "availability":
        return [check_calendar_tool(calendars)]
    assert_never(offer)


def _aware(name: str, value: dt.datetime) -> dt.datetime:
    if value.tzinfo is None:
        raise InvalidAction(f"{name} needs a UTC offset, e.g. 2024-03-15T14:30:00Z or +01:00")
    return value


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


def _full(cals: Calendars, confirmations: Confirmations) -> list[Tool]:
    config, names = cals.config, cals.names
    invite_gate = PreflightConfirm("calendar_send_invitation", confirmations)
    update_gate = PreflightConfirm("calendar_update_event", confirmations)

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
            found = await cals.window([calendar], _aware("start", start), _aware("end", end))
        except InvalidAction as exc:
            return ToolResult.fail(str(exc))
        except CalendarError as exc:
            return exc.to_result(calendar)
        head = f"{len(found)} events in {calendar} from {start.isoformat()} to {end.isoformat()}"
        return ToolResult.ok(
            "\n".join([head + (":" if found else "."), *map(render.line, found)]),
            data={"events": found},
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
            found = await cals.window(calendars or list(names), start, end)
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
            and cals.instant(e["end"]) > start
            and cals.instant(e["start"]) < end
        ]
        slot = f"{start.isoformat()} → {end.isoformat()}"
        if not clashes:
            return ToolResult.ok(
                f"free: nothing overlaps {slot}", data={"free": True, "conflicts": []}
            )
        text = f"{len(clashes)} conflicts with {slot}:\n" + "\n".join(map(render.line, clashes))
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
            cals.writable(calendar)
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
            await cals.run(calendar, lambda: cals.backend(calendar).save(event))
        except InvalidAction as exc:
            return ToolResult.fail(str(exc))
        except CalendarError as exc:
            return exc.to_result(calendar)
        created = render.summary(event, calendar)
        return ToolResult.ok(f"created in {calendar}:\n{render.line(created)}", data=created)

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
            cals.writable(calendar)
            for key, value in (("start", start), ("end", end)):
                if value is not None:
                    _aware(key, value)
            if not changes:
                raise InvalidAction("nothing to change: give at least one field")
            store = cals.backend(calendar)
            event = await cals.run(calendar, lambda: store.get(uid))
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
        updated = render.summary(event, calendar)
        if cals.instant(updated["end"]) < cals.instant(updated["start"]):
            return ToolResult.fail("the new end would be before the start; nothing was changed")
        sequence = int(event.get("SEQUENCE", 0)) + 1
        event.pop("SEQUENCE", None)
        event.add("sequence", sequence)

        def plan(_: str) -> Plan:
            async def execute() -> ToolResult:
                try:
                    await cals.run(calendar, lambda: store.save(event))
                except CalendarError as exc:
                    if exc.kind in _NOT_SENT:
                        raise NotPerformed(str(exc)) from None
                    raise
                return ToolResult.ok(
                    f"updated in {calendar}:\n{render.line(updated)}", data=updated
                )

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
            cals.writable(calendar)
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
            store = cals.caldav(calendar)
            event = await cals.run(calendar, lambda: store.get(uid))
            delivers = (
                await cals.run(calendar, store.schedules) if confirmation_token is None else None
            )
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
        new = [
            a for a in attendees if a.lower() not in {x.lower() for x in render.attendees(event)}
        ]

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
            info = render.summary(event, calendar)

            async def execute() -> ToolResult:
                try:
                    await cals.run(calendar, lambda: store.save(event))
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
                f"Invite {', '.join(new)} to {render.line(info)[2:]}\nOrganizer: {spec.organizer}"
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
