"""Shell monitors: pattern filtering, coalescing, rate limits, final flush, restarts."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from heron import ToolContext, ToolResult
from heron._support.clock import FakeClock
from heron._support.state import open_db
from heron.always_on.bus.model import BusEvent
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.always_on.jobs.manager import JobConfig, JobManager
from heron.always_on.jobs.sqlite_store import SqliteJobStore
from heron.always_on.triggers.monitor import MAX_LINES, LineBatcher, ShellMonitors
from heron.always_on.triggers.sqlite_store import SqliteMonitorStore
from heron.always_on.triggers.tools import monitor_tools
from heron.safety.command_policy import CommandPolicy
from heron.sandbox import ProcessSandbox, ResourceLimits
from heron.tools.definition import Tool
from support.waiting import poll_until

BOUND = 10.0
FAST = ResourceLimits(kill_grace_s=0.3, max_processes=None)


# -- the batcher: coalescing and rate limiting on given times -----------------------------------


def test_lines_within_the_coalescing_window_become_one_batch() -> None:
    batcher = LineBatcher(pattern=None, coalesce_s=3.0, max_events_per_min=10)
    batcher.feed(["a"], 0, 2, now=100.0)
    batcher.feed(["b", "c"], 2, 6, now=101.0)
    assert batcher.take(102.9) is None
    batcher.feed(["d"], 6, 8, now=102.95)
    batch = batcher.take(103.0)
    assert batch is not None and batch.lines == ("a", "b", "c", "d")
    assert (batch.start, batch.end) == (0, 8)
    assert batcher.take(200.0) is None and batcher.safe_offset == 8


def test_only_lines_matching_the_pattern_are_kept_and_the_rest_is_skipped() -> None:
    batcher = LineBatcher(pattern=r"ERROR|FAIL", coalesce_s=0.0, max_events_per_min=10)
    batcher.feed(["ok 1", "ok 2"], 0, 10, now=0.0)
    assert batcher.take(0.0) is None and batcher.safe_offset == 10
    batcher.feed(["ERROR disk", "ok 3", "FAIL test_x"], 10, 40, now=1.0)
    batch = batcher.take(1.0)
    assert batch is not None and batch.lines == ("ERROR disk", "FAIL test_x")
    assert batch.start == 10


def test_a_flood_is_rate_limited_and_the_drops_are_reported_with_the_next_event() -> None:
    batcher = LineBatcher(pattern=None, coalesce_s=0.0, max_events_per_min=2)
    sent = []
    for second in range(5):
        batcher.feed([f"line {second}a", f"line {second}b"], second * 10, second * 10 + 10, second)
        sent.append(batcher.take(float(second)))
    assert [b is not None for b in sent] == [True, True, False, False, False]
    assert batcher.safe_offset == 50  # dropped lines are handled: a restart does not resend
    batcher.feed(["late"], 50, 55, now=59.5)
    assert batcher.take(59.5) is None  # the last minute still holds two sends (at 0 s and 1 s)
    batcher.feed(["later"], 55, 61, now=61.0)
    batch = batcher.take(61.0)
    assert batch is not None and batch.lines == ("later",)
    assert (batch.dropped_lines, batch.dropped_events) == (7, 4)


def test_the_final_flush_ignores_the_limit_and_reports_pending_drops() -> None:
    batcher = LineBatcher(pattern=None, coalesce_s=0.0, max_events_per_min=1)
    batcher.feed(["x"], 0, 2, now=0.0)
    assert batcher.take(0.0) is not None
    batcher.feed(["y"], 2, 4, now=1.0)
    assert batcher.take(1.0) is None
    final = batcher.take(2.0, final=True)
    assert final is not None and final.lines == () and final.dropped_lines == 1
    batcher.feed(["z"], 4, 6, now=3.0)
    final = batcher.take(3.0, final=True)
    assert final is not None and final.lines == ("z",) and final.dropped_lines == 0


# -- monitors on real jobs ---------------------------------------------------------------------


class Rig:
    def __init__(self, root: Path) -> None:
        self.workspace = root / "ws"
        self.workspace.mkdir()
        self.state = root / "state"
        self.bus = SqliteBusStore.open(self.state)
        self.clock = FakeClock()
        self.conns: list[sqlite3.Connection] = []
        self.running: list[tuple[JobManager, ShellMonitors]] = []

    async def open(self) -> tuple[JobManager, ShellMonitors]:
        conn = open_db(self.state)
        self.conns.append(conn)
        jobs = JobManager(
            SqliteJobStore(conn),
            state_dir=self.state,
            workspace=self.workspace,
            sandbox=ProcessSandbox(limits=FAST),
            policy=CommandPolicy(workspace=self.workspace),
            publish=self.bus.publish,
            session="main",
            config=JobConfig(poll_interval_s=0.05),
        )
        monitors = ShellMonitors(
            SqliteMonitorStore(conn), jobs, publish=self.bus.publish, clock=self.clock
        )
        await jobs.start()
        await monitors.start()
        self.running.append((jobs, monitors))
        return jobs, monitors

    async def close(self, pair: tuple[JobManager, ShellMonitors]) -> None:
        jobs, monitors = pair
        await monitors.aclose()
        await jobs.aclose()

    def fifo(self, name: str) -> Path:
        path = self.workspace / name
        os.mkfifo(path)
        return path

    async def events(self) -> list[BusEvent]:
        return await self.bus.pending("main")


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    rig = Rig(tmp_path)
    yield rig
    for jobs, monitors in rig.running:
        for job in jobs.jobs():
            if not job.finished:
                await jobs.cancel(job.id)
        await monitors.aclose()
        await jobs.aclose()
    for conn in rig.conns:
        conn.close()
    rig.bus.close()


async def release(fifo: Path) -> None:
    def write() -> None:
        with open(fifo, "w") as handle:
            handle.write("go\n")

    await asyncio.wait_for(asyncio.to_thread(write), BOUND)


async def receive(fifo: Path) -> str:
    return await asyncio.wait_for(asyncio.to_thread(fifo.read_text), BOUND)


async def run_tool(tool: Tool, **arguments: Any) -> ToolResult:
    return await tool.execute(tool.validate(arguments), ToolContext(call_id="c-mon", turn_id="t"))


async def test_matching_lines_are_coalesced_resumed_after_a_restart_and_flushed_before_exit(
    rig: Rig,
) -> None:
    start, ready, finish = rig.fifo("start"), rig.fifo("ready"), rig.fifo("finish")
    jobs, monitors = await rig.open()
    job = await jobs.start_job(
        "read x < start; echo 'compiling a'; echo 'ERROR one'; echo ok; echo 'ERROR two'; "
        "echo done > ready; read x < finish; echo 'ERROR three'; echo 'tail line'",
        call_id="c-job",
    )
    [monitor_tool] = monitor_tools(monitors)
    added = await run_tool(monitor_tool, job_id=job.id, pattern="ERROR", coalesce_s=5)
    assert added.success and added.data["from_offset"] == 0
    await release(start)
    await receive(ready)
    # The first four lines are written; with known secrets to mask, the supervisor copies them
    # to the log through a pipe, so they may land a moment after `ready`.
    record = jobs.get(job.id)
    assert record is not None
    await poll_until(
        lambda: "ERROR two" in record.output_path.read_text(errors="replace"), "the first lines"
    )

    await monitors.poll()
    assert await rig.events() == []  # the window is still open
    rig.clock.advance(5)
    await monitors.poll()
    [first] = await rig.events()
    assert first.kind == "job.output" and first.channel == "shell_monitor"
    assert first.content.text.splitlines()[1:] == ["ERROR one", "ERROR two"]
    assert first.context.call_id == "c-mon" and first.context.related_task == job.id

    # heron restarts: the new monitors resume from the stored offset.
    await rig.close(rig.running[0])
    jobs, monitors = await rig.open()
    await release(finish)
    await asyncio.wait_for(jobs.wait_finished(job.id), BOUND)
    events = await rig.events()
    assert [e.kind for e in events] == ["job.output", "job.output", "job.exit"]
    final = events[1]
    assert final.content.text.splitlines()[1:] == ["ERROR three"]
    assert final.content.data["final"] is True
    assert monitors.monitors() == []  # the monitor ended with its job


async def test_a_flood_is_quoted_in_part_and_points_at_the_rest(rig: Rig) -> None:
    start = rig.fifo("start")
    jobs, monitors = await rig.open()
    job = await jobs.start_job("read x < start; seq 1 5000")
    await monitors.add(job.id, coalesce_s=0)
    await release(start)
    await asyncio.wait_for(jobs.wait_finished(job.id), BOUND)
    output, _exit = await rig.events()
    lines = output.content.text.splitlines()
    assert lines[1:3] == ["1", "2"]
    assert output.content.data["lines"] == 5000
    assert output.content.data["omitted_lines"] == 5000 - MAX_LINES
    assert f"[{5000 - MAX_LINES} more lines not shown; job_output with offset=0" in lines[-1]


async def test_monitor_shell_refuses_unknown_jobs_bad_patterns_and_finished_jobs(
    rig: Rig,
) -> None:
    jobs, monitors = await rig.open()
    [monitor_tool] = monitor_tools(monitors)
    unknown = await run_tool(monitor_tool, job_id="job-nope")
    assert not unknown.success and "no job" in (unknown.error or "")
    rig.fifo("start")
    job = await jobs.start_job("read x < start")
    bad = await run_tool(monitor_tool, job_id=job.id, pattern="(unclosed")
    assert not bad.success and "invalid pattern" in (bad.error or "")
    await jobs.cancel(job.id)
    ended = await run_tool(monitor_tool, job_id=job.id)
    assert not ended.success and "already ended" in (ended.error or "")
