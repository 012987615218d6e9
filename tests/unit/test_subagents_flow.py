"""Messages, streams, queues, deadlines and stops between a parent and its children, in one
process: real SQLite bus and stores, scripted models, the parent's own tools."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from heron.agent import Agent
from heron.always_on.bus.loop import EventDrivenAgent
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.subagents.config import AgentEntry, SubagentsConfig
from heron.always_on.subagents.service import Subagents, SubagentsSetup, open_subagents
from heron.messages import UserMessage
from heron.models.scripted import ScriptedModel
from heron.tools.definition import Tool, ToolContext
from heron.tools.function_tool import tool
from heron.turn.approval import ApprovalManager, ApprovalPolicy
from heron.turn.cancel import CancelScope
from support.waiting import until


class Gate:
    """A read-only tool that waits until the test opens it."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.opened = asyncio.Event()

        @tool(read_only=True)
        async def wait_here() -> str:
            """Wait for the gate."""
            self.started.set()
            await self.opened.wait()
            return "gate opened"

        self.tool: Tool = wait_here


def _call(name: str, cid: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"id": cid, "name": name, "arguments": arguments}]}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def opened() -> Iterator[list[Subagents]]:
    found: list[Subagents] = []
    yield found
    for subs in found:
        subs.store.close()


def _open(
    root: Path,
    opened: list[Subagents],
    scripts: dict[str, list[dict[str, Any]]],
    *,
    deliver: bool = True,
    **config: Any,
) -> Subagents:
    entries = {}
    for name, turns in scripts.items():
        path = root / f"{name}.json"
        path.write_text(json.dumps({"turns": turns}), encoding="utf-8")
        entries[name] = AgentEntry(model=f"scripted:{path}")
    setup = SubagentsSetup(config=SubagentsConfig(**config), entries=entries, agents_dir=None)
    subs = open_subagents(setup, state_dir=root / "state", deliver=deliver)
    opened.append(subs)
    return subs


def _parent(turns: list[dict[str, Any]], subs: Subagents, *tools: Tool) -> Agent:
    return Agent(
        model=ScriptedModel(turns),
        tools=[*tools, *subs.tools("default")],
        approval=ApprovalManager(policy=ApprovalPolicy(autonomy="full")),
    )


def _tool(agent: Agent, name: str) -> Tool:
    found = agent.registry.get(name)
    assert found is not None
    return found


CTX = ToolContext(call_id="t1", turn_id="t")


@pytest.mark.parametrize("interrupt", [False, True])
async def test_a_message_reaches_a_working_child_as_an_event_queued_or_interrupting(
    root: Path, opened: list[Subagents], interrupt: bool
) -> None:
    gate = Gate()
    subs = _open(
        root,
        opened,
        {
            "worker": [
                _call("wait_here", "w1"),
                {"text": "done in metric", "expect": {"last_message_contains": "metric units"}},
            ]
        },
    )
    parent = _parent(
        [
            _call("spawn_subagent", "s1", task="measure", agent="worker", mode="async"),
            {"text": "started"},
        ],
        subs,
        gate.tool,
    )
    try:
        await parent.run("go")
        await asyncio.wait_for(gate.started.wait(), 10)
        sent = await _tool(parent, "send_message_to_subagent").execute(
            {"id": "s1", "text": "use metric units", "interrupt": interrupt}, CTX
        )
        assert sent.success, sent.error
        if not interrupt:
            gate.opened.set()  # queued: the child reads it at its next safe point
        await until(lambda: subs.store.list()[0].finished, "the child ended")
    finally:
        gate.opened.set()
        await subs.runtime.aclose()
    (record,) = subs.store.list()
    assert (record.status, record.result) == ("completed", "done in metric")
    kinds = [s.event.kind for s in await subs.bus.events(session=record.session)]
    if interrupt:  # the step was interrupted: the detached call's real result came later
        assert kinds == ["agent.input", "agent.interrupt", "tool.result"]
    else:
        assert kinds == ["agent.input", "agent.input"]


async def test_a_stream_childs_reports_arrive_as_events_while_it_works(
    root: Path, opened: list[Subagents]
) -> None:
    subs = _open(
        root,
        opened,
        {"streamer": [_call("report_to_parent", "r1", text="half way"), {"text": "finished"}]},
    )
    parent = _parent(
        [
            _call("spawn_subagent", "s1", task="t", agent="streamer", mode="stream"),
            {"text": "started"},
            {"text": "noted"},
            {"text": "noted"},
        ],
        subs,
    )
    loop = EventDrivenAgent(parent, subs.bus, subs.bus.sessions, session="default")
    try:
        await loop.publish(
            BusEvent(
                kind="user.input", source="user", channel="cli", content=EventContent(text="go")
            )
        )
        await loop.run_until_idle()
        await until(lambda: subs.store.list()[0].delivered, "the result published")
        await loop.run_until_idle()
    finally:
        await loop.aclose()
        await subs.runtime.aclose()
    texts = "\n".join(m.content for m in loop.history if isinstance(m, UserMessage))
    assert "status=working] (data from a sub-agent" in texts and "half way" in texts
    assert texts.index("half way") < texts.index("finished")


async def test_the_distilled_hand_off_costs_one_parent_call_and_reaches_the_child(
    root: Path, opened: list[Subagents]
) -> None:
    subs = _open(
        root,
        opened,
        {"helper": [{"text": "ok", "expect": {"last_message_contains": "[FROM_USER]"}}]},
    )
    parent_model = ScriptedModel(
        [
            _call("spawn_subagent", "s1", task="summarise", agent="helper", context="distilled"),
            {"text": "NOTE: the user wants a one-line summary"},  # the hand-off call
            {"text": "done"},
        ]
    )
    parent = Agent(
        model=parent_model,
        tools=subs.tools("default"),
        approval=ApprovalManager(policy=ApprovalPolicy(autonomy="full")),
    )
    await parent.run("summarise the build log in one line")
    await subs.runtime.aclose()
    (record,) = subs.store.list()
    first = subs.bus.sessions.load(record.session)[0]
    assert isinstance(first, UserMessage)
    assert "hand-off note on the work so far:\nNOTE: the user wants" in first.content
    assert "[FROM_USER]\nsummarise the build log in one line\n[/FROM_USER]" in first.content
    assert len(parent_model.requests) == 3
    assert parent_model.requests[1].tools == []  # the note is written without tools


async def _two_for_one_slot(root: Path, opened: list[Subagents]) -> tuple[Gate, Subagents, Agent]:
    """Two async children and one slot: the first holds it (waiting at the gate)."""
    gate = Gate()
    subs = _open(
        root,
        opened,
        {"first": [_call("wait_here", "w1"), {"text": "one"}], "second": [{"text": "two"}]},
        max_concurrent=1,
    )
    parent = _parent(
        [
            _call("spawn_subagent", "s1", task="a", agent="first", mode="async"),
            _call("spawn_subagent", "s2", task="b", agent="second", mode="async"),
            {"text": "started"},
        ],
        subs,
        gate.tool,
    )
    await parent.run("go")
    await asyncio.wait_for(gate.started.wait(), 10)
    return gate, subs, parent


async def test_more_children_than_slots_wait_in_a_queue_and_each_slot_is_freed(
    root: Path, opened: list[Subagents]
) -> None:
    gate, subs, _ = await _two_for_one_slot(root, opened)
    try:
        assert [r.status for r in subs.store.list()] == ["working", "queued"]
        gate.opened.set()
        await until(lambda: all(r.finished for r in subs.store.list()), "both ended")
    finally:
        gate.opened.set()
        await subs.runtime.aclose()
    assert [(r.status, r.result) for r in subs.store.list()] == [
        ("completed", "one"),
        ("completed", "two"),
    ]


async def test_a_child_past_its_wall_time_is_stopped_by_the_runtime(
    root: Path, opened: list[Subagents]
) -> None:
    gate = Gate()  # never opened: only the deadline can end the child
    subs = _open(root, opened, {"stuck": [_call("wait_here", "w1")]}, wall_grace_s=0.0)
    parent = _parent(
        [
            _call("spawn_subagent", "s1", task="t", agent="stuck", budget={"wall_time_s": 0.2}),
            {"text": "gave up"},
        ],
        subs,
        gate.tool,
    )
    try:
        result = await parent.run("go")
    finally:
        await subs.runtime.aclose()
    (record,) = subs.store.list()
    assert record.status == "timed_out"
    assert "status=timed_out" in result.history[2].content  # type: ignore[union-attr]


async def test_stopping_the_parents_turn_cancels_the_children_it_spawned(
    root: Path, opened: list[Subagents]
) -> None:
    gate = Gate()
    subs = _open(root, opened, {"worker": [_call("wait_here", "w1")]})
    parent = _parent(
        [
            _call("spawn_subagent", "s1", task="t", agent="worker", mode="async"),
            _call("wait_here", "p1"),
        ],
        subs,
        gate.tool,
    )
    scope = CancelScope()
    run = asyncio.ensure_future(parent.run("go", cancel=scope))
    try:
        await until(lambda: [r.status for r in subs.store.list()] == ["working"], "working")
        scope.cancel("stop")
        await run
        await until(lambda: subs.store.list()[0].finished, "the child ended")
    finally:
        gate.opened.set()
        await subs.runtime.aclose()
    (record,) = subs.store.list()
    assert record.status == "cancelled" and "its parent was cancelled: stop" in record.error


async def test_a_stop_of_a_later_turn_of_the_session_cancels_its_children(
    root: Path, opened: list[Subagents]
) -> None:
    gate = Gate()
    subs = _open(root, opened, {"worker": [_call("wait_here", "w1")]})
    parent = _parent(
        [
            _call("spawn_subagent", "s1", task="t", agent="worker", mode="async"),
            {"text": "started"},
        ],
        subs,
        gate.tool,
    )
    try:
        await parent.run("go")  # the turn that spawned it has ended
        await asyncio.wait_for(gate.started.wait(), 10)
        later = parent.turn_state(history=[])
        subs.runtime.follow_turn("default", later)  # as `heron serve` does for every turn
        later.cancel.cancel("detach for a side question", mode="detach")
        await later.cancel.future  # its callbacks (the runtime's first) have run
        assert subs.store.list()[0].status == "working"  # a detaching interrupt is no stop
        later = parent.turn_state(history=[])
        subs.runtime.follow_turn("default", later)
        later.cancel.cancel("stop")
        await until(lambda: subs.store.list()[0].finished, "the child ended")
    finally:
        gate.opened.set()
        await subs.runtime.aclose()
    assert subs.store.list()[0].status == "cancelled"


async def test_a_question_nobody_answers_ends_at_its_deadline_and_the_child_goes_on(
    root: Path, opened: list[Subagents]
) -> None:
    subs = _open(
        root,
        opened,
        {
            "asker": [
                _call("ask_parent", "q1", question="which one?"),
                {"text": "status: blocked", "expect": {"last_message_contains": "no answer"}},
            ]
        },
        sync_timeout_s=0.2,
    )
    parent = _parent(
        [
            _call("spawn_subagent", "s1", task="t", agent="asker", mode="multi-turn"),
            {"text": "started"},
        ],
        subs,
    )
    try:
        await parent.run("go")
        await until(lambda: subs.store.list()[0].finished, "the child ended")
    finally:
        await subs.runtime.aclose()
    (record,) = subs.store.list()
    assert (record.status, record.result) == ("completed", "status: blocked")


async def test_cancel_reaches_a_child_still_waiting_for_a_slot(
    root: Path, opened: list[Subagents]
) -> None:
    gate, subs, parent = await _two_for_one_slot(root, opened)
    try:
        cancelled = await _tool(parent, "cancel_subagent").execute({"id": "s2"}, CTX)
        assert cancelled.success and cancelled.output.endswith("(second): cancelled")
        gate.opened.set()
        await until(lambda: all(r.finished for r in subs.store.list()), "both ended")
    finally:
        gate.opened.set()
        await subs.runtime.aclose()
    first, second = subs.store.list()
    assert (first.status, second.status) == ("completed", "cancelled")
    assert second.usage.model_calls == 0  # it never ran


@pytest.mark.parametrize("deliver", [False, True])
async def test_the_status_tool_hands_a_result_over_once_only_where_no_event_carries_it(
    root: Path, opened: list[Subagents], deliver: bool
) -> None:
    subs = _open(root, opened, {"quick": [{"text": "forty-two"}]}, deliver=deliver)
    parent = _parent(
        [_call("spawn_subagent", "s1", task="t", agent="quick", mode="async"), {"text": "ok"}],
        subs,
    )
    try:
        await parent.run("go")
        await until(lambda: subs.store.list()[0].finished, "the child ended")
        await subs.runtime.flush()
        status = _tool(parent, "get_subagent_status")
        first = await status.execute({"id": "s1"}, CTX)
        second = await status.execute({"id": "s1"}, CTX)
    finally:
        await subs.runtime.aclose()
    events = await subs.bus.events(session="default")
    if deliver:  # heron serve: the event is the one delivery
        assert [e.event.kind for e in events] == ["tool.result"]
        assert "forty-two" not in first.output and "an event for the spawn call" in first.output
    else:  # heron run, an MCP client: the status call is
        assert events == []
        assert "forty-two" in first.output and "[SUBAGENT_REPORT" in first.output
        assert "forty-two" not in second.output and "already delivered" in second.output


async def test_a_grandchilds_result_reaches_its_parent_child_even_where_the_top_has_no_loop(
    root: Path, opened: list[Subagents]
) -> None:
    subs = _open(
        root,
        opened,
        {
            "middle": [
                _call("spawn_subagent", "m1", task="leaf part", agent="leaf", mode="async"),
                {"text": "waiting for the leaf"},
                {"text": "middle done", "expect": {"last_message_contains": "leaf done"}},
            ],
            "leaf": [{"text": "leaf done", "delay_ms": 50}],
        },
        deliver=False,  # as in heron run: nothing consumes the top session's events
    )
    parent = _parent(
        [_call("spawn_subagent", "s1", task="t", agent="middle"), {"text": "ok"}], subs
    )
    try:
        result = await parent.run("go")
    finally:
        await subs.runtime.aclose()
    middle, leaf = subs.store.list()
    assert (middle.status, middle.result) == ("completed", "middle done")
    assert (leaf.status, leaf.delivered) == ("completed", True)
    assert "middle done" in result.history[2].content  # type: ignore[union-attr]


async def test_a_multi_turn_childs_question_is_in_its_status_and_the_answer_reaches_it(
    root: Path, opened: list[Subagents]
) -> None:
    subs = _open(
        root,
        opened,
        {
            "asker": [
                _call("ask_parent", "q1", question="which region?"),
                {"text": "deployed to eu-west", "expect": {"last_message_contains": "eu-west"}},
            ]
        },
        deliver=False,
    )
    parent = _parent(
        [
            _call("spawn_subagent", "s1", task="t", agent="asker", mode="multi-turn"),
            {"text": "started"},
        ],
        subs,
    )
    try:
        await parent.run("go")
        await until(lambda: subs.store.list()[0].status == "input_required", "it asks")
        status = await _tool(parent, "get_subagent_status").execute({"id": "s1"}, CTX)
        assert status.data["question"] == "which region?"
        sent = await _tool(parent, "send_message_to_subagent").execute(
            {"id": "s1", "text": "eu-west"}, CTX
        )
        assert sent.success
        await until(lambda: subs.store.list()[0].finished, "the child ended")
    finally:
        await subs.runtime.aclose()
    assert subs.store.list()[0].result == "deployed to eu-west"
