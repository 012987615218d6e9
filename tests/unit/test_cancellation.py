"""Cancellation, timeouts and broken extensions at the public API (`heron.Agent`).

- A plain asyncio cancellation (`task.cancel()`, `asyncio.wait_for`, `asyncio.timeout`, a
  failing `TaskGroup` sibling) closes a turn exactly like `CancelScope.cancel()`: every call
  answered, one card pair per call, a history real providers accept, and the `CancelledError`
  (or `TimeoutError`) still reaches the caller.
- A timed-out or interrupted sync tool is reported truthfully: stopped, killed (a worker
  process), or still running (a thread heron cannot stop), and a non-idempotent threaded tool
  is not started again while its earlier run is alive.
- An observer, a hook or an event sink that raises is reported (`extension_error` + a log
  record) and the turn goes on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import AsyncIterator
from enum import Enum
from pathlib import Path
from typing import Any

import cancellation_tools
import pytest

from heron import (
    Agent,
    CancelScope,
    RuntimeKnobs,
    ScriptedModel,
    ToolContext,
    ToolDefinitionError,
    TurnState,
    tool,
)
from heron.messages import AssistantMessage, Message, ToolResultMessage, UserMessage
from heron.models.base import ModelRequest, TextDelta
from heron.models.history_rules import HistoryChecker
from heron.sessions.session import CliSession
from heron.turn.cancel import TASK_CANCELLED
from heron.turn.hooks import Cancel, HookCall, HookOutcome, Rewrite, ToolHook
from heron.turn.observer import FanOutObserver, RecordingObserver, ToolCallRecord
from support.engine import Events, call, calls_turn
from support.waiting import poll_until, until

BOUND = 10.0  # seconds; an upper bound for waits that normally take milliseconds


async def assert_history_valid(history: list[Message]) -> None:
    """Real providers' rules hold, and the next run on this history is accepted."""
    HistoryChecker().check(history)
    result = await Agent(model=ScriptedModel([{"text": "next"}])).run("again", history=history)
    assert result.text == "next"


def results(history: list[Message]) -> dict[str, str]:
    return {m.call_id: m.content for m in history if isinstance(m, ToolResultMessage)}


# -- plain asyncio cancellation while tools run --------------------------------------------------


class Round:
    """One model round of `fast` (finishes at once) and `stuck` (runs until cancelled), plus
    `never` when the batch is sequential (it must not start)."""

    def __init__(self, *, parallel: bool) -> None:
        self.parallel = parallel
        self.stuck_started = asyncio.Event()
        self.stuck_cancelled = False
        self.never_ran = True
        round_ = self

        @tool(read_only=parallel)
        async def fast() -> str:
            """Finishes at once."""
            return "fast-done"

        @tool(read_only=parallel)
        async def stuck() -> str:
            """Runs until cancelled."""
            round_.stuck_started.set()
            try:
                await asyncio.Event().wait()
            finally:
                round_.stuck_cancelled = True
            return "unreachable"

        @tool(read_only=parallel)
        async def never() -> str:
            """Must not start."""
            round_.never_ran = False
            return "unreachable"

        calls = [call("fast"), call("stuck")] + ([] if parallel else [call("never")])
        self.agent = Agent(
            model=ScriptedModel([calls_turn(*calls), {"text": "never reached"}]),
            tools=[fast, stuck, never],
            autonomy="full",
        )
        self.history: list[Message] = []
        self.events = Events()

    def run(self) -> Any:
        return self.agent.run("go", history=self.history, sink=self.events)

    async def ready(self) -> None:
        """`fast` has its result and `stuck` is running: the moment to cancel."""
        await asyncio.wait_for(self.stuck_started.wait(), BOUND)
        await until(lambda: "c_fast" in self.events.results(), "fast's result")

    async def assert_closed_like_a_scope_cancel(self) -> None:
        by_id = self.events.results()
        assert (by_id["c_fast"].status, by_id["c_fast"].output) == ("ok", "fast-done")
        assert (by_id["c_stuck"].status, by_id["c_stuck"].phase) == (
            "interrupted",
            "cancelled_while_running",
        )
        assert self.stuck_cancelled  # the running tool was really cancelled
        expected = ["c_fast", "c_stuck"]
        if not self.parallel:
            assert (by_id["c_never"].status, by_id["c_never"].phase) == (
                "interrupted",
                "not_started",
            )
            assert self.never_ran
            expected.append("c_never")
        self.events.assert_one_pair_per_call()
        assert self.events.all[-1].type == "cancelled"
        assert self.events.all[-1].reason == TASK_CANCELLED  # type: ignore[attr-defined]
        # The caller's list holds the whole round: the assistant's calls, then every result.
        answered = results(self.history)
        assert list(answered) == expected
        assert answered["c_fast"] == "fast-done"
        assert isinstance(self.history[1], AssistantMessage)
        await assert_history_valid(self.history)


@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
async def test_task_cancel_closes_the_turn_and_the_cancelled_error_propagates(
    parallel: bool,
) -> None:
    round_ = Round(parallel=parallel)
    task = asyncio.create_task(round_.run())
    await round_.ready()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(task), BOUND)
    assert task.cancelled()
    await round_.assert_closed_like_a_scope_cancel()


@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
async def test_asyncio_timeout_closes_the_turn_and_raises_timeout_error(parallel: bool) -> None:
    round_ = Round(parallel=parallel)

    async def expire_when_ready(deadline: asyncio.Timeout) -> None:
        await round_.ready()
        deadline.reschedule(asyncio.get_running_loop().time())

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(BOUND) as deadline:
            expiry = asyncio.create_task(expire_when_ready(deadline))
            await round_.run()
    await expiry
    await round_.assert_closed_like_a_scope_cancel()


@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
async def test_wait_for_closes_the_turn_and_raises_timeout_error(parallel: bool) -> None:
    round_ = Round(parallel=parallel)
    # The round reaches its stuck call within milliseconds; the limit only has to be later.
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(round_.run(), 1.0)
    await round_.assert_closed_like_a_scope_cancel()


@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
async def test_a_failing_task_group_sibling_closes_the_turn(parallel: bool) -> None:
    round_ = Round(parallel=parallel)

    async def sibling() -> None:
        await round_.ready()
        raise RuntimeError("the sibling failed")

    with pytest.raises(ExceptionGroup) as caught:
        async with asyncio.TaskGroup() as group:
            group.create_task(round_.run())
            group.create_task(sibling())
    assert [str(e) for e in caught.value.exceptions] == ["the sibling failed"]
    await round_.assert_closed_like_a_scope_cancel()


async def test_the_cancel_message_and_the_callers_scope_follow_the_task_cancellation() -> None:
    round_ = Round(parallel=False)
    scope = CancelScope()
    task = asyncio.create_task(round_.agent.run("go", sink=round_.events, cancel=scope))
    await round_.ready()
    task.cancel("shutting down")
    with pytest.raises(asyncio.CancelledError) as caught:
        await task
    assert caught.value.args == ("shutting down",)
    assert scope.cancelled and scope.reason == f"{TASK_CANCELLED} (shutting down)"
    assert round_.events.all[-1].reason == scope.reason  # type: ignore[attr-defined]


async def test_a_second_cancel_while_a_tool_unwinds_still_closes_every_call(events: Events) -> None:
    started, unwinding = asyncio.Event(), asyncio.Event()

    @tool
    async def slow_to_stop() -> str:
        """Takes a moment to unwind."""
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            unwinding.set()
            await asyncio.sleep(0.2)
            raise
        return "unreachable"

    @tool
    def later() -> str:
        """Never starts."""
        return "unreachable"

    history: list[Message] = []
    agent = Agent(
        model=ScriptedModel([calls_turn(call("slow_to_stop"), call("later"))]),
        tools=[slow_to_stop, later],
        autonomy="full",
    )
    task = asyncio.create_task(agent.run("go", history=history, sink=events))
    await asyncio.wait_for(started.wait(), BOUND)
    task.cancel()
    await asyncio.wait_for(unwinding.wait(), BOUND)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    by_id = events.results()
    assert by_id["c_slow_to_stop"].phase == "cancelled_while_running"
    assert by_id["c_later"].phase == "not_started"
    events.assert_one_pair_per_call()
    await assert_history_valid(history)


class HangingModel:
    """Streams some visible text, then hangs until cancelled."""

    name = "hanging"
    native_tools = True

    def __init__(self) -> None:
        self.streaming = asyncio.Event()
        self.closed = False

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        HistoryChecker().check(request.messages)
        try:
            yield TextDelta(text="Here is what I found so")
            self.streaming.set()
            await asyncio.Event().wait()
        finally:
            self.closed = True


async def test_cancelling_during_model_streaming_keeps_the_visible_text_marked(
    events: Events,
) -> None:
    model = HangingModel()
    history: list[Message] = []
    task = asyncio.create_task(Agent(model=model).run("go", history=history, sink=events))
    await asyncio.wait_for(model.streaming.wait(), BOUND)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert model.closed
    assert [m.role for m in history] == ["user", "assistant"]
    assert history[1].text == "Here is what I found so\n\n[interrupted by user]"  # type: ignore[union-attr]
    assert [e.type for e in events.all] == ["text_delta", "cancelled"]
    await assert_history_valid(history)


async def test_asyncio_timeout_during_model_streaming_raises_timeout_error() -> None:
    model = HangingModel()
    history: list[Message] = []
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(BOUND) as deadline:
            task = asyncio.create_task(model.streaming.wait())
            task.add_done_callback(lambda _: deadline.reschedule(asyncio.get_running_loop().time()))
            await Agent(model=model).run("go", history=history)
    await assert_history_valid(history)


async def test_cancelling_while_a_call_waits_for_approval_closes_it_as_not_started(
    events: Events,
) -> None:
    asked = asyncio.Event()

    class SilentOperator:
        async def ask(self, request: Any) -> Any:
            asked.set()
            await asyncio.Event().wait()

    @tool(requires_approval=True)
    def deploy() -> str:
        """Deploy."""
        return "deployed"

    history: list[Message] = []
    agent = Agent(
        model=ScriptedModel([calls_turn(call("deploy"))]), tools=[deploy], approver=SilentOperator()
    )
    task = asyncio.create_task(agent.run("go", history=history, sink=events))
    await asyncio.wait_for(asked.wait(), BOUND)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    card = events.results()["c_deploy"]
    assert (card.status, card.phase) == ("interrupted", "not_started")
    assert "waited for approval; it did not run" in card.output
    events.assert_one_pair_per_call()
    await assert_history_valid(history)


async def test_cancelling_inside_a_before_hook_closes_that_call_and_the_rest(
    events: Events,
) -> None:
    entered = asyncio.Event()

    class Slow(ToolHook):
        async def before_tool_call(self, call: HookCall) -> Rewrite | Cancel | None:
            entered.set()
            await asyncio.Event().wait()
            return None

    @tool
    def one() -> str:
        """One."""
        return "1"

    history: list[Message] = []
    agent = Agent(
        model=ScriptedModel([calls_turn(call("one"), call("one", "c_two"))]),
        tools=[one],
        hooks=[Slow()],
        autonomy="full",
    )
    task = asyncio.create_task(agent.run("go", history=history, sink=events))
    await asyncio.wait_for(entered.wait(), BOUND)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert {k: (v.status, v.phase) for k, v in events.results().items()} == {
        "c_one": ("interrupted", "not_started"),
        "c_two": ("interrupted", "not_started"),
    }
    events.assert_one_pair_per_call()
    await assert_history_valid(history)


async def test_cancelling_at_a_safe_point_ends_the_turn_with_its_results_in_history() -> None:
    at_safe_point = asyncio.Event()

    async def drain_queue(point: str) -> None:
        at_safe_point.set()
        await asyncio.Event().wait()

    @tool
    def work() -> str:
        """Work."""
        return "worked"

    agent = Agent(
        model=ScriptedModel([calls_turn(call("work")), {"text": "never"}]),
        tools=[work],
        autonomy="full",
    )
    events = Events()
    state = TurnState(history=[UserMessage(content="go")], sink=events)
    state.on_safe_point = drain_queue  # type: ignore[assignment]
    task = asyncio.create_task(agent.run_turn(state))
    await asyncio.wait_for(at_safe_point.wait(), BOUND)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert results(state.history) == {"c_work": "worked"}
    assert events.all[-1].type == "cancelled"
    await assert_history_valid(state.history)


async def test_a_timed_out_tool_calling_a_tool_does_not_cancel_the_turn(events: Events) -> None:
    @tool
    async def inner() -> str:
        """Hangs."""
        await asyncio.Event().wait()
        return "unreachable"

    @tool
    async def orchestrate(ctx: ToolContext) -> str:
        """Calls `inner`."""
        assert ctx.call_tool is not None
        return (await ctx.call_tool("inner", {})).output

    agent = Agent(
        model=ScriptedModel([calls_turn(call("orchestrate")), {"text": "done"}]),
        tools=[inner, orchestrate],
        autonomy="full",
        knobs=RuntimeKnobs(tool_timeout_s=0.2),
    )
    result = await agent.run("go", sink=events)
    assert result.outcome.status == "final" and result.text == "done"
    by_id = events.results()
    assert by_id["c_orchestrate"].output.startswith("Error: 'orchestrate' timed out after 0.2 s")
    # The nested call's cards are closed too; it was cancelled with the tool that made it.
    assert (by_id["c_orchestrate.1"].status, by_id["c_orchestrate.1"].phase) == (
        "interrupted",
        "cancelled_while_running",
    )
    events.assert_one_pair_per_call()


async def test_a_cancelled_session_turn_is_stored_whole_and_needs_no_repair(
    tmp_path: Path,
) -> None:
    round_ = Round(parallel=True)
    session = CliSession.open(tmp_path, "s")
    session.attach(round_.agent)
    task = asyncio.create_task(
        session.run_turn(
            round_.agent, "go", sink=round_.events, cancel=CancelScope(), channel="cli"
        )
    )
    await round_.ready()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    session.close()

    resumed = CliSession.open(tmp_path, "s")
    try:
        assert not resumed.repaired  # nothing was left open
        stored = resumed.store.load("s")
        assert results(stored) == {
            "c_fast": "fast-done",
            "c_stuck": "[interrupted: cancelled while running]",
        }
        HistoryChecker().check(stored)
    finally:
        resumed.close()


async def test_an_exception_escaping_mid_round_still_leaves_every_call_answered(
    events: Events,
) -> None:
    class BrokenCache:
        def get(self, spec: Any, arguments: Any) -> str | None:
            raise RuntimeError("cache backend down")

        def put(self, spec: Any, arguments: Any, output: str) -> None: ...

        def invalidate(self, spec: Any, arguments: Any) -> None: ...

    @tool
    def write() -> str:
        """Writes (never cached)."""
        return "written"

    @tool(read_only=True)
    def look() -> str:
        """Reads (cached)."""
        return "seen"

    history: list[Message] = []
    agent = Agent(
        model=ScriptedModel([calls_turn(call("write"), call("look"))]),
        tools=[write, look],
        autonomy="full",
        cache=BrokenCache(),
    )
    with pytest.raises(RuntimeError, match="cache backend down"):
        await agent.run("go", history=history, sink=events)
    got = results(history)
    assert got["c_write"] == "written"  # finished before the failure: its real result
    assert got["c_look"].startswith("[interrupted: the turn ended before this call finished")
    await assert_history_valid(history)


# -- sync tools that time out or are interrupted -------------------------------------------------


async def test_a_timed_out_thread_tool_is_still_running_and_is_not_started_again(
    events: Events,
) -> None:
    release = threading.Event()
    sent: list[str] = []

    @tool(timeout_s=0.1)
    def send(to: str) -> str:
        """Send a message (slowly).

        Args:
            to: Recipient.
        """
        release.wait(BOUND)
        sent.append(to)
        return f"sent to {to}"

    agent = Agent(
        model=ScriptedModel(
            [
                calls_turn(call("send", "c1", to="ana")),
                calls_turn(call("send", "c2", to="ana")),
                {"text": "I could not confirm the message was sent."},
            ]
        ),
        tools=[send],
        autonomy="full",
    )
    result = await agent.run("send it", sink=events)
    got = results(result.history)
    assert got["c1"] == (
        "Error: 'send' timed out after 0.1 s and is still running: heron cannot stop a worker "
        "thread, so its outcome is unknown and its effects may still land. Do not retry: heron "
        "will not start 'send' again until it has finished. Check the current state first."
    )
    assert got["c2"].startswith(
        "Error: 'send' was not started: an earlier call of it (c1) is still running in a worker "
        "thread"
    )
    assert events.results()["c2"].status == "error"
    events.assert_one_pair_per_call()
    assert sent == [] and send.still_running() == ("c1",)

    release.set()  # the side effect the model was warned about lands now
    await poll_until(lambda: sent == ["ana"], "the thread's late side effect")
    await poll_until(lambda: send.still_running() == (), "the thread to be forgotten")
    again = Agent(
        model=ScriptedModel([calls_turn(call("send", "c3", to="bo")), {"text": "sent"}]),
        tools=[send],
        autonomy="full",
    )
    assert results((await again.run("send again")).history)["c3"] == "sent to bo"


@pytest.mark.parametrize(
    ("annotations", "advice"),
    [
        ({"read_only": True}, "Its result will be discarded."),
        ({"idempotent": True}, "It is idempotent: calling it again is safe."),
    ],
)
async def test_a_safe_thread_tool_may_run_again_while_an_earlier_run_is_alive(
    annotations: dict[str, bool], advice: str
) -> None:
    release = threading.Event()

    @tool(name="sync_state", timeout_s=0.1, **annotations)  # type: ignore[call-overload]
    def sync_state() -> str:
        """Slow sync."""
        release.wait(BOUND)
        return "synced"

    try:
        agent = Agent(
            model=ScriptedModel(
                [
                    calls_turn(call("sync_state", "c1")),
                    calls_turn(call("sync_state", "c2")),
                    {"text": "ok"},
                ]
            ),
            tools=[sync_state],
            autonomy="full",
        )
        got = results((await agent.run("go")).history)
    finally:
        release.set()
    assert got["c1"].endswith(advice) and "is still running" in got["c1"]
    assert "was not started" not in got["c2"]  # it ran (and timed out) again


async def test_an_interrupted_thread_tool_says_it_is_still_running(events: Events) -> None:
    release, started = threading.Event(), threading.Event()

    @tool
    def migrate() -> str:
        """Migrate the database."""
        started.set()
        release.wait(BOUND)
        return "migrated"

    scope = CancelScope()
    agent = Agent(
        model=ScriptedModel([calls_turn(call("migrate"))]), tools=[migrate], autonomy="full"
    )
    task = asyncio.create_task(agent.run("go", sink=events, cancel=scope))
    try:
        await poll_until(started.is_set, "the thread to start")
        scope.cancel()
        result = await asyncio.wait_for(task, BOUND)
    finally:
        release.set()
    assert results(result.history)["c_migrate"] == (
        "[interrupted: cancelled, but it is still running in a worker thread (heron cannot stop "
        "a thread)] Outcome unknown: its effects may still land. heron will not start 'migrate' "
        "again until it has finished; check the current state first."
    )
    assert events.results()["c_migrate"].phase == "cancelled_while_running"


async def test_a_task_that_ignores_its_cancellation_is_not_reported_as_stopped() -> None:
    release = asyncio.Event()

    @tool
    async def stubborn() -> str:
        """Ignores cancellation."""
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue
        return "finally"

    agent = Agent(
        model=ScriptedModel([calls_turn(call("stubborn")), {"text": "ok"}]),
        tools=[stubborn],
        autonomy="full",
        knobs=RuntimeKnobs(tool_timeout_s=0.05, cancel_grace_s=0.05),
    )
    try:
        got = results((await agent.run("go")).history)
    finally:
        release.set()
    assert got["c_stubborn"] == (
        "Error: 'stubborn' timed out after 0.05 s; heron cancelled it, but it had not stopped "
        "when heron stopped waiting and may still be running. Outcome unknown: do not retry "
        "blindly; check the current state first."
    )


@pytest.mark.parametrize(("declared", "knob", "limit"), [(5.0, 0.1, "0.1"), (0.1, 5.0, "0.1")])
async def test_the_lower_of_the_tool_and_runtime_timeouts_applies(
    declared: float, knob: float, limit: str
) -> None:
    @tool(timeout_s=declared, read_only=True)
    async def hang() -> str:
        """Hangs."""
        await asyncio.Event().wait()
        return "unreachable"

    agent = Agent(
        model=ScriptedModel([calls_turn(call("hang")), {"text": "ok"}]),
        tools=[hang],
        knobs=RuntimeKnobs(tool_timeout_s=knob),
    )
    got = results((await agent.run("go")).history)
    assert got["c_hang"] == f"Error: 'hang' timed out after {limit} s and was stopped."


# -- sync tools in a worker process heron can kill -----------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_process_tool_that_times_out_is_killed_and_its_effect_never_lands(
    tmp_path: Path,
) -> None:
    effect = tmp_path / "effect"
    agent = Agent(
        model=ScriptedModel(
            [calls_turn(call("write_after", path=str(effect), seconds=60)), {"text": "ok"}]
        ),
        tools=[cancellation_tools.write_after],
        autonomy="full",
        knobs=RuntimeKnobs(tool_timeout_s=3),  # the worker's start-up counts against it
    )
    got = results((await agent.run("go")).history)
    assert got["c_write_after"] == (
        "Error: 'write_after' timed out after 3 s and was stopped: heron killed its worker "
        "process. Anything it did before that stays done; check the current state first."
    )
    pid = int((tmp_path / "effect.pid").read_text())
    await poll_until(lambda: not _alive(pid), "the worker to be gone")
    assert not effect.exists()


async def test_cancelling_the_task_kills_a_running_process_tool(
    tmp_path: Path, events: Events
) -> None:
    effect = tmp_path / "effect"
    history: list[Message] = []
    agent = Agent(
        model=ScriptedModel([calls_turn(call("write_after", path=str(effect), seconds=60))]),
        tools=[cancellation_tools.write_after],
        autonomy="full",
    )
    task = asyncio.create_task(agent.run("go", history=history, sink=events))
    pid_file = tmp_path / "effect.pid"
    await poll_until(pid_file.exists, "the worker to start")
    await poll_until(lambda: pid_file.read_text() != "", "the worker's pid")
    pid = int(pid_file.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not _alive(pid)
    assert results(history)["c_write_after"] == (
        "[interrupted: cancelled while running; heron killed its worker process] Outcome unknown: "
        "it may have taken effect in part or in full. Do not retry blindly; check the current "
        "state first."
    )
    assert not effect.exists()
    await assert_history_valid(history)


async def test_a_process_tool_returns_its_value_and_raises_like_any_tool(
    capfd: pytest.CaptureFixture[str],
) -> None:
    agent = Agent(
        model=ScriptedModel(
            [calls_turn(call("add", a=2, b=3), call("fail", message="bad input")), {"text": "ok"}]
        ),
        tools=[cancellation_tools.add, cancellation_tools.fail],
    )
    got = results((await agent.run("go")).history)
    assert got["c_fail"] == "Error: 'fail' raised ValueError: bad input"
    assert got["c_add"].startswith('{"sum":5,"pid":')
    assert f'"pid":{os.getpid()}}}' not in got["c_add"]  # it ran in another process
    out, err = capfd.readouterr()
    assert "fail: about to raise" in err and "fail: about to raise" not in out


class Colour(Enum):
    RED = "red"


def test_process_tools_are_checked_when_they_are_defined() -> None:
    class LocalColour(Enum):
        BLUE = "blue"

    def local(colour: LocalColour, ctx: ToolContext) -> str:
        """Local."""
        return ""

    # Real objects, not strings: a local class cannot be resolved from a string annotation.
    local.__annotations__ = {"colour": LocalColour, "ctx": ToolContext, "return": str}

    with pytest.raises(ToolDefinitionError) as caught:
        tool(runs_in="process")(local)
    problems = caught.value.problems
    assert any("defined at module level" in p for p in problems)
    assert any("cannot take the ToolContext" in p for p in problems)
    assert any("LocalColour is defined inside a function" in p for p in problems)

    async def asynchronous() -> str:
        """Async."""
        return ""

    with pytest.raises(ToolDefinitionError, match="is for a plain def"):
        tool(runs_in="process")(asynchronous)
    with pytest.raises(ToolDefinitionError, match="thread=False contradicts"):
        tool(runs_in="process", thread=False)(cancellation_tools.add.fn)
    with pytest.raises(ToolDefinitionError, match="timeout_s must be a finite number"):
        tool(timeout_s=0)(cancellation_tools.add.fn)
    spec = tool(runs_in="process", timeout_s=2.5)(cancellation_tools.add.fn).spec
    assert (spec.runs_in, spec.timeout_s) == ("process", 2.5)


# -- broken observers, hooks and sinks are reported, never fatal ---------------------------------


@tool(read_only=True)
def echo(text: str) -> str:
    """Echo.

    Args:
        text: Text.
    """
    return text


def echo_agent(**kwargs: Any) -> Agent:
    return Agent(
        model=ScriptedModel([calls_turn(call("echo", text="hi")), {"text": "done"}]),
        tools=[echo],
        **kwargs,
    )


class Exploding:
    """An observer whose exporter is down (and whose error message holds a key)."""

    def tool_call_start(self, record: Any) -> None:
        raise RuntimeError("exporter down: key sk-abcdefghijklmnop1234567890")

    def tool_call_end(self, record: Any) -> None:
        raise RuntimeError("exporter down")


async def test_an_observer_that_raises_is_reported_and_the_turn_goes_on(
    events: Events, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = RecordingObserver()
    with caplog.at_level(logging.WARNING, logger="heron.turn"):
        result = await echo_agent(observer=FanOutObserver(Exploding(), recorder)).run(
            "go", sink=events
        )
    assert result.ok and results(result.history) == {"c_echo": "hi"}
    failures = events.of("extension_error")
    assert [(f.component, f.name, f.stage, f.call_id) for f in failures] == [
        ("observer", "Exploding", "tool_call_start", "c_echo"),
        ("observer", "Exploding", "tool_call_end", "c_echo"),
    ]
    assert failures[0].error.startswith("RuntimeError: exporter down: key sk-")
    assert "abcdefghijklmnop1234567890" not in failures[0].error  # scrubbed
    assert isinstance(recorder.records[-1], ToolCallRecord)  # the other observer got both
    assert len(recorder.records) == 2
    logged = [r for r in caplog.records if r.name == "heron.turn"]
    assert len(logged) == 2 and "Exploding failed in tool_call_start" in logged[0].getMessage()
    assert "abcdefghijklmnop1234567890" not in caplog.text
    events.assert_one_pair_per_call()


async def test_a_hook_that_raises_is_reported_and_the_turn_goes_on(events: Events) -> None:
    class Broken(ToolHook):
        async def before_tool_call(self, call: HookCall) -> Rewrite | Cancel | None:
            raise ValueError("before bug")

        async def after_tool_call(self, call: HookCall, outcome: HookOutcome) -> None:
            raise ValueError("after bug")

    result = await echo_agent(hooks=[Broken()]).run("go", sink=events)
    assert result.ok and results(result.history) == {"c_echo": "hi"}
    assert [(f.component, f.name, f.stage, f.error) for f in events.of("extension_error")] == [
        ("hook", "Broken", "before_tool_call", "ValueError: before bug"),
        ("hook", "Broken", "after_tool_call", "ValueError: after bug"),
    ]


async def test_an_event_sink_that_always_raises_cannot_take_the_run_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def gone(event: Any) -> None:
        raise BrokenPipeError("the UI went away")

    with caplog.at_level(logging.WARNING, logger="heron.turn"):
        result = await echo_agent().run("go", sink=gone)
    assert result.ok and result.text == "done"
    assert results(result.history) == {"c_echo": "hi"}
    warnings = [r.getMessage() for r in caplog.records if r.name == "heron.turn"]
    assert "sink" in warnings[0] and "BrokenPipeError: the UI went away" in warnings[0]


async def test_an_event_sink_that_refuses_some_events_is_told_which(events: Events) -> None:
    def picky(event: Any) -> None:
        if event.type == "tool_result":
            raise TypeError("cannot render a tool_result")
        events(event)

    result = await echo_agent().run("go", sink=picky)
    assert result.ok
    (failure,) = events.of("extension_error")
    assert (failure.component, failure.stage, failure.call_id) == ("sink", "tool_result", "c_echo")
    assert failure.name == "picky"
    assert [e.type for e in events.all] == ["tool_call", "extension_error", "text_delta", "final"]
