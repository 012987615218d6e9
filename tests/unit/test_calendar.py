"""Calendar tools against a real Radicale CalDAV server on 127.0.0.1 (htpasswd auth, temporary
storage) and against .ics files; invitations are preflight → confirm."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import icalendar
import pytest
import radicale  # type: ignore[import-untyped]
import radicale.config  # type: ignore[import-untyped]
from caldav.davclient import DAVClient

from heron import ToolResult
from heron.connectors.calendar import (
    CalDavCalendar,
    CalendarConfig,
    IcsCalendar,
    calendar_tools,
)
from heron.safety.idempotency import Confirmations, IdempotencyStore
from heron.safety.sqlite_idempotency import SqliteIdempotencyLedger
from heron.tools.definition import Tool
from support.connectors import CTX, LOCAL, ApiServer, Reply, closed_port, run

PASSWORD = "radicale-pw-7f3e9a"
STANDUP = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//test//test//EN
BEGIN:VTIMEZONE
TZID:Europe/Berlin
BEGIN:STANDARD
DTSTART:19701025T030000
RRULE:FREQ=YEARLY;BYMONTH=10;BYDAY=-1SU
TZOFFSETFROM:+0200
TZOFFSETTO:+0100
END:STANDARD
BEGIN:DAYLIGHT
DTSTART:19700329T020000
RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU
TZOFFSETFROM:+0100
TZOFFSETTO:+0200
END:DAYLIGHT
END:VTIMEZONE
BEGIN:VEVENT
UID:standup@test
DTSTAMP:20240101T000000Z
DTSTART;TZID=Europe/Berlin:20240304T093000
DTEND;TZID=Europe/Berlin:20240304T094500
RRULE:FREQ=WEEKLY;BYDAY=MO,WE
SUMMARY:Stand-up
END:VEVENT
END:VCALENDAR
"""
RECURRING = (
    STANDUP.removesuffix("END:VCALENDAR\n")
    + """BEGIN:VEVENT
UID:offsite@test
DTSTAMP:20240101T000000Z
DTSTART;VALUE=DATE:20240320
DTEND;VALUE=DATE:20240322
SUMMARY:Offsite
TRANSP:TRANSPARENT
END:VEVENT
END:VCALENDAR
"""
)


TRIAGE = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//test//test//EN
BEGIN:VEVENT
UID:standup
SUMMARY:Standup
DTSTART:20250310T090000Z
DTEND:20250310T091500Z
RRULE:FREQ=DAILY;COUNT=10
EXDATE:20250312T090000Z
END:VEVENT
BEGIN:VEVENT
UID:dentist
SUMMARY:Dentist
DTSTART;TZID=Europe/Paris:20250314T110000
DTEND;TZID=Europe/Paris:20250314T120000
END:VEVENT
BEGIN:VEVENT
UID:focus
SUMMARY:Focus time
TRANSP:TRANSPARENT
DTSTART:20250314T130000Z
DTEND:20250314T150000Z
END:VEVENT
BEGIN:VEVENT
UID:gone
SUMMARY:Cancelled sync
STATUS:CANCELLED
DTSTART:20250314T140000Z
DTEND:20250314T143000Z
END:VEVENT
BEGIN:VEVENT
UID:holiday
SUMMARY:Holiday
DTSTART;VALUE=DATE:20250320
DTEND;VALUE=DATE:20250321
END:VEVENT
END:VCALENDAR
"""


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


class _Threaded(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def alice(url: str) -> DAVClient:
    """A direct client, to prepare and inspect the server independently of the tools."""
    return DAVClient(url=url, username="alice", password=PASSWORD, enable_rfc6764=False)


@pytest.fixture
def dav(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A real Radicale on loopback with user alice and an empty calendar /alice/work/."""
    users = tmp_path / "users"
    users.write_text(f"alice:{PASSWORD}\n")
    configuration = radicale.config.load()
    configuration.update(
        {
            "storage": {"filesystem_folder": str(tmp_path / "collections")},
            # No delay after a failed login: the client's first request is always unauthenticated.
            "auth": {"type": "htpasswd", "htpasswd_filename": str(users)}
            | {"htpasswd_encryption": "plain", "delay": "0"},
            "logging": {"level": "warning"},
        },
        "test",
    )
    server = make_server(
        "127.0.0.1", 0, radicale.Application(configuration), _Threaded, handler_class=_Quiet
    )
    threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    with alice(base + "/") as client:
        client.principal().make_calendar(name="work", cal_id="work")
    monkeypatch.setenv("CAL_USER", "alice")
    monkeypatch.setenv("CAL_PASSWORD", PASSWORD)
    yield base + "/alice/work/"
    server.shutdown()
    server.server_close()


def caldav_spec(url: str, **options: Any) -> CalDavCalendar:
    return CalDavCalendar(
        url=url,
        username_env="CAL_USER",
        password_env="CAL_PASSWORD",
        organizer="alice@example.com",
        **options,
    )


def build(tmp_path: Path, **calendars: IcsCalendar | CalDavCalendar) -> dict[str, Tool]:
    confirmations = Confirmations(IdempotencyStore(SqliteIdempotencyLedger(tmp_path / "state")))
    config = CalendarConfig(calendars=calendars, policy=LOCAL)
    return {t.spec.name: t for t in calendar_tools(config, confirmations)}


def stored(url: str) -> list[icalendar.Component]:
    with alice(url) as client:
        events = client.calendar(url=url).events()
    return [c for e in events for c in icalendar.Calendar.from_ical(e.data).walk("VEVENT")]


async def test_caldav_create_list_and_conflicts(dav: str, tmp_path: Path) -> None:
    tools = build(tmp_path, work=caldav_spec(dav))
    created = await run(
        tools,
        "calendar_create_event",
        calendar="work",
        summary="Design review",
        start="2024-03-15T14:30:00Z",
        end="2024-03-15T15:30:00Z",
        location="Room 2",
    )
    assert created.success, created.error
    uid = created.data["uid"]
    assert [str(e["SUMMARY"]) for e in stored(dav)] == ["Design review"]

    listed = await run(
        tools,
        "calendar_list_events",
        calendar="work",
        start="2024-03-15T00:00:00Z",
        end="2024-03-16T00:00:00Z",
    )
    assert listed.success, listed.error
    assert "2024-03-15T14:30:00+00:00 → 2024-03-15T15:30:00+00:00  Design review" in listed.output
    assert f"uid {uid}" in listed.output and "@ Room 2" in listed.output

    clash = await run(
        tools,
        "calendar_check_conflicts",
        start="2024-03-15T15:00:00+01:00",
        end="2024-03-15T16:00:00Z",
    )
    assert clash.success and clash.data["free"] is False
    assert [c["uid"] for c in clash.data["conflicts"]] == [uid]
    touching = await run(
        tools, "calendar_check_conflicts", start="2024-03-15T15:30:00Z", end="2024-03-15T16:00:00Z"
    )
    assert touching.data == {"free": True, "conflicts": []}


async def test_caldav_recurring_events_are_expanded(dav: str, tmp_path: Path) -> None:
    with alice(dav) as client:
        client.calendar(url=dav).save_event(STANDUP)
    tools = build(tmp_path, work=caldav_spec(dav))
    week = await run(
        tools,
        "calendar_list_events",
        calendar="work",
        start="2024-03-11T00:00:00Z",
        end="2024-03-18T00:00:00Z",
    )
    assert week.success, week.error
    standups = [e for e in week.data["events"] if e["uid"] == "standup@test"]
    starts = [dt.datetime.fromisoformat(e["start"]) for e in standups]
    utc = dt.UTC
    assert starts == [
        dt.datetime(2024, 3, 11, 8, 30, tzinfo=utc),
        dt.datetime(2024, 3, 13, 8, 30, tzinfo=utc),
    ]


async def test_caldav_update_changes_the_stored_event(dav: str, tmp_path: Path) -> None:
    tools = build(tmp_path, work=caldav_spec(dav))
    created = await run(
        tools,
        "calendar_create_event",
        calendar="work",
        summary="Lunch",
        start="2024-03-15T12:00:00Z",
        end="2024-03-15T13:00:00Z",
    )
    updated = await run(
        tools,
        "calendar_update_event",
        calendar="work",
        uid=created.data["uid"],
        start="2024-03-15T12:30:00Z",
        end="2024-03-15T13:30:00Z",
        summary="Late lunch",
    )
    assert updated.success, updated.error
    (event,) = stored(dav)
    assert str(event["SUMMARY"]) == "Late lunch" and event["SEQUENCE"] == 1
    assert event.decoded("DTSTART") == dt.datetime(2024, 3, 15, 12, 30, tzinfo=dt.UTC)
    backwards = await run(
        tools,
        "calendar_update_event",
        calendar="work",
        uid=created.data["uid"],
        end="2024-03-15T01:00:00Z",
    )
    assert not backwards.success and "before the start" in (backwards.error or "")


async def test_invitation_is_preflighted_then_confirmed_once(dav: str, tmp_path: Path) -> None:
    tools = build(tmp_path, work=caldav_spec(dav))
    created = await run(
        tools,
        "calendar_create_event",
        calendar="work",
        summary="Kick-off",
        start="2024-03-18T09:00:00Z",
        end="2024-03-18T10:00:00Z",
    )
    invite = {"calendar": "work", "uid": created.data["uid"], "attendees": ["ana@example.com"]}
    preflight = await run(tools, "calendar_send_invitation", **invite)
    assert preflight.success, preflight.error
    assert "PREFLIGHT — nothing has been done yet" in preflight.output
    assert "Invite ana@example.com to 2024-03-18T09:00:00+00:00" in preflight.output
    assert "does not advertise CalDAV scheduling" in preflight.output  # Radicale does not deliver
    assert "ATTENDEE" not in stored(dav)[0]

    token = preflight.data["confirmation_token"]
    sent = await run(tools, "calendar_send_invitation", **invite, confirmation_token=token)
    assert sent.success, sent.error
    (event,) = stored(dav)
    assert str(event["ATTENDEE"]) == "mailto:ana@example.com"
    assert event["ATTENDEE"].params["RSVP"] == "TRUE"
    assert str(event["ORGANIZER"]) == "mailto:alice@example.com"
    again = await run(tools, "calendar_send_invitation", **invite, confirmation_token=token)
    assert not again.success and "already used" in (again.error or "")

    # The event has attendees now: changing it would notify them, so the update is two-phase.
    move = {"calendar": "work", "uid": created.data["uid"], "summary": "Kick-off (moved)"}
    planned = await run(tools, "calendar_update_event", **move)
    assert planned.data["phase"] == "preflight" and "ana@example.com" in planned.output
    assert str(stored(dav)[0]["SUMMARY"]) == "Kick-off"
    done = await run(
        tools,
        "calendar_update_event",
        **move,
        confirmation_token=planned.data["confirmation_token"],
    )
    assert done.success, done.error
    assert str(stored(dav)[0]["SUMMARY"]) == "Kick-off (moved)"


async def test_invitation_refusals(dav: str, tmp_path: Path) -> None:
    tools = build(tmp_path, work=caldav_spec(dav), notes=IcsCalendar(path=tmp_path / "n.ics"))
    bad_address = await run(
        tools,
        "calendar_send_invitation",
        calendar="work",
        uid="x",
        attendees=["Ana <ana@example.com>"],
    )
    assert not bad_address.success and "plain address" in (bad_address.error or "")
    file_calendar = await run(
        tools, "calendar_send_invitation", calendar="notes", uid="x", attendees=["ana@example.com"]
    )
    assert not file_calendar.success and "cannot deliver invitations" in (file_calendar.error or "")
    unknown = await run(
        tools,
        "calendar_send_invitation",
        calendar="work",
        uid="nope",
        attendees=["ana@example.com"],
    )
    assert not unknown.success and unknown.data["error"] == "not_found"


async def test_read_only_calendar_refuses_writes(dav: str, tmp_path: Path) -> None:
    tools = build(tmp_path, work=caldav_spec(dav, access="read"))
    result = await run(
        tools,
        "calendar_create_event",
        calendar="work",
        summary="x",
        start="2024-03-15T12:00:00Z",
        end="2024-03-15T13:00:00Z",
    )
    assert not result.success and "read-only" in (result.error or "")
    assert stored(dav) == []


async def test_only_configured_calendars_are_offered(dav: str, tmp_path: Path) -> None:
    tools = build(tmp_path, work=caldav_spec(dav))
    schema = tools["calendar_list_events"].spec.parameters["properties"]["calendar"]
    assert schema.get("enum", [schema.get("const")]) == ["work"]
    with pytest.raises(ValueError):
        tools["calendar_list_events"].validate(
            {"calendar": "private", "start": "2024-03-15T00:00:00Z", "end": "2024-03-16T00:00:00Z"}
        )


async def test_wrong_password_is_an_auth_error_that_never_shows_it(
    dav: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAL_PASSWORD", "wrong-password-123")
    tools = build(tmp_path, work=caldav_spec(dav))
    result = await run(
        tools,
        "calendar_list_events",
        calendar="work",
        start="2024-03-15T00:00:00Z",
        end="2024-03-16T00:00:00Z",
    )
    assert not result.success and result.data["error"] == "auth"
    assert "wrong-password-123" not in f"{result.error}{result.output}{result.data}"
    monkeypatch.delenv("CAL_PASSWORD")
    missing = await run(
        tools,
        "calendar_list_events",
        calendar="work",
        start="2024-03-15T00:00:00Z",
        end="2024-03-16T00:00:00Z",
    )
    assert missing.data["error"] == "credentials" and "$CAL_PASSWORD" in (missing.error or "")


async def test_naive_times_are_refused(dav: str, tmp_path: Path) -> None:
    tools = build(tmp_path, work=caldav_spec(dav))
    result = await run(
        tools,
        "calendar_list_events",
        calendar="work",
        start="2024-03-15T00:00:00",
        end="2024-03-16T00:00:00Z",
    )
    assert not result.success and "UTC offset" in (result.error or "")


async def test_ics_file_create_update_and_recurrence(tmp_path: Path) -> None:
    path = tmp_path / "team.ics"
    path.write_text(RECURRING)
    tools = build(tmp_path, team=IcsCalendar(path=path))
    created = await run(
        tools,
        "calendar_create_event",
        calendar="team",
        summary="Retro",
        start="2024-03-13T08:00:00Z",
        end="2024-03-13T09:00:00Z",
    )
    assert created.success, created.error
    clash = await run(
        tools, "calendar_check_conflicts", start="2024-03-13T08:15:00Z", end="2024-03-13T08:45:00Z"
    )
    assert sorted(c["summary"] for c in clash.data["conflicts"]) == ["Retro", "Stand-up"]
    offsite = await run(
        tools, "calendar_check_conflicts", start="2024-03-20T12:00:00Z", end="2024-03-20T13:00:00Z"
    )
    assert offsite.data["free"] is True  # the all-day offsite is marked free (transparent)
    moved = await run(
        tools, "calendar_update_event", calendar="team", uid=created.data["uid"], location="Room 5"
    )
    assert moved.success, moved.error
    saved = icalendar.Calendar.from_ical(path.read_bytes())
    assert [c.name for c in saved.subcomponents].count("VTIMEZONE") == 1
    by_uid = {str(e["UID"]): e for e in saved.walk("VEVENT")}
    assert set(by_uid) == {"standup@test", "offsite@test", created.data["uid"]}
    assert str(by_uid[created.data["uid"]]["LOCATION"]) == "Room 5"
    assert "RRULE" in by_uid["standup@test"]


async def test_ics_garbage_is_a_bad_response(tmp_path: Path) -> None:
    path = tmp_path / "broken.ics"
    path.write_text("this is not a calendar")
    tools = build(tmp_path, broken=IcsCalendar(path=path))
    result = await run(
        tools,
        "calendar_list_events",
        calendar="broken",
        start="2024-03-15T00:00:00Z",
        end="2024-03-16T00:00:00Z",
    )
    assert not result.success and result.data["error"] == "bad_response"


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (Reply(status=429, body="slow down", headers={"Retry-After": "30"}), "rate_limited"),
        (
            Reply(status=207, body=b"<<<not xml", headers={"Content-Type": "text/xml"}),
            "bad_response",
        ),
    ],
)
async def test_caldav_rate_limit_and_garbage_are_structured(
    reply: Reply, kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = ApiServer().start()
    try:
        server.on("REPORT", "/alice/work/", reply)
        monkeypatch.setenv("CAL_USER", "alice")
        monkeypatch.setenv("CAL_PASSWORD", PASSWORD)
        tools = build(tmp_path, work=caldav_spec(server.base + "/alice/work/"))
        result = await run(
            tools,
            "calendar_list_events",
            calendar="work",
            start="2024-03-15T00:00:00Z",
            end="2024-03-16T00:00:00Z",
        )
    finally:
        server.stop()
    assert not result.success and result.data["error"] == kind
    if kind == "rate_limited":
        assert result.data["retry_after_s"] == 30 and "try again in 30 s" in (result.error or "")


async def test_unreachable_caldav_server_is_structured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAL_USER", "alice")
    monkeypatch.setenv("CAL_PASSWORD", PASSWORD)
    tools = build(tmp_path, work=caldav_spec(f"http://127.0.0.1:{closed_port()}/alice/work/"))
    result = await run(
        tools,
        "calendar_list_events",
        calendar="work",
        start="2024-03-15T00:00:00Z",
        end="2024-03-16T00:00:00Z",
    )
    assert not result.success and result.data == {"error": "unreachable", "calendar": "work"}


# -- check_calendar: the availability check `heron serve` triages invitations with ------------


@pytest.fixture
def check_calendar(tmp_path: Path) -> Tool:
    path = tmp_path / "me.ics"
    path.write_text(TRIAGE, encoding="utf-8")
    [check] = calendar_tools(CalendarConfig.from_files([path]), offer="availability")
    return check


async def check(t: Tool, **arguments: Any) -> ToolResult:
    return await t.execute(t.validate(arguments), CTX)


async def data(t: Tool, **arguments: Any) -> Any:
    result = await check(t, **arguments)
    assert result.success, result.error
    return result.data


async def test_a_slot_overlapping_an_event_in_another_zone_is_a_conflict(
    check_calendar: Tool,
) -> None:
    # Dentist 11:00-12:00 Paris is 10:00-11:00 UTC.
    answer = await data(check_calendar, start="2025-03-14T10:30:00Z", end="2025-03-14T11:30:00Z")
    assert answer["free"] is False
    assert [c["summary"] for c in answer["conflicts"]] == ["Dentist"]
    assert answer["conflicts"][0]["start"] == "2025-03-14T11:00:00+01:00"


async def test_recurring_events_block_each_occurrence_except_excluded_dates(
    check_calendar: Tool,
) -> None:
    week = await data(check_calendar, start="2025-03-11T00:00:00Z", end="2025-03-14T00:00:00Z")
    days = [c["start"][:10] for c in week["conflicts"]]
    assert days == ["2025-03-11", "2025-03-13"]  # the 12th is an EXDATE


async def test_free_transparent_and_cancelled_events_do_not_block(check_calendar: Tool) -> None:
    answer = await data(check_calendar, start="2025-03-14T13:00:00Z", end="2025-03-14T15:00:00Z")
    assert answer == {
        "start": "2025-03-14T13:00:00+00:00",
        "end": "2025-03-14T15:00:00+00:00",
        "free": True,
        "conflicts": [],
    }


async def test_an_all_day_event_blocks_the_whole_day(check_calendar: Tool) -> None:
    answer = await data(check_calendar, start="2025-03-20T15:00:00Z", end="2025-03-20T16:00:00Z")
    assert [c["summary"] for c in answer["conflicts"]] == ["Holiday"]


async def test_an_empty_or_reversed_slot_is_refused(check_calendar: Tool) -> None:
    result = await check(check_calendar, start="2025-03-14T11:00:00Z", end="2025-03-14T10:00:00Z")
    assert not result.success and "after" in (result.error or "")


async def test_check_calendar_reads_a_caldav_calendar_through_the_same_back_end(
    dav: str, tmp_path: Path
) -> None:
    with alice(dav) as client:
        client.calendar(url=dav).save_event(STANDUP)
    config = CalendarConfig(calendars={"work": caldav_spec(dav)}, policy=LOCAL)
    [check_calendar] = calendar_tools(config, offer="availability")
    # Stand-up Wednesday 09:30-09:45 Berlin is 08:30-08:45 UTC.
    answer = await data(check_calendar, start="2024-03-13T08:40:00Z", end="2024-03-13T09:00:00Z")
    assert [(c["calendar"], c["uid"]) for c in answer["conflicts"]] == [("work", "standup@test")]
    assert answer["conflicts"][0]["start"] == "2024-03-13T09:30:00+01:00"


OVERRIDDEN = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//test//test//EN
BEGIN:VEVENT
UID:daily@test
SUMMARY:Daily
DTSTART:20250310T090000Z
DTEND:20250310T093000Z
RRULE:FREQ=DAILY;COUNT=3
END:VEVENT
BEGIN:VEVENT
UID:daily@test
RECURRENCE-ID:20250311T090000Z
SUMMARY:Daily (moved)
DTSTART:20250311T150000Z
DTEND:20250311T153000Z
END:VEVENT
BEGIN:VEVENT
UID:floating@test
SUMMARY:Floating
DTSTART:20250312T100000
DTEND:20250312T110000
END:VEVENT
BEGIN:VEVENT
UID:no-start@test
SUMMARY:Broken, no DTSTART
END:VEVENT
END:VCALENDAR
"""


async def test_both_offers_expand_the_same_way(tmp_path: Path) -> None:
    path = tmp_path / "me.ics"
    path.write_text(OVERRIDDEN)
    paris = dt.timezone(dt.timedelta(hours=1))
    config = CalendarConfig(calendars={"me": IcsCalendar(path=path)}, default_tz=paris)
    [check_calendar] = calendar_tools(config, offer="availability")
    confirmations = Confirmations(IdempotencyStore(SqliteIdempotencyLedger(tmp_path / "state")))
    tools = {t.spec.name: t for t in calendar_tools(config, confirmations)}

    day = {"start": "2025-03-11T00:00:00Z", "end": "2025-03-12T00:00:00Z"}
    listed = await run(tools, "calendar_list_events", calendar="me", **day)
    assert listed.success, listed.error  # the event without DTSTART is left out, not an error
    assert [e["summary"] for e in listed.data["events"]] == ["Daily (moved)"]
    checked = await data(check_calendar, **day)
    assert [c["start"] for c in checked["conflicts"]] == ["2025-03-11T15:00:00+00:00"]

    # The floating 10:00 is read in the configured zone: 09:00-10:00 UTC.
    slot = {"start": "2025-03-12T09:30:00Z", "end": "2025-03-12T09:45:00Z"}
    clash = await run(tools, "calendar_check_conflicts", **slot)
    assert [c["uid"] for c in clash.data["conflicts"]] == ["floating@test"]
    checked = await data(check_calendar, **slot)
    assert [c["start"] for c in checked["conflicts"]] == ["2025-03-12T10:00:00+01:00"]
    later = {"start": "2025-03-12T10:30:00Z", "end": "2025-03-12T10:45:00Z"}
    assert (await data(check_calendar, **later))["free"] is True


def test_files_are_named_by_file_name_and_the_full_offer_needs_confirmations(
    tmp_path: Path,
) -> None:
    paths = [tmp_path / "a" / "me.ics", tmp_path / "b" / "me.ics", tmp_path / "work.ics"]
    config = CalendarConfig.from_files(paths)
    assert list(config.calendars) == ["me.ics", str(paths[1]), "work.ics"]
    assert {spec.access for spec in config.calendars.values()} == {"read"}
    with pytest.raises(ValueError, match="confirmations"):
        calendar_tools(config)


def test_the_availability_check_needs_neither_the_caldav_client_nor_a_full_import() -> None:
    script = (
        "import sys, pathlib\n"
        "from heron.connectors.calendar import CalendarConfig\n"
        "config = CalendarConfig.from_files([pathlib.Path('me.ics')])\n"
        "assert 'icalendar' not in sys.modules, 'building a configuration imports icalendar'\n"
        "from heron.connectors.calendar import calendar_tools\n"
        "calendar_tools(config, offer='availability')\n"
        "assert 'caldav' not in sys.modules, 'the availability check imports the CalDAV client'\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
