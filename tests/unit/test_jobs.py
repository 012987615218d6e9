"""Detached background jobs: real supervisors and commands, real SQLite, real restarts."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from heron import Agent, ScriptedModel, ToolContext, ToolResult
from heron._support.clock import FakeClock
from heron._support.state import open_db
from heron.always_on.bus.model import BusEvent
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.always_on.jobs import supervisor as sup
from heron.always_on.jobs.manager import JobConfig, JobManager
from heron.always_on.jobs.sqlite_store import SqliteJobStore
from heron.always_on.jobs.store import JobRecord
from heron.always_on.jobs.tools import job_tools
from heron.always_on.triggers.runtime import TriggerConfig, TriggerRuntime
from heron.always_on.triggers.sqlite_store import open_trigger_stores
from heron.messages import ToolResultMessage
from heron.safety.command_policy import CommandPolicy
from heron.sandbox import BwrapSandbox, ProcessSandbox, ResourceLimits, Sandbox
from heron.tools.definition import Tool
from support.engine import Events, call, calls_turn

BOUND = 10.0  # seconds; an upper bound for waits that normally take milliseconds
# No process-count limit here: without a writable pids cgroup it would run jobs as `nobody`,
# who cannot enter pytest's temporary directories. The cgroup test below sets one.
FAST = ResourceLimits(kill_grace_s=0.3, max_processes=None)


class Rig:
    """A workspace, a bus and JobManagers on one state directory (several, for restarts)."""

    def __init__(self, root: Path) -> None:
        self.workspace = root / "ws"
        self.workspace.mkdir()
        self.state = root / "state"
        self.bus = SqliteBusStore.open(self.state)
        self.conns: list[sqlite3.Connection] = []
        self.managers: list[JobManager] = []

    def manager(
        self, sandbox: Sandbox | None = None, clock: FakeClock | None = None, **config: Any
    ) -> JobManager:
        conn = open_db(self.state)
        self.conns.append(conn)
        manager = JobManager(
            SqliteJobStore(conn),
            state_dir=self.state,
            workspace=self.workspace,
            sandbox=sandbox or ProcessSandbox(limits=FAST),
            policy=CommandPolicy(workspace=self.workspace),
            publish=self.bus.publish,
            session="main",
            clock=clock,
            config=JobConfig(poll_interval_s=0.05, **config),
        )
        self.managers.append(manager)
        return manager

    async def restart(self, old: JobManager, **config: Any) -> JobManager:
        """Drop `old` and everything asyncio it held; a new manager re-attaches."""
        await old.aclose()
        new = self.manager(**config)
        await new.start()
        return new

    def gate(self, name: str = "gate") -> Path:
        path = self.workspace / name
        os.mkfifo(path)
        return path

    async def events(self, kind: str | None = None) -> list[BusEvent]:
        pending = await self.bus.pending("main")
        return [e for e in pending if kind is None or e.kind == kind]


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    rig = Rig(tmp_path)
    yield rig
    for manager in rig.managers:
        for job in manager.jobs():
            if not job.finished:
                await manager.cancel(job.id)
        await manager.aclose()
    for conn in rig.conns:
        conn.close()
    rig.bus.close()


async def release(gate: Path, text: str = "go") -> None:
    """Write to a FIFO the job reads (opening blocks until the job has opened it too)."""

    def write() -> None:
        with open(gate, "w") as fifo:
            fifo.write(text + "\n")

    await asyncio.wait_for(asyncio.to_thread(write), BOUND)


async def receive(fifo: Path) -> str:
    """Read what the job writes to a FIFO: returns once it has written it."""
    return await asyncio.wait_for(asyncio.to_thread(fifo.read_text), BOUND)


def stat_fields(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()


async def gone(pid: int | None, ticks: int | None, boot: str = "") -> bool:
    return await sup.wait_gone(pid, ticks, boot or sup.boot_id(), BOUND)


def is_dir(path: str) -> bool:
    return os.path.isdir(path)


def record(manager: JobManager, job_id: str) -> JobRecord:
    job = manager.get(job_id)
    assert job is not None
    return job


def tool_named(tools: list[Tool], name: str) -> Tool:
    return next(t for t in tools if t.spec.name == name)


async def run_tool(tool: Tool, call_id: str = "c1", **arguments: Any) -> ToolResult:
    return await tool.execute(tool.validate(arguments), ToolContext(call_id=call_id, turn_id="t1"))


# -- start, status, output ---------------------------------------------------------------------


async def test_a_job_runs_detached_and_its_end_arrives_as_one_event_bound_to_call_and_job(
    rig: Rig,
) -> None:
    gate = rig.gate()
    manager = rig.manager()
    await manager.start()
    job = await manager.start_job(
        "echo hello; echo oops >&2; read x < gate; exit 3", call_id="call-7"
    )
    assert job.state == "working" and await rig.events() == []
    # Detached: the supervisor is not heron's child and leads its own session; the command
    # leads another one (its process group is what cancel and timeouts signal).
    assert job.supervisor_pid is not None and job.child_pid is not None
    supervisor = stat_fields(job.supervisor_pid)
    assert int(supervisor[1]) != os.getpid()  # parent
    assert int(supervisor[3]) == job.supervisor_pid  # session id
    assert int(stat_fields(job.child_pid)[3]) == job.child_pid

    await release(gate)
    done = await asyncio.wait_for(manager.wait_finished(job.id), BOUND)
    assert (done.state, done.exit_code, done.reported) == ("failed", 3, True)
    [event] = await rig.events()
    assert event.kind == "job.exit" and event.channel == "async_tool"
    assert event.context.call_id == "call-7" and event.context.related_task == job.id
    assert event.content.data["state"] == "failed" and event.content.data["exit_code"] == 3
    assert "failed: exit code 3" in event.content.text
    assert "hello" in event.content.text and "oops" in event.content.text


async def test_status_and_output_tools_report_a_running_and_a_finished_job(rig: Rig) -> None:
    gate = rig.gate()
    manager = rig.manager()
    await manager.start()
    tools = job_tools(manager)
    started = await run_tool(
        tool_named(tools, "start_job"), call_id="c-start", command="seq 1 2000; read x < gate"
    )
    assert started.success and started.data["state"] == "working"
    job_id = started.data["task_id"]
    status = await run_tool(tool_named(tools, "job_status"), job_id=job_id)
    assert status.success and status.data["state"] == "working"

    await release(gate)
    await asyncio.wait_for(manager.wait_finished(job_id), BOUND)
    status = await run_tool(tool_named(tools, "job_status"), job_id=job_id)
    assert status.data["state"] == "completed" and status.data["exit_code"] == 0
    assert status.data["last_lines"][-1] == "2000"

    output = tool_named(tools, "job_output")
    first = await run_tool(output, job_id=job_id, offset=0, limit=21)
    assert first.output.splitlines()[1:] == [str(n) for n in range(1, 11)]
    assert first.data["next_offset"] == 21 and first.data["more"] is True
    second = await run_tool(output, job_id=job_id, offset=21, limit=6)
    assert second.output.splitlines()[1:] == ["11", "12"]
    newest = await run_tool(output, job_id=job_id, limit=10)
    assert newest.output.splitlines()[-1] == "2000" and newest.data["more"] is False

    listed = await run_tool(tool_named(tools, "list_jobs"))
    assert [j["job_id"] for j in listed.data["jobs"]] == [job_id]
    missing = await run_tool(tool_named(tools, "job_status"), job_id="job-nope")
    assert not missing.success and "list_jobs" in (missing.error or "")


async def test_start_job_returns_at_once_through_the_agent_loop(rig: Rig, events: Events) -> None:
    gate = rig.gate()
    manager = rig.manager()
    await manager.start()
    model = ScriptedModel(
        [
            calls_turn(call("start_job", "c_job", command="read x < gate")),
            {"text": "Started.", "expect": {"last_message_contains": "state: working"}},
        ]
    )
    agent = Agent(model=model, tools=job_tools(manager), autonomy="full")
    result = await asyncio.wait_for(agent.run("run it", sink=events), BOUND)
    assert result.text == "Started."
    [tool_result] = [m for m in result.history if isinstance(m, ToolResultMessage)]
    [job] = manager.jobs()
    assert job.id in tool_result.content and job.state == "working"
    assert job.call_id == "c_job"
    await release(gate)
    await asyncio.wait_for(manager.wait_finished(job.id), BOUND)
    [exit_event] = await rig.events("job.exit")
    assert exit_event.context.call_id == "c_job"


async def test_the_command_policy_applies_as_for_shell(rig: Rig) -> None:
    manager = rig.manager()
    start = tool_named(job_tools(manager), "start_job")
    refused = await run_tool(start, command="sudo rm -rf /")
    assert not refused.success and "refused by the command policy" in (refused.error or "")
    held = await run_tool(start, command="curl -s http://127.0.0.1:9/")
    assert not held.success and "needs approval" in (held.error or "")
    assert manager.jobs() == []  # nothing was started or recorded
    outside = await run_tool(start, command="true", cwd="../..")
    assert not outside.success and "outside the workspace" in (outside.error or "")
    approved = await run_tool(start, command="curl --version >/dev/null", approved=True)
    assert approved.success


# -- cancel ------------------------------------------------------------------------------------


async def test_cancel_stops_the_whole_process_group_including_children(rig: Rig) -> None:
    ready = rig.gate("ready")
    manager = rig.manager()
    await manager.start()
    job = await manager.start_job("sleep 300 & echo $! > ready; wait", call_id="c1")
    grandchild = int(await receive(ready))
    ticks = sup.start_ticks(grandchild)
    assert ticks is not None
    result = await run_tool(tool_named(job_tools(manager), "cancel_job"), job_id=job.id)
    assert result.success and result.data["state"] == "cancelled"
    assert result.data["signal"] == signal.SIGTERM
    assert await gone(grandchild, ticks)
    [event] = await rig.events()
    assert event.kind == "job.exit" and event.content.data["state"] == "cancelled"
    again = await run_tool(tool_named(job_tools(manager), "cancel_job"), job_id=job.id)
    assert again.success and "already ended: cancelled" in again.output


async def test_a_child_that_escaped_into_its_own_session_dies_with_the_job_cgroup(
    rig: Rig,
) -> None:
    sandbox = ProcessSandbox(limits=ResourceLimits(kill_grace_s=0.3, max_processes=64))
    if sandbox.pids_limit not in ("cgroup-v2", "cgroup-v1"):
        pytest.skip(f"needs a writable pids cgroup; this host binds with {sandbox.pids_limit}")
    ready = rig.gate("ready")
    manager = rig.manager(sandbox=sandbox)
    await manager.start()
    job = await manager.start_job("setsid sleep 300 & echo $! > ready; wait")
    assert job.cgroup is not None and is_dir(job.cgroup)
    escaped = int(await receive(ready))
    ticks = sup.start_ticks(escaped)
    assert ticks is not None and int(stat_fields(escaped)[3]) != job.child_pid
    done = await manager.cancel(job.id)
    assert done.state == "cancelled"
    assert await gone(escaped, ticks)
    assert not is_dir(job.cgroup)


# -- restarts ----------------------------------------------------------------------------------


async def test_a_job_survives_a_restart_and_its_exit_is_published_exactly_once(
    rig: Rig,
) -> None:
    gate = rig.gate()
    first = rig.manager()
    await first.start()
    job = await first.start_job("read x < gate; echo finished", call_id="c1")
    second = await rig.restart(first)
    assert record(second, job.id).state == "working"
    assert await rig.events() == []

    await release(gate)
    done = await asyncio.wait_for(second.wait_finished(job.id), BOUND)
    assert done.state == "completed"
    third = await rig.restart(second)
    # A crash between publishing and marking it reported: the next start publishes again,
    # and the bus keeps one copy.
    third.store.update(job.id, reported=False)
    fourth = await rig.restart(third)
    assert record(fourth, job.id).reported
    [event] = await rig.events()
    assert event.kind == "job.exit" and "finished" in event.content.text


async def test_a_job_that_ended_while_heron_was_down_is_reconciled_on_start(rig: Rig) -> None:
    gate = rig.gate()
    first = rig.manager()
    job = await first.start_job("read x < gate; exit 4", call_id="c1")
    await first.aclose()
    await release(gate)
    assert await gone(job.supervisor_pid, job.supervisor_start, job.boot_id)
    assert await rig.events() == []

    second = rig.manager()
    await second.start()
    assert record(second, job.id).state == "failed"
    [event] = await rig.events()
    assert event.kind == "job.exit" and event.content.data["exit_code"] == 4


async def test_a_killed_supervisor_makes_the_job_lost_and_its_command_is_killed(
    rig: Rig,
) -> None:
    rig.gate()
    manager = rig.manager()
    await manager.start()
    job = await manager.start_job("read x < gate", call_id="c1")
    assert job.supervisor_pid is not None
    os.kill(job.supervisor_pid, signal.SIGKILL)
    lost = await asyncio.wait_for(manager.wait_finished(job.id), BOUND)
    assert lost.state == "lost"
    assert await gone(job.child_pid, job.child_start, job.boot_id)
    [event] = await rig.events()
    assert event.kind == "job.lost" and event.context.related_task == job.id
    assert "cannot tell whether or how it finished" in event.content.text


def test_a_recycled_pid_is_not_mistaken_for_the_recorded_process() -> None:
    me, ticks, boot = os.getpid(), sup.start_ticks(os.getpid()), sup.boot_id()
    assert ticks is not None and sup.alive(me, ticks, boot)
    assert not sup.alive(me, ticks + 1, boot)  # same pid, another process
    assert not sup.alive(me, ticks, "another-boot")
    assert not sup.alive(None, None, boot)


# -- deadlines ---------------------------------------------------------------------------------


async def test_a_job_past_its_deadline_gets_one_timeout_event_and_is_stopped(rig: Rig) -> None:
    rig.gate()
    manager = rig.manager()
    await manager.start()
    job = await manager.start_job("read x < gate", timeout_s=0.2, call_id="c1")
    done = await asyncio.wait_for(manager.wait_finished(job.id), BOUND)
    assert done.state == "failed" and done.timed_out and done.signal == signal.SIGTERM
    kinds = [e.kind for e in await rig.events()]
    assert kinds == ["system.process_timeout", "job.exit"]
    timeout, end = await rig.events()
    assert timeout.source == "system" and timeout.content.data["action"] == "kill"
    assert "after passing its 0.2 s deadline" in end.content.text


async def test_a_notify_only_deadline_reports_once_and_lets_the_job_finish(rig: Rig) -> None:
    gate = rig.gate()
    clock = FakeClock()
    manager = rig.manager(clock=clock, on_timeout="notify")
    await manager.start()
    job = await manager.start_job("read x < gate; echo done", timeout_s=60, call_id="c1")
    for _ in range(3):  # well past the deadline, several checks
        clock.advance(60)
        await manager.poll()
    [timeout] = await rig.events()
    assert timeout.kind == "system.process_timeout"
    assert timeout.content.data["action"] == "notify"
    await release(gate)
    done = await asyncio.wait_for(manager.wait_finished(job.id), BOUND)
    assert done.state == "completed" and done.timed_out
    assert [e.kind for e in await rig.events()] == ["system.process_timeout", "job.exit"]


# -- sandbox -----------------------------------------------------------------------------------


async def test_a_job_in_the_bwrap_sandbox_has_no_network_and_writes_only_the_workspace(
    rig: Rig,
) -> None:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap (`bwrap`) is required for this test")
    sandbox = BwrapSandbox(workspace=rig.workspace, limits=FAST)
    manager = rig.manager(sandbox=sandbox)
    await manager.start()
    job = await manager.start_job(
        "echo inside > made.txt; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; "
        'python3 -c \'open("/usr/escape", "w")\' 2>/dev/null || echo usr-read-only',
        approved=True,  # an interpreter is medium risk
    )
    done = await asyncio.wait_for(manager.wait_finished(job.id), BOUND)
    assert done.state == "completed"
    assert (rig.workspace / "made.txt").read_text() == "inside\n"
    [event] = await rig.events()
    assert event.content.text.splitlines()[-2:] == ["lo", "usr-read-only"]


# -- the runtime `heron serve` starts ----------------------------------------------------------


async def test_the_trigger_runtime_offers_every_tool_and_reattaches_jobs_after_a_restart(
    rig: Rig,
) -> None:
    gate = rig.gate()
    config = TriggerConfig(jobs=JobConfig(poll_interval_s=0.05), monitor_poll_s=0.05)

    def runtime() -> TriggerRuntime:
        return TriggerRuntime(
            state_dir=rig.state,
            stores=open_trigger_stores(rig.state),
            bus=rig.bus,
            workspace=rig.workspace,
            sandbox=ProcessSandbox(limits=FAST),
            policy=CommandPolicy(workspace=rig.workspace),
            session="main",
            config=config,
        )

    first = runtime()
    assert sorted(t.spec.name for t in first.tools) == sorted(
        [
            "start_job", "job_status", "job_output", "cancel_job", "list_jobs",
            "monitor_shell", "set_timer", "cancel_timer", "list_timers",
            "subscribe", "unsubscribe", "list_subscriptions",
        ]
    )  # fmt: skip
    await first.start()
    started = await run_tool(
        tool_named(first.tools, "start_job"), call_id="c9", command="read x < gate; echo out"
    )
    job_id = started.data["job_id"]
    await first.aclose()  # heron stops; the job keeps running

    second = runtime()
    await second.start()
    try:
        assert record(second.jobs, job_id).state == "working"
        await release(gate)
        done = await asyncio.wait_for(second.jobs.wait_finished(job_id), BOUND)
        assert done.state == "completed"
    finally:
        await second.aclose()
    [event] = await rig.events()
    assert event.kind == "job.exit" and event.context.call_id == "c9"
