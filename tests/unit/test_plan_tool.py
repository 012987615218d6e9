"""`update_plan`: the checklist the model keeps, its `plan` events, its set and its rendering."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from heron import Agent, PlanEvent, PlanItem, ScriptedModel
from heron.config.builtin import BuiltinConfig, build_builtin
from heron.toolsets.cache import WorkspaceResultCache
from heron.toolsets.plan import plan_tools, render_plan
from support.engine import Events, call, calls_turn

STEPS = [
    {"text": "Read the failing test", "status": "completed"},
    {"text": "Fix the date parser", "status": "in_progress"},
    {"text": "Run the test file", "status": "pending"},
]


def plan_call(call_id: str = "p1", **arguments: Any) -> dict[str, Any]:
    return call("update_plan", call_id, **arguments)


async def run(*turns: dict[str, Any], events: Events, **agent_kw: Any) -> Any:
    agent = Agent(model=ScriptedModel([*turns, {"text": "done"}]), tools=plan_tools(), **agent_kw)
    return await agent.run("fix the parser", sink=events)


async def test_a_successful_update_is_followed_by_a_plan_event_with_the_whole_plan(
    events: Events,
) -> None:
    result = await run(
        calls_turn(plan_call(plan=STEPS, explanation="Found the bug.")), events=events
    )
    assert result.ok
    (tool_result,) = events.of("tool_result")
    (plan,) = events.of("plan")
    assert events.all.index(plan) == events.all.index(tool_result) + 1
    assert plan == PlanEvent(
        turn_id=plan.turn_id,
        call_id="p1",
        items=tuple(PlanItem(**step) for step in STEPS),
        explanation="Found the bug.",
    )
    assert tool_result.status == "ok"
    assert tool_result.output == (
        "Plan updated: 3 steps, 1 completed, 1 in progress, 1 pending. Now: Fix the date parser"
    )
    assert tool_result.data == {"completed": 1, "in_progress": 1, "pending": 1}


async def test_every_update_gets_its_own_plan_event_in_order(events: Events) -> None:
    done = [dict(step, status="completed") for step in STEPS]
    await run(
        calls_turn(plan_call("p1", plan=STEPS)),
        calls_turn(plan_call("p2", plan=done)),
        events=events,
    )
    plans = events.of("plan")
    assert [p.call_id for p in plans] == ["p1", "p2"]
    assert [i.status for i in plans[1].items] == ["completed"] * 3


async def test_an_empty_plan_clears_it(events: Events) -> None:
    await run(calls_turn(plan_call(plan=[])), events=events)
    (plan,) = events.of("plan")
    assert plan.items == ()
    assert events.of("tool_result")[0].output == "Plan cleared."


async def test_two_steps_in_progress_are_refused_and_no_plan_event_follows(events: Events) -> None:
    steps = [{"text": "a", "status": "in_progress"}, {"text": "b", "status": "in_progress"}]
    await run(calls_turn(plan_call(plan=steps)), events=events)
    (tool_result,) = events.of("tool_result")
    assert tool_result.status == "error"
    assert "2 steps are in_progress ('a', 'b'); at most one may be" in tool_result.output
    assert events.of("plan") == []


@pytest.mark.parametrize(
    ("steps", "problem"),
    [
        ([{"text": "a", "status": "done"}], "expected 'pending', 'in_progress' or 'completed'"),
        ([{"text": "a", "status": "pending", "owner": "me"}], "unexpected field 'owner'"),
        ([{"text": "", "status": "pending"}], "at least 1 character"),
        ([{"text": "x" * 301, "status": "pending"}], "at most 300 characters"),
        ([{"text": "a", "status": "pending"}] * 51, "at most 50 items"),
        (
            [{"text": "line one\nline two", "status": "pending"}],
            "step 1: the text must be one line",
        ),
        ([{"text": "   ", "status": "pending"}], "step 1: the text must be one line"),
        ([{"text": "\x1b[2Jgone", "status": "pending"}], "step 1: the text must be one line"),
        ("not a list", "expected array"),
    ],
)
async def test_a_malformed_plan_is_refused_with_the_reason_and_no_plan_event(
    steps: Any, problem: str, events: Events
) -> None:
    await run(calls_turn(plan_call(plan=steps)), events=events)
    (tool_result,) = events.of("tool_result")
    assert tool_result.status == "error"
    assert problem in tool_result.output
    assert events.of("plan") == []


async def test_a_cached_repeat_still_reports_its_plan(events: Events) -> None:
    await run(
        calls_turn(plan_call("p1", plan=STEPS)),
        calls_turn(plan_call("p2", plan=STEPS)),
        events=events,
        cache=WorkspaceResultCache(),
    )
    assert [e.cached for e in events.of("tool_result")] == [False, True]
    assert [p.call_id for p in events.of("plan")] == ["p1", "p2"]


def test_the_tool_is_read_only_runs_on_the_event_loop_and_is_builtin() -> None:
    (update_plan,) = plan_tools()
    spec = update_plan.spec
    assert spec.name == "update_plan" and spec.owner == "builtin"
    assert spec.annotations.read_only and spec.annotations.idempotent
    assert not spec.annotations.open_world and not spec.annotations.destructive
    assert spec.runs_in == "event_loop"


async def test_the_planning_set_is_built_through_the_builtin_factory(tmp_path: Path) -> None:
    cfg = BuiltinConfig(sets=["planning"], workspace=str(tmp_path))
    built = await build_builtin(cfg, state_dir=tmp_path / "state")
    try:
        assert [t.spec.name for t in built.tools["planning"]] == ["update_plan"]
        assert list(built.tools) == ["planning"]
    finally:
        await built.aclose()


def test_render_plan_draws_a_checklist_with_progress() -> None:
    items = [PlanItem(**step) for step in STEPS]  # type: ignore[arg-type]
    assert render_plan(items, explanation="Found the bug.") == [
        "Plan (1/3 done)",
        "  [x] Read the failing test",
        "  [>] Fix the date parser",
        "  [ ] Run the test file",
        "  (Found the bug.)",
    ]
    assert render_plan([]) == ["Plan cleared"]


def test_render_plan_keeps_each_step_on_one_safe_line() -> None:
    item = PlanItem(text="evil\x1b[2J\nsecond   line", status="pending")
    assert render_plan([item]) == ["Plan (0/1 done)", "  [ ] evil [2J second line"]
