"""Dispatch: parallel vs sequential, ordering, cancellation and background detachment."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest

from heron import (
    Agent,
    CancelScope,
    ConfigurationError,
    FunctionModel,
    RuntimeKnobs,
    ScriptedModel,
    TurnState,
    tool,
)
from heron.messages import AssistantMessage, ToolResultMessage, UserMessage
from heron.turn.context import BackgroundResult
from support.engine import Events, call, calls_turn

BOUND = 5.0  # seconds; an upper bound for waits that normally take microseconds


class Rendezvous:
    """Two tools that report whether the other one was running while they ran.

    Each yields to the event loop a few times between its start and its end; run concurrently
    they overlap, run one after the other they never do. No clocks involved.
    """

    def __init__(self) -> None:
        self.running: set[str] = set()

    def tools(self, *, read_only: bool) -> list[Any]:
        rv = self

        async def meet(me: str, other: str) -> str:
            rv.running.add(me)
            met = False
            for _ in range(5):
                await asyncio.sleep(0)  # a yield point, not a wait for time
                met = met or other in rv.running
            rv.running.discard(me)
            return f"{me} {'met' if met else 'alone'}"

        @tool(name="tool_a", read_only=read_only)
        async def tool_a() -> str:
            """A."""
            return await meet("a", "b")

        @tool(name="tool_b", read_only=read_only)
        async def tool_b() -> str:
            """B."""
            return await meet("b", "a")

        return [tool_a, tool_b]


def results(history: list[Any]) -> list[tuple[str, str]]:
    return [(m.call_id, m.content) for m in history if isinstance(m, ToolResultMessage)]


async def run_pair(parallel: str, *, read_only: bool, events: Events) -> list[tuple[str, str]]:
    rv = Rendezvous()
    agent = Agent(
        model=ScriptedModel([calls_turn(call("tool_a"), call("tool_b")), {"text": "done"}]),
        tools=rv.tools(read_only=read_only),
        autonomy="full",
        knobs=RuntimeKnobs(parallel=parallel),  # type: ignore[arg-type]
    )
    result = await agent.run("go", sink=events)
    events.assert_one_pair_per_call()
    return results(result.history)


async def test_read_only_batch_runs_in_parallel_by_default(events: Events) -> None:
    assert await run_pair("read-only", read_only=True, events=events) == [
        ("c_tool_a", "a met"),
        ("c_tool_b", "b met"),
    ]


async def test_execution_tools_keep_their_order_under_the_default_knob(events: Events) -> None:
    assert await run_pair("read-only", read_only=False, events=events) == [
        ("c_tool_a", "a alone"),
        ("c_tool_b", "b alone"),
    ]


async def test_all_mode_runs_execution_tools_in_parallel(events: Events) -> None:
    assert await run_pair("all", read_only=False, events=events) == [
        ("c_tool_a", "a met"),
        ("c_tool_b", "b met"),
    ]


async def test_off_mode_runs_read_only_tools_sequentially(events: Events) -> None:
    assert await run_pair("off", read_only=True, events=events) == [
        ("c_tool_a", "a alone"),
        ("c_tool_b", "b alone"),
    ]


async def test_parallel_results_keep_call_order_when_finishing_out_of_order(
    events: Events,
) -> None:
    gate = asyncio.Event()

    @tool(read_only=True)
    async def slow() -> str:
        """Finishes after fast."""
        await asyncio.wait_for(gate.wait(), BOUND)
        return "slow"

    @tool(read_only=True)
    async def fast() -> str:
        """Finishes first."""
        gate.set()
        return "fast"

    agent = Agent(
        model=ScriptedModel([calls_turn(call("slow"), call("fast")), {"text": "done"}]),
        tools=[slow, fast],
    )
    result = await agent.run("go", sink=events)
    assert results(result.history) == [("c_slow", "slow"), ("c_fast", "fast")]
    finished = [e.id for e in events.of("tool_result")]
    assert finished == ["c_fast", "c_slow"]


async def test_a_tool_runs_in_its_own_task_and_context_from_its_first_step(
    events: Events,
) -> None:
    # Tasks start eagerly (no trip through the event loop for a tool that never waits), but a
    # tool still sees its own task from its first line: a timeout or a task group it opens
    # there belongs to it, and a context variable it sets stays in its own context.
    seen: dict[str, Any] = {}
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="turn")

    @tool(read_only=True)
    async def scoped() -> str:
        """Opens a timeout before its first wait."""
        seen["task"] = asyncio.current_task()
        marker.set("tool")
        async with asyncio.timeout(BOUND):
            await asyncio.sleep(0)
        async with asyncio.TaskGroup() as group:
            group.create_task(asyncio.sleep(0))
        return "scoped"

    @tool(read_only=True)
    async def quick() -> str:
        """Never waits."""
        seen["quick"] = asyncio.current_task()
        return marker.get()

    agent = Agent(
        model=ScriptedModel([calls_turn(call("scoped"), call("quick")), {"text": "done"}]),
        tools=[scoped, quick],
        knobs=RuntimeKnobs(parallel="off"),
    )
    turn = asyncio.current_task()
    result = await agent.run("go", sink=events)
    assert results(result.history) == [("c_scoped", "scoped"), ("c_quick", "turn")]
    assert seen["task"] not in (None, turn) and seen["quick"] not in (None, turn, seen["task"])
    assert marker.get() == "turn"
    events.assert_one_pair_per_call()


async def test_batch_with_an_approval_required_call_runs_sequentially(events: Events) -> None:
    rv = Rendezvous()
    tools = rv.tools(read_only=True)

    @tool(requires_approval=True, read_only=True)
    def gated() -> str:
        """Needs approval."""
        return "gated ran"

    from heron import ApprovalManager, ApprovalPolicy, BackChannelApprover

    channel = BackChannelApprover(
        "test",
        on_request=lambda r: asyncio.get_running_loop().call_soon(
            channel.answer, r.request_id, "yes"
        ),
    )
    agent = Agent(
        model=ScriptedModel(
            [calls_turn(call("tool_a"), call("gated"), call("tool_b")), {"text": "done"}]
        ),
        tools=[*tools, gated],
        approval=ApprovalManager(policy=ApprovalPolicy(), approver=channel),
    )
    result = await agent.run("go", sink=events)
    assert results(result.history) == [
        ("c_tool_a", "a alone"),
        ("c_gated", "gated ran"),
        ("c_tool_b", "b alone"),
    ]


async def test_batch_containing_tool_search_runs_sequentially(events: Events) -> None:
    rv = Rendezvous()

    @tool(read_only=True)
    def tool_search(query: str) -> str:
        """Find tools.

        Args:
            query: What to look for.
        """
        return "nothing"

    agent = Agent(
        model=ScriptedModel(
            [
                calls_turn(call("tool_a"), call("tool_search", query="x"), call("tool_b")),
                {"text": "done"},
            ]
        ),
        tools=[*rv.tools(read_only=True), tool_search],
    )
    result = await agent.run("go", sink=events)
    assert [c for _, c in results(result.history)] == ["a alone", "nothing", "b alone"]


# -- cancellation ------------------------------------------------------------------------------


async def test_cancel_before_the_turn_starts_never_calls_the_model(events: Events) -> None:
    model = ScriptedModel([{"text": "never"}])
    scope = CancelScope()
    scope.cancel("stop")
    result = await Agent(model=model).run("go", sink=events, cancel=scope)
    assert result.outcome.status == "cancelled"
    assert model.requests == []
    assert [e.type for e in events.all] == ["cancelled"]


async def test_sequential_cancel_stops_dispatch_and_marks_each_case(events: Events) -> None:
    scope = CancelScope()
    started = asyncio.Event()
    ran: list[str] = []

    @tool(name="first")
    async def first() -> str:
        """Runs until cancelled."""
        ran.append("first")
        started.set()
        await asyncio.Event().wait()
        return "unreachable"

    @tool(name="second")
    def second() -> str:
        """Never starts."""
        ran.append("second")
        return "unreachable"

    agent = Agent(
        model=ScriptedModel([calls_turn(call("first"), call("second"))]),
        tools=[first, second],
        autonomy="full",
    )
    task = asyncio.create_task(agent.run("go", sink=events, cancel=scope))
    await asyncio.wait_for(started.wait(), BOUND)
    scope.cancel("user pressed stop")
    result = await asyncio.wait_for(task, BOUND)

    assert result.outcome.status == "cancelled"
    assert ran == ["first"]
    by_id = events.results()
    assert (by_id["c_first"].status, by_id["c_first"].phase) == (
        "interrupted",
        "cancelled_while_running",
    )
    assert "Outcome unknown" in results(result.history)[0][1]
    assert (by_id["c_second"].status, by_id["c_second"].phase) == ("interrupted", "not_started")
    events.assert_one_pair_per_call()
    # The round is in history with one result per call, so the next request is valid.
    assert isinstance(result.history[-3], AssistantMessage)
    assert [m.call_id for m in result.history[-2:]] == ["c_first", "c_second"]  # type: ignore[union-attr]
    assert events.all[-1].type == "cancelled"


async def test_parallel_cancel_keeps_finished_siblings_real_results(events: Events) -> None:
    scope = CancelScope()
    fast_done = asyncio.Event()

    @tool(read_only=True)
    async def fast() -> str:
        """Done quickly."""
        fast_done.set()
        return "fast-done"

    @tool(read_only=True)
    async def stuck() -> str:
        """Never finishes."""
        await asyncio.Event().wait()
        return "unreachable"

    agent = Agent(
        model=ScriptedModel([calls_turn(call("fast"), call("stuck"))]), tools=[fast, stuck]
    )
    task = asyncio.create_task(agent.run("go", sink=events, cancel=scope))
    await asyncio.wait_for(fast_done.wait(), BOUND)
    # The finished call's terminal event (stuck's comes only with the cancel).
    await asyncio.wait_for(events.arrived("tool_result").wait(), BOUND)
    scope.cancel()
    result = await asyncio.wait_for(task, BOUND)
    by_id = events.results()
    assert (by_id["c_fast"].status, by_id["c_fast"].output) == ("ok", "fast-done")
    assert (by_id["c_stuck"].status, by_id["c_stuck"].phase) == (
        "interrupted",
        "cancelled_while_running",
    )
    # Read-only: no "outcome unknown" warning for a call that changes nothing.
    assert results(result.history)[1][1] == "[interrupted: cancelled while running]"
    events.assert_one_pair_per_call()


async def test_detach_interrupt_leaves_tool_running_and_delivers_its_result_later(
    events: Events,
) -> None:
    scope = CancelScope()
    started, release = asyncio.Event(), asyncio.Event()
    late: list[BackgroundResult] = []
    delivered = asyncio.Event()

    @tool(name="build")
    async def build() -> str:
        """A long build."""
        started.set()
        await release.wait()
        return "build finished: 0 errors"

    agent = Agent(model=ScriptedModel([calls_turn(call("build"))]), tools=[build], autonomy="full")
    state = TurnState(history=[UserMessage(content="build it")], sink=events, cancel=scope)

    def on_late(result: BackgroundResult) -> None:
        late.append(result)
        delivered.set()

    state.on_background_result = on_late
    task = asyncio.create_task(agent.run_turn(state))
    await asyncio.wait_for(started.wait(), BOUND)
    scope.cancel("urgent user message", mode="detach")
    outcome = await asyncio.wait_for(task, BOUND)

    assert outcome.status == "cancelled"
    card = events.results()["c_build"]
    assert (card.phase, card.background_task) == ("running_in_background", "task-c_build")
    assert "still running in the background as task task-c_build" in results(state.history)[0][1]
    assert list(state.background) == ["task-c_build"]

    release.set()
    await asyncio.wait_for(delivered.wait(), BOUND)
    assert [(r.call_id, r.success, r.output) for r in late] == [
        ("c_build", True, "build finished: 0 errors")
    ]
    assert state.background == {}


async def test_cancel_during_model_stream_discards_the_step(events: Events) -> None:
    scope = CancelScope()
    thinking = asyncio.Event()

    async def slow_model(request: Any) -> str:
        thinking.set()
        await asyncio.Event().wait()
        return "never"

    model = FunctionModel(slow_model)
    task = asyncio.create_task(Agent(model=model).run("go", sink=events, cancel=scope))
    await asyncio.wait_for(thinking.wait(), BOUND)
    scope.cancel()
    result = await asyncio.wait_for(task, BOUND)
    assert result.outcome.status == "cancelled"
    assert [m.role for m in result.history] == ["user"]


@pytest.mark.parametrize("mode", ["cancel", "detach"])
async def test_child_scope_is_cancelled_with_its_parent(mode: str) -> None:
    parent = CancelScope()
    child = parent.child()
    parent.cancel("stop", mode=mode)  # type: ignore[arg-type]
    assert child.cancelled and child.mode == mode and child.reason == "stop"
    late = parent.child()
    assert late.cancelled


@pytest.mark.parametrize(
    ("field", "value", "known"),
    [
        ("parallel", "yes", "'off', 'read-only', 'all'"),
        ("cap_behavior", "ignore", "'summary', 'error'"),
    ],
)
def test_an_unknown_mode_is_a_configuration_error_not_a_silent_default(
    field: str, value: str, known: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        RuntimeKnobs(**{field: value})
    assert caught.value.problems == (f"{field}: unknown mode {value!r} (known: {known})",)


def test_every_problem_with_the_modes_is_listed_at_once() -> None:
    with pytest.raises(ConfigurationError) as caught:
        RuntimeKnobs(parallel="many", cap_behavior="shrug")  # type: ignore[arg-type]
    assert [problem.split(":")[0] for problem in caught.value.problems] == [
        "parallel",
        "cap_behavior",
    ]


def test_an_unknown_autonomy_is_refused_when_the_agent_is_built() -> None:
    with pytest.raises(ConfigurationError, match="unknown autonomy 'yolo'"):
        Agent(model=ScriptedModel([]), autonomy="yolo")  # type: ignore[arg-type]
