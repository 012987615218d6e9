"""The records a model call travels in through preparation, dispatch and collection."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pydantic_core import to_jsonable_python

from heron._support.limits import InputRejected, check_value
from heron.safety.redact import scrub_value
from heron.tools.definition import Tool
from heron.turn.bounds import render_bounded
from heron.turn.context import TurnState
from heron.turn.events import (
    InterruptPhase,
    PlanEvent,
    ToolCallEvent,
    ToolResultEvent,
    ToolStatus,
)


@dataclass(kw_only=True, slots=True)
class ParsedCall:
    """A model tool call, normalised from native or text-protocol output, id pinned."""

    index: int
    call_id: str
    name: str
    arguments: dict[str, Any]
    arguments_error: str | None = None
    """Set when the provider sent arguments that are not a JSON object."""
    arguments_problem: str | None = None
    """Set when the arguments broke an input limit (`heron._support.limits`: depth, size, a
    non-finite number, a lone surrogate); refused like an argument validation error."""


def checked_call(index: int, call_id: str, name: str, arguments: dict[str, Any]) -> ParsedCall:
    """A call whose arguments arrived as a value (a native adapter, a Python model, the text
    protocol, a tool calling a tool): the input check `parse_json` runs on argument text."""
    try:
        check_value(arguments)
    except InputRejected as exc:
        return ParsedCall(
            index=index, call_id=call_id, name=name, arguments={}, arguments_problem=exc.problem
        )
    return ParsedCall(index=index, call_id=call_id, name=name, arguments=arguments)


@dataclass(kw_only=True, slots=True)
class ExecutableCall:
    index: int
    call_id: str
    name: str
    arguments: dict[str, Any]
    """JSON arguments as executed (post-hook, post-prep), shown in events and receipted."""
    validated: dict[str, Any]
    """The tool's own validated values (may hold non-JSON types such as datetimes)."""
    tool: Tool
    original_arguments: dict[str, Any]
    arguments_json: str
    """`canonical_json(arguments)`, encoded once: the receipt and the observer record use it."""
    injected: tuple[str, ...] = ()
    risk: str | None = None
    """The risk tier the tool gave this call (`CallApproval`), when it judges each call."""


@dataclass(kw_only=True, slots=True)
class CallOutcome:
    """The terminal result of one slot. `output` is raw and unbounded (the data path)."""

    call_id: str
    name: str
    status: ToolStatus
    success: bool
    output: str
    duration_ms: float = 0.0
    receipt: str | None = None
    phase: InterruptPhase | None = None
    background_task: str | None = None
    executed: bool = False
    read_only: bool = False
    cached: bool = False
    visible: str | None = None
    """What the model sees instead of `output` when the output was spilled to storage."""
    data: Any = None
    """The tool's structured data (`ToolResult.data`), raw; the event carries a bounded copy."""
    loaded_tools: tuple[str, ...] = ()
    """Tools the call loaded into the session (`ToolResult.loaded_tools`)."""
    keep: bool = False
    """The result is protected from history trimming (`ToolResult.keep_in_context`)."""


def result_event(
    state: TurnState, outcome: CallOutcome, max_chars: int, *, shown: str | None = None
) -> ToolResultEvent:
    """The terminal card: the output as the model sees it, scrubbed, then bounded (`shown`,
    when the caller rendered it already)."""
    if shown is None:
        shown = render_bounded(outcome.visible or outcome.output, max_chars)
    return ToolResultEvent(
        turn_id=state.turn_id,
        id=outcome.call_id,
        name=outcome.name,
        success=outcome.success,
        status=outcome.status,
        output=shown,
        duration_ms=round(outcome.duration_ms, 3),
        receipt=outcome.receipt,
        phase=outcome.phase,
        background_task=outcome.background_task,
        cached=outcome.cached,
        **event_data(outcome.data, max_chars),
    )


def event_data(value: Any, max_chars: int) -> dict[str, Any]:
    """The `data` fields of a terminal event: `value` as JSON, scrubbed, whole or left out.

    A JSON structure cannot be cut part-way and stay JSON, so data longer than `max_chars` (when
    positive) is left out and its length reported in `data_omitted_chars`.
    """
    if value is None:
        return {}
    try:
        shown = scrub_value(to_jsonable_python(value, fallback=repr))
        size = len(json.dumps(shown, ensure_ascii=False, separators=(",", ":")))
    except (ValueError, TypeError, RecursionError) as exc:
        return {
            "data": f"[structured data not shown: not renderable as JSON ({type(exc).__name__})]"
        }
    if 0 < max_chars < size:
        return {"data_omitted_chars": size}
    return {"data": shown}


PLAN_TOOL = "update_plan"
"""The built-in plan tool (`heron.toolsets.plan`): its successful calls are followed by a
`plan` event carrying the whole plan."""


def plan_event(state: TurnState, call: ExecutableCall, outcome: CallOutcome) -> PlanEvent | None:
    """The `plan` event after a successful `update_plan` call, built from the arguments it ran
    with (so a cached result still reports the plan); None for any other call."""
    if call.name != PLAN_TOOL or call.tool.spec.owner != "builtin" or outcome.status != "ok":
        return None
    try:
        return PlanEvent(
            turn_id=state.turn_id,
            call_id=outcome.call_id,
            items=call.arguments.get("plan", ()),
            explanation=call.arguments.get("explanation"),
        )
    except ValidationError:
        return None  # the tool validated its arguments; a mismatch here is no plan to show


def emit_synthetic_pair(
    state: TurnState, arguments: dict[str, Any], outcome: CallOutcome, *, max_chars: int
) -> None:
    """A call that never ran still gets its pending card and its terminal card."""
    state.sink(
        ToolCallEvent(
            turn_id=state.turn_id,
            id=outcome.call_id,
            name=outcome.name,
            arguments=scrub_value(arguments),
        )
    )
    state.sink(result_event(state, outcome, max_chars))


def synthetic(call_id: str, name: str, status: ToolStatus, output: str) -> CallOutcome:
    return CallOutcome(
        call_id=call_id, name=name, status=status, success=status == "replaced", output=output
    )
