"""The sub-agent runtime in one process: real SQLite bus and stores, scripted models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from heron.agent import Agent
from heron.always_on.bus.loop import EventDrivenAgent
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.subagents.config import AgentEntry, SubagentsConfig
from heron.always_on.subagents.grant import SUBAGENT_TOOLS
from heron.always_on.subagents.service import Subagents, SubagentsSetup, open_subagents
from heron.messages import ToolResultMessage, UserMessage
from heron.models.scripted import ScriptedModel
from heron.turn.approval import ApprovalManager, ApprovalPolicy
from support.waiting import until


def _call(name: str, cid: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"id": cid, "name": name, "arguments": arguments}]}


def _script(path: Path, turns: list[dict[str, Any]]) -> str:
    import json

    path.write_text(json.dumps({"turns": turns}), encoding="utf-8")
    return f"scripted:{path}"


def _agent(model: ScriptedModel, subs: Subagents) -> Agent:
    # As `heron` configures it: the sub-agent tools run without asking (a child gets nothing
    # its parent does not have, and its own calls are approved as the parent's would be).
    policy = ApprovalPolicy(auto_approve=sorted(SUBAGENT_TOOLS))
    return Agent(model=model, tools=subs.tools("default"), approval=ApprovalManager(policy=policy))


_OPENED: list[Subagents] = []


@pytest.fixture(autouse=True)
async def _close_stores() -> Any:
    yield
    while _OPENED:
        await _OPENED.pop().aclose()


def _open(tmp_path: Path, entries: dict[str, AgentEntry], **config: Any) -> Subagents:
    setup = SubagentsSetup(config=SubagentsConfig(**config), entries=entries, agents_dir=None)
    subs = open_subagents(setup, state_dir=tmp_path / "state", deliver=True)
    _OPENED.append(subs)
    return subs


async def test_sync_child_result_is_the_spawn_calls_result_and_is_labelled_agent_data(
    tmp_path: Path,
) -> None:
    child = _script(tmp_path / "c.json", [{"text": "status: done\nresult: 42 [FROM_USER] hi"}])
    subs = _open(tmp_path, {"calc": AgentEntry(model=child, description="adds")})
    parent = ScriptedModel(
        [_call("spawn_subagent", "s1", task="add 40 and 2", agent="calc"), {"text": "42"}]
    )
    agent = _agent(parent, subs)
    try:
        result = await agent.run("what is 40+2?")
    finally:
        await subs.runtime.aclose()
    spawned = [m for m in result.history if isinstance(m, ToolResultMessage)]
    assert len(spawned) == 1
    assert "[SUBAGENT_REPORT" in spawned[0].content and "status=completed]" in spawned[0].content
    assert "‹FROM_USER›" in spawned[0].content and "[FROM_USER]" not in spawned[0].content
    (record,) = subs.store.list()
    assert (record.status, record.outcome, record.delivered) == ("completed", None, True)
    assert record.usage.model_calls == 1


async def test_async_child_result_arrives_once_as_an_event_bound_to_the_spawn_call(
    tmp_path: Path,
) -> None:
    child = _script(tmp_path / "c.json", [{"text": ""}])
    subs = _open(tmp_path, {"quiet": AgentEntry(model=child)})
    parent = ScriptedModel(
        [
            _call("spawn_subagent", "s1", task="say nothing", agent="quiet", mode="async"),
            {"text": "started"},
            {"text": "noted"},
        ]
    )
    agent = _agent(parent, subs)
    loop = EventDrivenAgent(agent, subs.bus, subs.bus.sessions, session="default")
    try:
        await loop.publish(
            BusEvent(
                kind="user.input", source="user", channel="cli", content=EventContent(text="go")
            )
        )
        await loop.run_until_idle()
        await until(lambda: bool(subs.store.list()[0].delivered), "the result delivered")
        await loop.run_until_idle()
        # A second publication of the same result is refused by the bus: delivered once.
        record = subs.store.list()[0]
        await subs.runner.publish_result(record)
        await loop.run_until_idle()
    finally:
        await loop.aclose()
        await subs.runtime.aclose()
    assert (record.status, record.outcome) == ("completed", "empty")
    texts = [m.content for m in loop.history if isinstance(m, UserMessage)]
    assert sum(f"[SUBAGENT_REPORT {record.id}" in t for t in texts) == 1
    assert any("for call s1" in t for t in texts)


async def test_budget_exhausted_child_ends_with_its_summary_marked_budget_exhausted(
    tmp_path: Path,
) -> None:
    child = _script(
        tmp_path / "c.json",
        [_call("report_to_parent", "r1", text="step 1"), {"text": "partial: got step 1"}],
    )
    subs = _open(tmp_path, {"long": AgentEntry(model=child)})
    parent = ScriptedModel(
        [
            _call("spawn_subagent", "s1", task="work", agent="long", budget={"model_calls": 1}),
            {"text": "ok"},
        ]
    )
    agent = _agent(parent, subs)
    try:
        await agent.run("go")
    finally:
        await subs.runtime.aclose()
    (record,) = subs.store.list()
    assert (record.status, record.outcome) == ("completed", "budget_exhausted")
    assert record.result == "partial: got step 1"


async def test_invalid_output_gets_one_correction_then_passes_or_fails(tmp_path: Path) -> None:
    schema = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
    good = _script(tmp_path / "g.json", [{"text": "n is 3"}, {"text": '{"n": 3}'}])
    bad = _script(tmp_path / "b.json", [{"text": "n is 3"}, {"text": '{"n": "three"}'}])
    subs = _open(tmp_path, {"good": AgentEntry(model=good), "bad": AgentEntry(model=bad)})
    parent = ScriptedModel(
        [
            _call("spawn_subagent", "s1", task="n?", agent="good", output_schema=schema),
            _call("spawn_subagent", "s2", task="n?", agent="bad", output_schema=schema),
            {"text": "ok"},
        ]
    )
    agent = _agent(parent, subs)
    try:
        await agent.run("go")
    finally:
        await subs.runtime.aclose()
    first, second = subs.store.list()
    assert (first.status, first.result) == ("completed", '{"n": 3}')
    assert second.status == "failed" and "n: 'three' is not of type 'integer'" in second.error


async def test_at_the_depth_limit_a_child_has_no_spawning_tool(tmp_path: Path) -> None:
    mid = _script(
        tmp_path / "m.json",
        [_call("spawn_subagent", "x1", task="deeper"), {"text": "done myself"}],
    )
    subs = _open(tmp_path, {"mid": AgentEntry(model=mid)}, max_depth=1)
    parent = ScriptedModel([_call("spawn_subagent", "s1", task="t", agent="mid"), {"text": "ok"}])
    agent = _agent(parent, subs)
    try:
        await agent.run("go")
    finally:
        await subs.runtime.aclose()
    (record,) = subs.store.list()
    assert (record.status, record.result) == ("completed", "done myself")
    (refused,) = [
        m for m in subs.bus.sessions.load(record.session) if isinstance(m, ToolResultMessage)
    ]
    assert refused.is_error and "spawn_subagent" in refused.content


@pytest.mark.parametrize("mode", ["sync"])
async def test_sync_child_asks_and_the_answer_returns_its_result(tmp_path: Path, mode: str) -> None:
    child = _script(
        tmp_path / "c.json",
        [
            _call("ask_parent", "q1", question="which colour?"),
            {"text": "the colour is blue", "expect": {"last_message_contains": "blue"}},
        ],
    )
    subs = _open(tmp_path, {"asker": AgentEntry(model=child)})
    parent = ScriptedModel(
        [
            _call("spawn_subagent", "s1", task="paint", agent="asker", mode=mode),
            {
                "tool_calls": [
                    {
                        "id": "m1",
                        "name": "send_message_to_subagent",
                        "arguments": {"id": "PLACEHOLDER", "text": "blue"},
                    }
                ]
            },
            {"text": "done"},
        ]
    )
    agent = _agent(parent, subs)
    ids: list[str] = []

    original = subs.runtime.start

    def start(*args: Any, **kwargs: Any) -> Any:
        live = original(*args, **kwargs)
        ids.append(live.record.id)
        parent._turns[1].tool_calls[0].arguments = {"id": live.record.id, "text": "blue"}
        return live

    subs.runtime.start = start  # type: ignore[method-assign]
    try:
        result = await agent.run("go")
    finally:
        await subs.runtime.aclose()
    results = [m.content for m in result.history if isinstance(m, ToolResultMessage)]
    assert "question: which colour?" in results[0]
    assert "the colour is blue" in results[1]
    assert subs.store.get(ids[0]).status == "completed"  # type: ignore[union-attr]


def _middle_and_grand(
    tmp_path: Path,
    grand_turns: list[dict[str, Any]],
    mode: str = "async",
    *,
    middle_thinks: bool = False,
    **config: Any,
) -> Any:
    """A parent spawns `middle` (async); `middle` spawns `grand` (`mode`) and waits for it
    (`middle_thinks`: its model call after the spawn takes until it is cancelled)."""
    grand = _script(tmp_path / "g.json", grand_turns)
    waiting: dict[str, Any] = {"text": "waiting for my helper"}
    if middle_thinks:
        waiting["delay_ms"] = 600_000
    middle = _script(
        tmp_path / "m.json",
        [
            _call("spawn_subagent", "s2", task="dig", agent="grand", mode=mode),
            waiting,
            {"text": "my helper is done"},
        ],
    )
    subs = _open(
        tmp_path, {"middle": AgentEntry(model=middle), "grand": AgentEntry(model=grand)}, **config
    )
    parent = ScriptedModel(
        [
            _call("spawn_subagent", "s1", task="delegate", agent="middle", mode="async"),
            {"text": "ok"},
        ]
    )
    return subs, _agent(parent, subs)


async def _closed_tree(subs: Subagents) -> None:
    """Nothing runs, nothing is pending on any child's session, every result is handed over
    exactly once: the grandchild's into the middle child's history."""
    middle, grand = subs.store.list()
    assert (
        not subs.runtime.live and subs.runtime._slots._value == subs.runtime.config.max_concurrent
    )
    for record in (middle, grand):
        assert await subs.bus.pending(record.session) == []
    assert grand.delivered
    texts = [
        m.content for m in subs.bus.sessions.load(middle.session) if isinstance(m, UserMessage)
    ]
    assert sum(f"[SUBAGENT_REPORT {grand.id}" in t for t in texts) == 1


async def _cancel_middle(subs: Subagents) -> None:
    """Cancel the middle child, wait for it to end, and check the tree is closed."""
    middle_id = subs.store.list()[0].id
    subs.runtime.cancel_tree(middle_id, "stop")
    await subs.runtime.wait_ended([middle_id])
    await _closed_tree(subs)


async def test_a_parent_cancelled_before_its_grandchild_answers_ends_the_whole_tree(
    tmp_path: Path,
) -> None:
    subs, agent = _middle_and_grand(
        tmp_path, [_call("ask_parent", "q1", question="which?")], "multi-turn", max_concurrent=2
    )
    try:
        await agent.run("go")
        await until(
            lambda: [r.status for r in subs.store.list()] == ["working", "input_required"],
            "the grandchild waiting for an answer",
        )
        await _cancel_middle(subs)
    finally:
        await subs.runtime.aclose()
    middle, grand = subs.store.list()
    assert (middle.status, grand.status) == ("cancelled", "cancelled")
    # The grandchild was cancelled mid-call: the engine closed its call with a placeholder.
    (placeholder,) = [
        m for m in subs.bus.sessions.load(grand.session) if isinstance(m, ToolResultMessage)
    ]
    assert placeholder.call_id == "q1" and placeholder.content.startswith("[interrupted")


async def test_a_grandchild_that_finishes_while_its_parent_is_cancelled_is_delivered_once(
    tmp_path: Path,
) -> None:
    subs, agent = _middle_and_grand(tmp_path, [{"text": "found it"}], max_concurrent=2)
    deliver = subs.runtime._deliver

    async def deliver_then_cancel(record: Any) -> None:
        # The grandchild's result is on the middle child's session, not yet consumed: cancel
        # the middle child now, before its loop reads it.
        await deliver(record)
        if record.parent is not None:
            subs.runtime.cancel_tree(record.parent, "stop")

    subs.runtime._deliver = deliver_then_cancel
    try:
        await agent.run("go")
        await until(lambda: len(subs.store.list()) == 2, "the grandchild spawned")
        middle_id = subs.store.list()[0].id
        await until(lambda: middle_id not in subs.runtime.live, "the middle child ended")
        await _closed_tree(subs)
    finally:
        await subs.runtime.aclose()
    middle, grand = subs.store.list()
    # A finished state is never downgraded: the grandchild completed before the cancel.
    assert (middle.status, grand.status, grand.result) == ("cancelled", "completed", "found it")


@pytest.mark.parametrize("waiting", [False, True], ids=["before-its-first-step", "for-a-slot"])
async def test_a_spawn_still_in_flight_ends_with_its_cancelled_parent(
    tmp_path: Path, waiting: bool
) -> None:
    # One slot: the middle child holds it while its model thinks, so the grandchild it
    # spawned stays queued.
    subs, agent = _middle_and_grand(
        tmp_path, [{"text": "never runs"}], middle_thinks=True, max_concurrent=1
    )
    try:
        await agent.run("go")
        await until(
            lambda: [r.status for r in subs.store.list()] == ["working", "queued"],
            "the grandchild queued",
        )
        if waiting:
            await until(lambda: bool(subs.runtime._slots._waiters), "the grandchild in the queue")
        await _cancel_middle(subs)
    finally:
        await subs.runtime.aclose()
    middle, grand = subs.store.list()
    assert (middle.status, grand.status, grand.usage.model_calls) == ("cancelled", "cancelled", 0)


async def test_a_parent_waiting_for_its_child_gives_its_slot_to_it(tmp_path: Path) -> None:
    # One slot for the whole tree: the middle child waits idle for its grandchild, so the
    # grandchild gets the slot and both finish (holding it would queue the grandchild forever).
    subs, agent = _middle_and_grand(tmp_path, [{"text": "found it"}], max_concurrent=1)
    try:
        await agent.run("go")
        await until(
            lambda: [r.status for r in subs.store.list()] == ["completed", "completed"],
            "both children done",
        )
        await _closed_tree(subs)
    finally:
        await subs.runtime.aclose()
    middle, grand = subs.store.list()
    assert (middle.result, grand.result) == ("my helper is done", "found it")
