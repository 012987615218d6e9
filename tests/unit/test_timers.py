"""Durable timers on a fake clock: one-shot, interval, cron with time zones, misfire policies."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from heron import ToolContext, ToolResult
from heron._support.clock import FakeClock
from heron._support.state import open_db
from heron.always_on.bus.model import BusEvent
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.always_on.triggers.sqlite_store import SqliteTimerStore
from heron.always_on.triggers.timers import Misfire, TimerConfig, TimerError, TimerScheduler
from heron.always_on.triggers.tools import timer_tools
from heron.tools.definition import Tool
from support.waiting import until

START = datetime(2025, 3, 29, 12, 0, tzinfo=UTC).timestamp()  # a Saturday, before DST


class Rig:
    def __init__(self, root: Path) -> None:
        self.state = root / "state"
        self.bus = SqliteBusStore.open(self.state)
        self.clock = FakeClock(START)
        self.conns: list[sqlite3.Connection] = []
        self.schedulers: list[TimerScheduler] = []

    def scheduler(self, **config: Any) -> TimerScheduler:
        conn = open_db(self.state)
        self.conns.append(conn)
        scheduler = TimerScheduler(
            SqliteTimerStore(conn),
            publish=self.bus.publish,
            session="main",
            clock=self.clock,
            config=TimerConfig(**config),
        )
        self.schedulers.append(scheduler)
        return scheduler

    async def fired(self) -> list[BusEvent]:
        return [e for e in await self.bus.pending("main") if e.kind == "timer.trigger"]

    async def advance_and_fire(self, scheduler: TimerScheduler, seconds: float) -> int:
        self.clock.advance(seconds)
        return await scheduler.fire_due()


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    rig = Rig(tmp_path)
    yield rig
    for scheduler in rig.schedulers:
        await scheduler.aclose()
    for conn in rig.conns:
        conn.close()
    rig.bus.close()


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


async def test_a_one_shot_timer_fires_once_at_its_time_from_the_running_scheduler(
    rig: Rig,
) -> None:
    scheduler = rig.scheduler()
    await scheduler.start()
    timer = scheduler.add(message="check the deploy", after_s=60, call_id="c1")
    # The scheduler sleeps until exactly the timer's time.
    await until(lambda: rig.clock.next_deadline == START + 60)
    # Short of it, no sleep ends (the scheduler's is still the one due at START + 60), so
    # nothing can have fired: no number of event-loop turns would change that.
    assert rig.clock.advance(59.9) == 0 and rig.clock.next_deadline == START + 60
    assert await rig.fired() == []
    rig.clock.advance(0.1)
    await until(lambda: scheduler.timers() == [])
    [event] = await rig.fired()
    assert event.content.text == "check the deploy" and event.channel == "timer"
    assert event.content.data["timer_id"] == timer.id
    assert event.content.data["scheduled_for"] == "2025-03-29T12:01:00Z"
    assert event.content.data["late_s"] == 0.0
    rig.clock.advance(3600)
    assert await scheduler.fire_due() == 0
    done = scheduler.get(timer.id)
    assert done is not None and (done.state, done.fires) == ("done", 1)


async def test_at_takes_an_rfc3339_time_and_a_time_without_offset_needs_a_zone(
    rig: Rig,
) -> None:
    scheduler = rig.scheduler()
    utc = scheduler.add(message="a", at="2025-03-29T13:00:00Z")
    assert utc.next_fire == START + 3600
    berlin = scheduler.add(message="b", at="2025-03-29T14:00:00", tz="Europe/Berlin")
    assert berlin.next_fire == START + 3600  # 14:00 CET is 13:00 UTC
    with pytest.raises(TimerError, match="no UTC offset"):
        scheduler.add(message="c", at="2025-03-29T14:00:00")
    with pytest.raises(TimerError, match="in the past"):
        scheduler.add(message="d", at="2025-03-29T11:00:00Z")
    await rig.advance_and_fire(scheduler, 3600)
    assert sorted(e.content.text for e in await rig.fired()) == ["a", "b"]


async def test_an_interval_timer_fires_on_its_own_slots_and_never_drifts(rig: Rig) -> None:
    scheduler = rig.scheduler()
    scheduler.add(message="poll the queue", every_s=30)
    for _ in range(3):
        assert await rig.advance_and_fire(scheduler, 30.4) == 1  # each wake is a bit late
    slots = [e.content.data["scheduled_for"] for e in await rig.fired()]
    assert slots == [iso(START + 30), iso(START + 60), iso(START + 90)]
    [timer] = scheduler.timers()
    assert timer.next_fire == START + 120


async def test_a_cron_timer_follows_its_time_zone_across_daylight_saving(rig: Rig) -> None:
    scheduler = rig.scheduler()
    timer = scheduler.add(message="daily report", cron="0 9 * * *", tz="Europe/Berlin")
    # 09:00 in Berlin is 07:00 UTC from Sunday 30 March (summer time), 08:00 UTC before.
    assert timer.next_fire == datetime(2025, 3, 30, 7, 0, tzinfo=UTC).timestamp()
    assert timer.describe() == "cron '0 9 * * *' (Europe/Berlin)"
    assert await rig.advance_and_fire(scheduler, 19 * 3600) == 1
    assert await rig.advance_and_fire(scheduler, 24 * 3600) == 1
    slots = [e.content.data["scheduled_for"] for e in await rig.fired()]
    assert slots == ["2025-03-30T09:00:00+02:00", "2025-03-31T09:00:00+02:00"]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("fire_once", [("12:50", {"missed": 9})]),
        ("skip", []),
        (
            "catch_up",
            [
                ("12:35", {"catch_up": "1/4", "missed": 9, "left_out": 5}),
                ("12:40", {"catch_up": "2/4", "missed": 9}),
                ("12:45", {"catch_up": "3/4", "missed": 9}),
                ("12:50", {"catch_up": "4/4", "missed": 9}),
            ],
        ),
    ],
)
async def test_each_misfire_policy_after_downtime(
    rig: Rig, policy: Misfire, expected: list[tuple[str, dict[str, Any]]]
) -> None:
    before = rig.scheduler(max_catch_up=4, misfire_grace_s=60)
    timer = before.add(message="tick", every_s=300, misfire=policy)
    assert await rig.advance_and_fire(before, 300) == 1  # 12:05 fires on time
    await before.aclose()
    rig.clock.advance(48 * 60 + 30)  # heron is down until 12:53:30: 12:10 ... 12:50 missed

    after = rig.scheduler(max_catch_up=4, misfire_grace_s=60)
    await after.start()
    await until(lambda: rig.clock.sleepers == 1)
    notes = ("catch_up", "missed", "left_out")
    got = [
        (
            e.content.data["scheduled_for"][11:16],
            {k: e.content.data[k] for k in notes if k in e.content.data},
        )
        for e in (await rig.fired())[1:]
    ]
    assert got == expected
    stored = after.get(timer.id)
    assert stored is not None and stored.next_fire == START + 55 * 60  # the next future slot
    assert stored.missed == 9


async def test_a_missed_one_shot_timer_with_skip_ends_without_firing(rig: Rig) -> None:
    scheduler = rig.scheduler()
    skipped = scheduler.add(message="skip me", after_s=10, misfire="skip")
    once = scheduler.add(message="late but fired", after_s=10)
    assert await rig.advance_and_fire(scheduler, 3600) == 1
    [event] = await rig.fired()
    assert event.content.text.startswith("late but fired\n[fired late: 1 scheduled run")
    assert event.content.data["missed"] == 1
    for timer_id in (skipped.id, once.id):
        stored = scheduler.get(timer_id)
        assert stored is not None and stored.state == "done"


async def test_a_fire_repeated_after_a_crash_is_stored_once(rig: Rig) -> None:
    scheduler = rig.scheduler()
    timer = scheduler.add(message="once only", after_s=5)
    assert await rig.advance_and_fire(scheduler, 5) == 1
    # Crash between publishing and storing the next slot: the slot is due again on restart.
    with rig.conns[0]:
        rig.conns[0].execute(
            "UPDATE timers SET state = 'active', next_fire = ? WHERE id = ?",
            (START + 5, timer.id),
        )
    assert await rig.scheduler().fire_due() == 1
    assert len(await rig.fired()) == 1


async def run_tool(tool: Tool, **arguments: Any) -> ToolResult:
    return await tool.execute(tool.validate(arguments), ToolContext(call_id="c-t", turn_id="t"))


async def test_timer_tools_set_list_and_cancel_and_explain_bad_schedules(rig: Rig) -> None:
    scheduler = rig.scheduler()
    set_timer, cancel_timer, list_timers = timer_tools(scheduler)
    made = await run_tool(set_timer, message="stand up", cron="30 9 * * 1-5", tz="Europe/Berlin")
    assert made.success and made.data["next_fire"] == "2025-03-31T09:30:00+02:00"
    other = await run_tool(set_timer, message="tea", after_s=300)
    listed = await run_tool(list_timers)
    assert [t["message"] for t in listed.data["timers"]] == ["tea", "stand up"]
    cancelled = await run_tool(cancel_timer, timer_id=other.data["timer_id"])
    assert cancelled.success and cancelled.data["state"] == "cancelled"
    assert await rig.advance_and_fire(scheduler, 600) == 0

    for arguments, problem in [
        ({"message": "x", "at": "2025-03-29T13:00:00Z", "after_s": 5}, "not both"),
        ({"message": "x", "cron": "every day"}, "invalid cron expression"),
        ({"message": "x", "cron": "0 9 * * *", "tz": "Mars/Olympus"}, "unknown time zone"),
        ({"message": "x", "every_s": 0.1}, "at least 1"),
        ({"message": "x"}, "give one of"),
        ({"message": " ", "after_s": 5}, "is empty"),
    ]:
        result = await run_tool(set_timer, **arguments)
        assert not result.success and problem in (result.error or ""), (arguments, result)
    missing = await run_tool(cancel_timer, timer_id="tmr-nope")
    assert not missing.success
