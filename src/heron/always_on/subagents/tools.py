"""The sub-agent tools: `spawn_subagent`, `send_message_to_subagent`, `get_subagent_status`,
`cancel_subagent`, `list_agents`, and the child's side, `report_to_parent` and `ask_parent`.

Each set is bound to one caller (`Parent`): a hosted session's agent, or a child (which gets
the spawning tools only while it is above the depth limit, and `ask_parent` only when it was
spawned `sync` or `multi-turn`). The tools are defined once, at import — their schemas and
validators are built once, not for every child — and each caller gets `Bound` copies that
carry its binding to the call in a context variable.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

from heron.always_on.subagents import prompts
from heron.always_on.subagents.child import ChildRunner
from heron.always_on.subagents.live import Live, Parent, Spawn
from heron.always_on.subagents.runtime import SubagentError, SubagentRuntime
from heron.always_on.subagents.store import Mode, SubagentRecord
from heron.tools.definition import Tool, ToolContext, ToolResult, ToolSpec
from heron.tools.function_tool import FunctionTool, tool
from heron.turn.context import TurnHandle

__all__ = ["Binding", "Bound", "bind_tools", "subagent_tools"]

_BUDGET_KEYS = frozenset({"model_calls", "total_tokens", "cost_usd", "wall_time_s"})

_Scalar = str | int | float | bool | None
_Json1 = _Scalar | list[_Scalar] | dict[str, _Scalar]
_Json2 = _Scalar | list[_Json1] | dict[str, _Json1]
_Json3 = _Scalar | list[_Json2] | dict[str, _Json2]
_Json4 = _Scalar | list[_Json3] | dict[str, _Json3]


def _result(record: SubagentRecord) -> ToolResult:
    text = prompts.frame_report(
        record.id,
        record.agent,
        status=record.status,
        outcome=record.outcome,
        text=record.result or record.error,
    )
    data = {
        "subagent": record.id,
        "status": record.status,
        "outcome": record.outcome,
        "usage": record.usage.to_data(),
    }
    return ToolResult(
        success=record.status == "completed",
        output=text,
        data=data,
        error=None if record.status == "completed" else record.status,
    )


def _asked(record: SubagentRecord, question: str) -> ToolResult:
    text = prompts.frame_report(
        record.id,
        record.agent,
        status="input_required",
        outcome=None,
        text=f"question: {question}\nAnswer with send_message_to_subagent(id={record.id!r}, "
        "text=...); the child's result will be the result of that call.",
    )
    return ToolResult.ok(text, data={"subagent": record.id, "status": "input_required"})


async def _sync_stop(runtime: SubagentRuntime, live: Live) -> ToolResult:
    kind, value = await runtime.wait_stop(live)
    if kind == "asked":
        return _asked(live.record, value)
    record = runtime.store.get(live.record.id) or live.record
    runtime.store.claim_delivery(record.id)
    return _result(record)


def _bound() -> tuple[SubagentRuntime, ChildRunner, Parent]:
    binding = _BINDING.get()
    return binding.runtime, binding.runner, binding.parent


def _turn(ctx: ToolContext) -> TurnHandle:
    if not isinstance(ctx.turn, TurnHandle):
        raise SubagentError("sub-agents can only be spawned from a running turn")
    return ctx.turn


@dataclass(frozen=True, kw_only=True, slots=True)
class Binding:
    """Who calls: the runtime, its child runner, the caller and how it was spawned."""

    runtime: SubagentRuntime
    runner: ChildRunner
    parent: Parent
    mode: Mode | None


_BINDING: ContextVar[Binding] = ContextVar("heron_subagent_binding")


@dataclass(frozen=True, slots=True)
class Bound:
    """One of the tools below, bound to a caller: the spec and validation are the tool's own
    (built once); the call runs with the binding in `_BINDING`."""

    tool: FunctionTool
    binding: Binding

    @property
    def spec(self) -> ToolSpec:
        return self.tool.spec

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return self.tool.validate(arguments)

    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        token = _BINDING.set(self.binding)
        try:
            return await self.tool.execute(arguments, ctx)
        finally:
            _BINDING.reset(token)


def bind_tools(
    runtime: SubagentRuntime, runner: ChildRunner, parent: Parent, mode: Mode | None
) -> list[Tool]:
    """The sub-agent tools of one caller (`mode`: how that caller was spawned; `None` for a
    hosted session's own agent)."""
    binding = Binding(runtime=runtime, runner=runner, parent=parent, mode=mode)
    tools: list[FunctionTool] = []
    if parent.depth < runtime.config.max_depth:
        tools += _PARENT_SIDE
    if parent.child is not None:
        tools.append(report_to_parent)
        if mode in ("sync", "multi-turn"):
            tools.append(ask_parent)
    return [Bound(t, binding) for t in tools]


@tool(owner="builtin")
async def spawn_subagent(
    ctx: ToolContext,
    task: str,
    agent: str | None = None,
    mode: Literal["sync", "async", "stream", "multi-turn"] = "sync",
    context: Literal["minimal", "distilled"] = "minimal",
    tools: list[str] | None = None,
    budget: dict[str, float] | None = None,
    output_schema: dict[str, _Json4] | None = None,
    write: bool = False,
) -> ToolResult:
    """Hand one self-contained task to a sub-agent (see list_agents for who exists). Use it
    for separable work that would flood your context, or work that can run while you go on.
    It cannot reach people, and gets at most your own tools, read-only unless `write`.

    `sync` waits for the result (or the child's question, which you answer with
    send_message_to_subagent). `async` returns an id now; the result arrives later as an
    event for this call. `stream` is async with the child's progress reports as events.
    `multi-turn` is async and the child may ask you questions (events) and wait.

    Args:
        task: The whole task, self-contained: goal, inputs, what to hand back.
        agent: An agent name from list_agents (default `general`).
        mode: `sync`, `async`, `stream` or `multi-turn`.
        context: `minimal` (only the task) or `distilled` (one extra model call writes a
            hand-off note from your work so far).
        tools: Narrow the child's tools to these names (never more than yours).
        budget: Limits, e.g. `{"model_calls": 5, "wall_time_s": 120}` (keys model_calls,
            total_tokens, cost_usd, wall_time_s); default: a share of what you have left.
        output_schema: A JSON Schema the child's final answer must match (checked; one
            corrective turn, then the spawn fails).
        write: Let the child change the workspace.
    """
    runtime, _, parent = _bound()
    unknown = sorted(set(budget or {}) - _BUDGET_KEYS)
    if unknown:
        return ToolResult.fail(f"unknown budget keys: {', '.join(unknown)}")
    spawn = Spawn(
        task=task,
        agent=agent,
        mode=mode,
        context=context,
        tools=tuple(tools) if tools is not None else None,
        budget=budget,
        output_schema=output_schema,
        write=write,
    )
    try:
        live = runtime.start(parent, _turn(ctx), ctx.call_id, spawn)
    except SubagentError as exc:  # a refused grant (GrantError) included
        return ToolResult.fail(str(exc))
    if mode != "sync":
        record = live.record
        return ToolResult.ok(
            f"started sub-agent {record.id} (agent {record.agent}, {mode}); its result "
            "arrives later as an event for this call. Go on with other work.",
            data={"subagent": record.id, "status": "queued"},
        )
    live.progress = ctx.progress
    return await _sync_stop(runtime, live)


@tool(owner="builtin")
async def send_message_to_subagent(
    ctx: ToolContext, id: str, text: str, interrupt: bool = False
) -> ToolResult:
    """Send one of your running sub-agents a message: the answer to its question, a
    correction, or new information. `interrupt` makes it urgent (the child stops its
    current step to read it). For a sync child that asked you, this call returns its
    result (or next question).

    Args:
        id: The sub-agent id spawn_subagent returned (or the id of that spawn call).
        text: The message.
        interrupt: Urgent: interrupt the child's current step.
    """
    runtime, runner, parent = _bound()
    try:
        live, answered = runtime.message(parent, id, text)
    except SubagentError as exc:
        return ToolResult.fail(str(exc))
    if live.record.mode == "sync":
        live.waited = True  # from now on its end is this call's result, never an event
    if not answered:
        await runner.send_input(live.record, text, interrupt=interrupt)
    if live.record.mode == "sync":  # the parent waits again, as the spawn did
        return await _sync_stop(runtime, live)
    return ToolResult.ok(f"sent to sub-agent {live.record.id}", data={"subagent": live.record.id})


@tool(owner="builtin", read_only=True)
async def get_subagent_status(ctx: ToolContext, id: str) -> ToolResult:
    """The status of one of your sub-agents (queued, working, input_required, completed,
    failed, cancelled, timed_out, lost), its outcome and usage, and its result once it has
    ended.

    Args:
        id: The sub-agent id.
    """
    runtime, _, parent = _bound()
    try:
        record = runtime.check_owner(parent, id)
    except SubagentError as exc:
        return ToolResult.fail(str(exc))
    data = record.to_data()
    data.pop("result")
    live = runtime.live.get(record.id)
    if live is not None and live.last_report:
        data["last_report"] = live.last_report
    if live is not None and live.answer is not None and not live.answer.done():
        data["question"] = live.question  # answer it with send_message_to_subagent
    events = runtime.delivers_events(record)
    if record.finished and not events and runtime.store.claim_delivery(record.id):
        # Nothing consumes this session's events (heron run, an MCP client): handed over here.
        return ToolResult.ok(_result(record).output, data=data)
    note = ""
    if record.finished:
        note = (
            " (its result is an event for the spawn call)"
            if events
            else " (its result was already delivered)"
        )
    return ToolResult.ok(json.dumps(data, sort_keys=True) + note, data=data)


@tool(owner="builtin")
async def cancel_subagent(ctx: ToolContext, id: str) -> ToolResult:
    """Cancel one of your sub-agents and everything it started.

    Args:
        id: The sub-agent id.
    """
    runtime, _, parent = _bound()
    try:
        id = runtime.check_owner(parent, id).id
    except SubagentError as exc:
        return ToolResult.fail(str(exc))
    ids = runtime.cancel_tree(id, "cancelled by its parent")
    await runtime.wait_ended(ids)
    ended = [r for r in (runtime.store.get(i) for i in ids) if r is not None]
    lines = [f"{r.id} ({r.agent}): {r.status}" for r in ended] or [f"{id} had already ended"]
    return ToolResult.ok("\n".join(lines), data={"cancelled": ids})


@tool(owner="builtin", read_only=True)
async def list_agents(ctx: ToolContext) -> ToolResult:
    """The agents you can spawn (name, description) and your sub-agents with their status.

    Returns:
        JSON: `{"agents": [...], "running": [...]}`.
    """
    runtime, _, parent = _bound()
    every = {"general": runtime.definition(None), **runtime.definitions}
    agents = [
        {"name": d.name, "description": d.description, "usable": d.usable} for d in every.values()
    ]
    running = []
    for record in runtime.store.list(root_session=parent.session):
        try:
            runtime.check_owner(parent, record.id)
        except SubagentError:
            continue
        running.append(
            {
                "id": record.id,
                "agent": record.agent,
                "status": record.status,
                "outcome": record.outcome,
                "parent": record.parent,
            }
        )
    data: dict[str, Any] = {"agents": agents, "running": running}
    return ToolResult.ok(json.dumps(data, sort_keys=True), data=data)


_PARENT_SIDE = [
    spawn_subagent,
    send_message_to_subagent,
    get_subagent_status,
    cancel_subagent,
    list_agents,
]


def _me() -> tuple[SubagentRuntime, ChildRunner, Live]:
    """The calling child, while it runs."""
    runtime, runner, me = _bound()
    found = runtime.live.get(me.child) if me.child is not None else None
    if found is None:
        raise SubagentError("this sub-agent is no longer running")
    return runtime, runner, found


@tool(owner="builtin")
async def report_to_parent(ctx: ToolContext, text: str) -> ToolResult:
    """Tell the agent that started you about progress worth knowing before you finish
    (not your final answer: that is your last message).

    Args:
        text: One or two sentences.
    """
    try:
        _, runner, child = _me()
    except SubagentError as exc:
        return ToolResult.fail(str(exc))
    record = child.record
    child.reports += 1
    framed = prompts.frame_report(
        record.id, record.agent, status="working", outcome=None, text=text
    )
    if record.mode == "sync":
        child.progress(f"{record.id}: {prompts.escape_labels(text)}")
    elif record.mode in ("stream", "multi-turn"):
        await runner.to_parent(record, framed, key=f"subagent.report:{record.id}:{child.reports}")
    child.last_report = text
    return ToolResult.ok("reported")


@tool(owner="builtin")
async def ask_parent(ctx: ToolContext, question: str) -> ToolResult:
    """Ask the agent that started you one precise question you cannot answer yourself,
    and wait for its answer.

    Args:
        question: The question, with the options you see.
    """
    try:
        runtime, runner, child = _me()
    except SubagentError as exc:
        return ToolResult.fail(str(exc))
    record = child.record
    child.asked += 1
    child.question = question
    child.answer = asyncio.get_running_loop().create_future()
    runtime.store.advance(record.id, "input_required")
    try:
        if record.mode == "sync":
            child.stops.put_nowait(("asked", prompts.escape_labels(question)))
        else:
            text = prompts.frame_report(
                record.id,
                record.agent,
                status="input_required",
                outcome=None,
                text=f"question: {question}\nAnswer with send_message_to_subagent("
                f"id={record.id!r}, text=...).",
            )
            key = f"subagent.ask:{record.id}:{child.asked}"
            await runner.to_parent(record, text, key=key, needs_reply=True)
        limit = runtime.config.sync_timeout_s
        try:
            async with asyncio.timeout(limit):
                answer = await child.answer
        except TimeoutError:
            return ToolResult.fail(
                f"no answer within {limit:g} s: go on without it, or end with "
                "'status: blocked' and say what you need"
            )
    finally:
        child.answer = None
        runtime.store.advance(record.id, "working")
    return ToolResult.ok(prompts.parent_message(answer))


def subagent_tools(runtime: SubagentRuntime, runner: ChildRunner, *, session: str) -> list[Tool]:
    """The tools of hosted session `session`'s own agent; also installs the factory that binds
    them to each child."""
    runtime.tool_factory = lambda parent, mode: bind_tools(runtime, runner, parent, mode)
    return bind_tools(runtime, runner, Parent(session=session), None)
