"""System events (user_inactive, resource_alert), the heartbeat and its silent all-clear, and
lifecycle hooks — on fake clocks, with a real bus and real agent turns."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, time
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from heron import ScriptedModel
from heron._support.clock import FakeClock, timestamp
from heron.always_on.bus.loop import EventDrivenAgent
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.always_on.hooks import HookedAgent, LifecycleHooks
from heron.always_on.triggers.heartbeat import (
    ActiveHours,
    AllClearFilter,
    Heartbeat,
    HeartbeatConfig,
    is_all_clear,
)
from heron.always_on.triggers.system import (
    SystemEventConfig,
    SystemEvents,
    Usage,
    disk_usage,
    memory_usage,
)
from heron.messages import AssistantMessage
from heron.turn.context import TurnState
from heron.turn.outcome import TurnOutcome
from support.engine import Events
from support.waiting import until

JANUARY = datetime(2025, 1, 15, 6, 0, tzinfo=UTC).timestamp()  # 07:00 in Berlin


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[SqliteBusStore]:
    store = SqliteBusStore.open(tmp_path / "state")
    yield store
    store.close()


def user_input(clock: FakeClock, text: str = "hi") -> BusEvent:
    return BusEvent(
        kind="user.input", source="user", channel="cli", session="main",
        content=EventContent(text=text), timestamp=timestamp(clock),
    )  # fmt: skip


# -- user_inactive -----------------------------------------------------------------------------


async def test_user_inactive_fires_once_per_quiet_period_and_user_input_rearms_it(
    bus: SqliteBusStore,
) -> None:
    clock = FakeClock(JANUARY)
    system = SystemEvents(
        SystemEventConfig(user_inactive_after_s=600, memory=False),
        publish=bus.publish,
        session="main",
        clock=clock,
    )
    unwatch = bus.watch(system.observe)
    clock.advance(599)
    assert await system.check() == []
    clock.advance(1)
    [first] = await system.check()
    assert first.kind == "system.user_inactive" and first.content.data["idle_s"] == 600
    assert first.content.text == "the user has not written for 10 minutes"
    clock.advance(3600)
    assert await system.check() == []  # still the same quiet period

    await bus.publish(user_input(clock))  # seen through the bus watch
    clock.advance(300)
    assert await system.check() == []
    clock.advance(300)
    [second] = await system.check()
    assert second.kind == "system.user_inactive"
    other_session = user_input(clock).model_copy(update={"session": "elsewhere"})
    system.observe(other_session)
    clock.advance(600)
    assert await system.check() == []  # input in another session does not re-arm this one
    unwatch()
    kinds = [e.kind for e in await bus.pending("main")]
    assert kinds == ["system.user_inactive", "user.input", "system.user_inactive"]


# -- resource_alert ----------------------------------------------------------------------------


async def test_a_disk_alert_has_hysteresis_and_repeats_only_after_recovering(
    bus: SqliteBusStore, tmp_path: Path
) -> None:
    readings = iter([0.50, 0.91, 0.95, 0.88, 0.92, 0.84, 0.90])
    seen: list[Path] = []

    def probe(path: Path) -> Usage:
        seen.append(path)
        return Usage(used=int(next(readings) * 1000), total=1000)

    system = SystemEvents(
        SystemEventConfig(
            user_inactive_after_s=None, memory=False, disk_paths=(tmp_path,),
            disk_high=0.90, disk_low=0.85,
        ),
        publish=bus.publish,
        session="main",
        clock=FakeClock(JANUARY),
        disk_probe=probe,
    )  # fmt: skip
    alerts = [len(await system.check()) for _ in range(7)]
    assert alerts == [0, 1, 0, 0, 0, 0, 1]
    assert seen == [tmp_path] * 7
    first, second = await bus.pending("main")
    assert first.kind == "system.resource_alert"
    assert first.content.data == {
        "resource": "disk",
        "path": str(tmp_path),
        "used_fraction": 0.91,
        "used_bytes": 910,
        "total_bytes": 1000,
        "threshold": 0.9,
    }
    assert first.content.text.startswith(f"disk holding {tmp_path} is 91% full")
    assert second.content.data["used_fraction"] == 0.90


async def test_memory_is_read_from_meminfo_and_alerts_past_its_threshold(
    bus: SqliteBusStore, tmp_path: Path
) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       1000000 kB\nMemFree:  10 kB\nMemAvailable:     40000 kB\n")
    usage = memory_usage(meminfo)
    assert usage == Usage(used=960000 * 1024, total=1000000 * 1024)
    system = SystemEvents(
        SystemEventConfig(user_inactive_after_s=None, memory_high=0.95, memory_low=0.9),
        publish=bus.publish,
        clock=FakeClock(JANUARY),
        memory_probe=lambda: memory_usage(meminfo),
    )
    [alert] = await system.check()
    assert alert.content.data["resource"] == "memory"
    assert alert.content.text.startswith("memory is 96% full")
    assert memory_usage(tmp_path / "missing") is None
    real = disk_usage(tmp_path)
    assert 0 < real.used <= real.total


# -- heartbeat ---------------------------------------------------------------------------------


def test_active_hours_are_read_in_their_zone_and_may_wrap_midnight() -> None:
    day = ActiveHours(start=time(9), end=time(17), tz="Europe/Berlin")
    at = lambda h, m=0: datetime(2025, 1, 15, h, m, tzinfo=ZoneInfo("Europe/Berlin")).timestamp()  # noqa: E731
    assert [day.contains(at(h)) for h in (8, 9, 16, 17)] == [False, True, True, False]
    night = ActiveHours(start=time(22), end=time(6), tz="Europe/Berlin")
    assert [night.contains(at(h)) for h in (21, 22, 2, 6)] == [False, True, True, False]


async def test_the_heartbeat_beats_every_interval_only_within_active_hours(
    bus: SqliteBusStore,
) -> None:
    clock = FakeClock(JANUARY)
    heartbeat = Heartbeat(
        HeartbeatConfig(
            every_s=1800, active_hours=ActiveHours(start=time(9), end=time(17), tz="Europe/Berlin")
        ),
        publish=bus.publish,
        session="main",
        clock=clock,
    )
    await heartbeat.start()
    for _ in range(48):  # one day in half-hour steps
        await until(lambda: clock.sleepers == 1)
        clock.advance(1800)
    await until(lambda: clock.sleepers == 1)
    await heartbeat.aclose()
    beats = await bus.pending("main")
    berlin = [
        datetime.fromisoformat(e.timestamp).astimezone(ZoneInfo("Europe/Berlin")).strftime("%H:%M")
        for e in beats
    ]
    assert berlin == [f"{h:02d}:{m:02d}" for h in range(9, 17) for m in (0, 30)]
    assert {e.kind for e in beats} == {"system.heartbeat"} and heartbeat.beats == 16
    assert "HEARTBEAT_OK" in beats[0].content.text and beats[0].urgency == "low"


def test_an_all_clear_reply_is_the_token_with_little_else() -> None:
    assert is_all_clear("HEARTBEAT_OK")
    assert is_all_clear("  **HEARTBEAT_OK**.\n")
    assert is_all_clear("All quiet. HEARTBEAT_OK")
    assert not is_all_clear("HEARTBEAT_OK but the nightly build failed twice, see the log")
    assert not is_all_clear("The build failed.")
    assert not is_all_clear("")


async def test_a_heartbeat_wakes_the_agent_and_its_all_clear_is_not_shown(
    bus: SqliteBusStore, events: Events
) -> None:
    clock = FakeClock(JANUARY)
    model = ScriptedModel(
        [
            {"text": "HEARTBEAT_OK", "expect": {"last_message_contains": "reply with exactly"}},
            {"text": "Hello! Nothing new.", "expect": {"last_message_contains": "hi"}},
        ]
    )
    hooks = LifecycleHooks()
    agent = HookedAgent(hooks=hooks, model=model, autonomy="full")
    shown = AllClearFilter(events)
    eda = EventDrivenAgent(agent, bus, bus.sessions, session="main", clock=clock, sink=shown)
    heartbeat = Heartbeat(HeartbeatConfig(every_s=600), publish=bus.publish, session="main",
                          clock=clock)  # fmt: skip
    await heartbeat.start()
    await until(lambda: clock.sleepers == 1)
    clock.advance(600)
    await until(lambda: heartbeat.beats == 1)
    await heartbeat.aclose()
    await eda.run_until_idle()
    assert events.of("final") == [] and events.of("text_delta") == []
    assert shown.dropped == 1
    assert eda.history[-1] == AssistantMessage(text="HEARTBEAT_OK")  # kept, just not shown

    await eda.publish(user_input(clock))
    await eda.run_until_idle()
    [final] = events.of("final")
    assert final.text == "Hello! Nothing new."
    assert "".join(e.text for e in events.of("text_delta")) == "Hello! Nothing new."


async def test_lifecycle_hooks_run_around_turns_and_a_failing_hook_is_skipped(
    bus: SqliteBusStore,
) -> None:
    calls: list[str] = []
    hooks = LifecycleHooks()

    async def on_start() -> None:
        calls.append("start")

    async def broken(_state: TurnState) -> None:
        raise RuntimeError("hook bug")

    async def before(state: TurnState) -> None:
        calls.append(f"before:{len(state.history)}")

    async def after(_state: TurnState, outcome: TurnOutcome) -> None:
        calls.append(f"after:{outcome.status}:{outcome.text}")

    async def on_stop() -> None:
        calls.append("stop")

    hooks.on_start.append(on_start)
    hooks.before_turn += [broken, before]
    hooks.after_turn.append(after)
    hooks.on_stop.append(on_stop)
    agent = HookedAgent(hooks=hooks, model=ScriptedModel([{"text": "done"}]), autonomy="full")
    await hooks.started()
    result = await agent.run("go")
    await hooks.stopped()
    assert result.text == "done"
    assert calls == ["start", "before:1", "after:final:done", "stop"]
