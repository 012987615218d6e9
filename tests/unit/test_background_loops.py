"""The triggers' background loops run in one task group owned by whoever starts them."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from heron._support.clock import FakeClock
from heron.always_on.background import BackgroundLoop, TaskScope
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.always_on.triggers.heartbeat import HeartbeatConfig
from heron.always_on.triggers.runtime import TriggerConfig, TriggerRuntime
from heron.always_on.triggers.sqlite_store import open_trigger_stores
from heron.safety.command_policy import CommandPolicy
from heron.sandbox import ProcessSandbox

BOUND = 5.0


class Loop:
    """A loop that runs until cancelled, counting its starts and how it ended."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.starts = 0
        self.ended: str | None = None

    async def __call__(self) -> None:
        self.starts += 1
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.ended = "cancelled"
            raise


async def test_closing_the_scope_cancels_every_loop_and_waits_for_them() -> None:
    scope = TaskScope()
    await scope.start()
    loops = [Loop(), Loop()]
    tasks = [scope.spawn(loop, name=f"loop {i}") for i, loop in enumerate(loops)]
    await asyncio.wait_for(asyncio.gather(*(loop.started.wait() for loop in loops)), BOUND)
    await scope.aclose()
    assert [loop.ended for loop in loops] == ["cancelled", "cancelled"]
    assert all(task.done() for task in tasks)
    assert not scope.running
    with pytest.raises(RuntimeError, match="not running"):
        scope.spawn(Loop(), name="late")


async def test_a_failing_loop_is_logged_and_its_siblings_keep_running(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken() -> None:
        raise OSError("disk gone")

    scope = TaskScope()
    await scope.start()
    sibling = Loop()
    scope.spawn(sibling, name="sibling")
    failed = scope.spawn(broken, name="broken")
    with caplog.at_level(logging.ERROR, logger="heron.always_on"):
        await asyncio.wait_for(asyncio.wait([failed]), BOUND)
    await asyncio.wait_for(sibling.started.wait(), BOUND)
    assert sibling.ended is None
    assert "background loop broken failed" in caplog.text and "disk gone" in caplog.text
    await scope.aclose()
    assert sibling.ended == "cancelled"


async def test_a_loop_alone_starts_once_and_stops_in_a_scope_of_its_own() -> None:
    loop = Loop()
    background = BackgroundLoop(loop, name="alone")
    await background.start()
    await background.start()
    await asyncio.wait_for(loop.started.wait(), BOUND)
    assert loop.starts == 1 and background.task is not None
    await background.stop()
    assert loop.ended == "cancelled" and background.task is None
    await background.stop()  # stopping twice is harmless


async def test_a_loop_in_a_shared_scope_stops_alone_and_leaves_the_scope_open() -> None:
    scope = TaskScope()
    await scope.start()
    one, two = Loop(), Loop()
    first = BackgroundLoop(one, name="one", scope=scope)
    second = BackgroundLoop(two, name="two", scope=scope)
    await first.start()
    await second.start()
    await asyncio.wait_for(asyncio.gather(one.started.wait(), two.started.wait()), BOUND)
    await first.stop()
    assert (one.ended, two.ended) == ("cancelled", None)
    assert scope.running
    await scope.aclose()
    assert two.ended == "cancelled"


async def test_the_trigger_runtime_owns_the_loops_of_every_trigger(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    bus = SqliteBusStore.open(tmp_path / "state")
    runtime = TriggerRuntime(
        state_dir=tmp_path / "state",
        stores=open_trigger_stores(tmp_path / "state"),
        bus=bus,
        workspace=workspace,
        sandbox=ProcessSandbox(),
        policy=CommandPolicy(workspace=workspace),
        clock=FakeClock(),
        config=TriggerConfig(heartbeat=HeartbeatConfig(every_s=60)),
    )
    try:
        await runtime.start()
        assert runtime.tasks.loops == ["heartbeat", "shell monitors", "system events", "timers"]
        await runtime.aclose()
        assert not runtime.tasks.running and runtime.tasks.loops == []
    finally:
        bus.close()
