"""Call preparation: everything between a parsed call and dispatch, in this order:

before-hooks → availability (unknown / excluded) → delivery defaults → scrub any model-supplied
approval marker → strict argument validation → known secrets (a secret's value is passed to no
tool; a placeholder `«secret:NAME»` to no tool that changes something) → duplicate guard → the
tool's judgement of this call (`approval_for`: its risk tier) → checks → prompt-required repeat
guard (every prompt-required tool by default) → approval gate (a durable front end gives the call
a placeholder result at once, status `awaiting_approval`; an operator's edit is validated again)
→ restore the runtime marker.

Calls that will not run get their terminal result here (one slot per original call) and their
pending/terminal event pair at once. A cancellation of the task running the turn while a hook, a
check or an approval is awaited is absorbed into the turn's scope: that call and the rest are
closed as not started, and the loop re-raises the `CancelledError` afterwards.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from heron._support.canonical import canonical_json
from heron.safety.secrets import PLACEHOLDER_PREFIX, known_secrets, placeholders_in
from heron.tools.definition import CallApproval, Tool, ToolArgumentsError, ToolSpec
from heron.tools.registry import normalize_name
from heron.turn.approval import ApprovalManager, ApprovalRequest, GateResult
from heron.turn.calls import CallOutcome, ExecutableCall, ParsedCall, emit_synthetic_pair, synthetic
from heron.turn.cancel import absorb, run_task, stop_task
from heron.turn.context import REENTRANT_TOOLS, ResolvedAgentExecution, TurnState
from heron.turn.events import (
    ApprovalDecisionEvent,
    ApprovalRequestEvent,
    InterruptPhase,
    ProgressEvent,
    ToolStatus,
)
from heron.turn.extensions import CheckRequest, CheckVerdict
from heron.turn.faults import hook_call, hook_failed
from heron.turn.hooks import run_before_hooks

MAX_LISTED_TOOLS = 25
NOT_STARTED = "[interrupted: the turn was cancelled before this call started; it did not run]"


@dataclass(kw_only=True, slots=True)
class TurnGuards:
    """Guard state that lives for the whole turn (across model responses)."""

    refused_signatures: set[str] = field(default_factory=set)
    """Approval-required calls an operator or policy refused; an identical repeat aborts."""


@dataclass(kw_only=True, slots=True)
class PreparedBatch:
    slots: list[CallOutcome | None]
    executable: list[ExecutableCall]
    any_prompted: bool = False
    activated_from_catalogue: list[str] = field(default_factory=list)
    """Tools resolved by exact name from the catalogue without `tool_search` (recorded)."""
    abort: str | None = None
    """Set when a guard stops the loop after this round."""


def call_signature(name: str, arguments: dict[str, Any], encoded: str | None = None) -> str:
    """The duplicate guards' key; `encoded` is `canonical_json(arguments)` when known."""
    return (
        name.strip().casefold()
        + "\x00"
        + (canonical_json(arguments) if encoded is None else encoded)
    )


def invalid_arguments_text(name: str, problems: Sequence[str]) -> str:
    """The result of a call refused for its arguments (validation, or the input limits)."""
    return (
        f"Error: invalid arguments for '{name}': "
        + "; ".join(problems)
        + ". Nothing was run; fix the arguments and call again."
    )


def _unknown_tool_text(name: str, exec_: ResolvedAgentExecution) -> str:
    names = exec_.registry.names() + (exec_.activated.names() if exec_.activated else [])
    listed = ", ".join(names[:MAX_LISTED_TOOLS]) + (" …" if len(names) > MAX_LISTED_TOOLS else "")
    return f"Unknown tool: '{name}'. Tools you can call: {listed or '(none)'}."


def _resolve(
    exec_: ResolvedAgentExecution,
    state: TurnState,
    call_id: str,
    name: str,
    batch: PreparedBatch,
) -> Tool | None:
    tool = exec_.registry.get(name)
    if tool is None and exec_.activated is not None:
        tool = exec_.activated.get(name)
    if tool is None and exec_.catalogue is not None:
        tool = exec_.catalogue.resolve(name)
        if tool is not None:
            # Like a tool_search batch: activation must not race the calls that use it.
            batch.activated_from_catalogue.append(tool.spec.name)
            state.sink(
                ProgressEvent(
                    turn_id=state.turn_id,
                    id=call_id,
                    name=tool.spec.name,
                    message=f"loaded '{tool.spec.name}' from the catalogue without tool_search",
                )
            )
    return tool


def is_excluded(exec_: ResolvedAgentExecution, state: TurnState, name: str) -> bool:
    """Agent-level `excluded_tools` plus this turn's filter-group exclusions."""
    if exec_.registry.is_excluded(name):
        return True
    if exec_.allowed is not None and name not in exec_.allowed:
        return True
    return bool(state.excluded) and normalize_name(name) in state.excluded


async def prepare_calls(
    exec_: ResolvedAgentExecution,
    state: TurnState,
    calls: list[ParsedCall],
    guards: TurnGuards,
) -> PreparedBatch:
    batch = PreparedBatch(slots=[None] * len(calls), executable=[])
    knobs = exec_.knobs
    seen: set[str] = set()
    prompted_this_round: set[str] = set()

    def refuse(
        call: ParsedCall,
        name: str,
        args: dict[str, Any],
        status: ToolStatus,
        text: str,
        phase: InterruptPhase | None = None,
    ) -> None:
        outcome = synthetic(call.call_id, name, status, text)
        outcome.phase = phase
        batch.slots[call.index] = outcome
        emit_synthetic_pair(state, args, outcome, max_chars=knobs.max_tool_result_chars)

    for call in calls:
        if state.cancel.cancelled and batch.abort is None:
            refuse(call, call.name, call.arguments, "interrupted", NOT_STARTED, "not_started")
            continue
        if batch.abort is not None:
            refuse(
                call,
                call.name,
                call.arguments,
                "interrupted",
                _guard_stop_text(call.name),
                phase="not_started",
            )
            continue
        if call.arguments_error is not None:
            refuse(
                call,
                call.name,
                call.arguments,
                "error",
                f"Error: the arguments for '{call.name}' are not a JSON object "
                f"({call.arguments_error}). Nothing was run; send valid JSON arguments.",
            )
            continue
        if call.arguments_problem is not None:
            refuse(
                call,
                call.name,
                call.arguments,
                "error",
                invalid_arguments_text(call.name, [call.arguments_problem]),
            )
            continue

        name, args, cancel_reason = call.name, call.arguments, None
        if exec_.hooks:
            try:
                name, args, cancel_reason = await run_before_hooks(
                    exec_.hooks,
                    hook_call(state, call.call_id, call.name, call.arguments),
                    hook_failed(state, call.call_id),
                )
            except asyncio.CancelledError as exc:
                absorb(state.cancel, exc)
                refuse(call, call.name, call.arguments, "interrupted", NOT_STARTED, "not_started")
                continue
        if cancel_reason is not None:
            refuse(
                call,
                call.name,
                call.arguments,
                "hook_cancelled",
                f"Cancelled by hook: {cancel_reason}",
            )
            continue

        if is_excluded(exec_, state, name):
            refuse(call, name, args, "excluded", f"Not available in this turn: '{name}'.")
            continue
        tool = _resolve(exec_, state, call.call_id, name, batch)
        if tool is None:
            refuse(call, name, args, "unknown", _unknown_tool_text(name, exec_))
            continue
        spec = tool.spec
        if is_excluded(exec_, state, spec.name):
            refuse(call, name, args, "excluded", f"Not available in this turn: '{name}'.")
            continue
        name = spec.name

        args = dict(args)
        injected: list[str] = []
        if spec.channel_aware and not args.get("channel") and state.channel:
            args["channel"] = state.channel
            injected.append("channel")
        has_marker = "approved" in spec.runtime_args
        if has_marker:
            args["approved"] = False  # a model can never approve itself

        try:
            validated = tool.validate(args)
        except ToolArgumentsError as exc:
            refuse(
                call,
                name,
                args,
                "error",
                invalid_arguments_text(name, exc.problems),
            )
            continue

        arguments_json = canonical_json(args)
        refusal = _secret_refusal(spec, args, arguments_json)
        if refusal is not None:
            status, text = refusal
            refuse(call, name, args, status, text)
            continue

        encoded: str | None = arguments_json
        sig = call_signature(name, args, encoded)
        # Duplicates are dropped before anyone is asked: an operator never approves a call
        # that would then be skipped.
        if knobs.dedup and name not in knobs.dedup_exempt and name not in REENTRANT_TOOLS:
            if sig in seen:
                refuse(call, name, args, "duplicate", _duplicate_text(name))
                continue
            seen.add(sig)

        judged = _judge(tool, validated)
        requirement = exec_.approval.requirement(spec, judged)
        escalation: str | None = None
        if exec_.checks:
            try:
                verdict = await run_checks(exec_, state, call.call_id, spec, args)
            except asyncio.CancelledError as exc:
                absorb(state.cancel, exc)
                refuse(call, name, args, "interrupted", NOT_STARTED, "not_started")
                continue
            if verdict is not None and verdict.decision == "refuse":
                exec_.approval.record_refusal(
                    spec,
                    args,
                    call_id=call.call_id,
                    turn_id=state.turn_id,
                    decided_by=f"check:{verdict.reason.split(':', 1)[0]}",
                    reason=verdict.reason,
                    risk=judged.risk if judged is not None else None,
                )
                refuse(call, name, args, "denied", f"Refused before running: {verdict.reason}")
                continue
            if verdict is not None and verdict.decision == "escalate":
                requirement = "prompt"
                escalation = verdict.reason
        if requirement == "prompt":
            batch.any_prompted = True
            guarded = "*" in knobs.prompt_guard_tools or name in knobs.prompt_guard_tools
            if guarded:
                if sig in prompted_this_round:
                    refuse(call, name, args, "duplicate", _duplicate_text(name))
                    continue
                if sig in guards.refused_signatures:
                    batch.abort = (
                        f"'{name}' was already refused approval with identical arguments in this "
                        "turn; heron stops the loop instead of asking the operator again"
                    )
                    refuse(call, name, args, "denied", f"Not run: {batch.abort}.")
                    continue
                prompted_this_round.add(sig)
            gate = await _decide(
                exec_.approval,
                spec,
                args,
                state=state,
                grace_s=knobs.cancel_grace_s,
                call_id=call.call_id,
                turn_id=state.turn_id,
                channel=state.channel,
                reason=escalation,
                call=judged,
                on_request=lambda req: state.sink(_request_event(state, req)),
                on_decision=lambda req, decision, by: state.sink(
                    ApprovalDecisionEvent(
                        turn_id=state.turn_id,
                        request_id=req.request_id,
                        call_id=req.call_id,
                        tool=req.tool,
                        decision=decision,
                        decided_by=by,
                    )
                ),
            )
            if gate is None:
                refuse(
                    call,
                    name,
                    args,
                    "interrupted",
                    _approval_cancelled_text(name),
                    phase="not_started",
                )
                continue
            if not gate.proceed:
                if guarded and gate.status == "denied":
                    guards.refused_signatures.add(sig)
                refuse(call, name, args, gate.status or "denied", gate.output)
                continue
            if gate.arguments is not None:  # an edit: the operator's arguments, checked again
                args = dict(gate.arguments)
                encoded = None
                if has_marker:
                    args["approved"] = False
                try:
                    validated = tool.validate(args)
                except ToolArgumentsError as exc:
                    refuse(
                        call,
                        name,
                        args,
                        "error",
                        f"Error: the operator's edited arguments for '{name}' are invalid: "
                        + "; ".join(exc.problems)
                        + ". Nothing was run.",
                    )
                    continue
            approved = gate.approved
        else:
            approved = requirement == "approved"
            if approved:
                exec_.approval.count_auto(
                    spec, args, call_id=call.call_id, turn_id=state.turn_id, call=judged
                )

        if has_marker:
            args["approved"] = approved
            validated["approved"] = approved
            encoded = None
            if approved:
                injected.append("approved")

        batch.executable.append(
            ExecutableCall(
                index=call.index,
                call_id=call.call_id,
                name=name,
                arguments=args,
                validated=validated,
                tool=tool,
                original_arguments=call.arguments,
                arguments_json=canonical_json(args) if encoded is None else encoded,
                injected=tuple(injected),
                risk=judged.risk if judged is not None else None,
            )
        )
    for stale in state.prechecks.values():
        stale.cancel()  # checks of calls a hook rewrote or refused: nobody will read them
    state.prechecks.clear()
    if batch.abort is not None:
        # Calls prepared before the guard fired do not run either.
        for ex in batch.executable:
            outcome = synthetic(ex.call_id, ex.name, "interrupted", _guard_stop_text(ex.name))
            outcome.phase = "not_started"
            batch.slots[ex.index] = outcome
            emit_synthetic_pair(state, ex.arguments, outcome, max_chars=knobs.max_tool_result_chars)
        batch.executable = []
    return batch


def _secret_refusal(
    spec: ToolSpec, args: dict[str, Any], encoded: str
) -> tuple[ToolStatus, str] | None:
    """Why a call that carries a known secret, or a placeholder to a tool that changes
    something, does not run; None when it may. `encoded` is `canonical_json(args)`."""
    names = known_secrets().names_in(args)
    if names:
        listed = ", ".join(names)
        return "denied", (
            f"Not run: the arguments of '{spec.name}' contain the value of {listed}, a secret "
            "heron holds for its own consumer only; heron passes it to no tool. Nothing was run."
        )
    # JSON escapes none of the prefix's characters: text without it has no placeholder.
    if spec.annotations.read_only or PLACEHOLDER_PREFIX not in encoded:
        return None
    marks = placeholders_in(args)
    if not marks:
        return None
    shown = ", ".join(f"«secret:{n}»" for n in marks)
    return "error", (
        f"Error: the arguments of '{spec.name}' contain {shown}, the placeholder heron shows in "
        "place of a secret's value. The tool would act on that placeholder text, not on the "
        "secret, so heron did not run it. Nothing was run. Leave the secret where it is (edit "
        "around it, without quoting the placeholder), or ask the user to make that change."
    )


def _judge(tool: Tool, validated: dict[str, Any]) -> CallApproval | None:
    """The tool's own judgement of this call (`approval_for`), if it has one. A judge that
    fails makes the call high risk: an operator decides."""
    judge = getattr(tool, "approval_for", None)
    if judge is None:
        return None
    try:
        judged = judge(validated)
    except Exception as exc:
        return CallApproval(
            risk="high",
            unattended=False,
            note=f"the tool could not judge this call ({type(exc).__name__}: {exc})",
        )
    return judged if isinstance(judged, CallApproval) else None


def start_check(
    exec_: ResolvedAgentExecution,
    state: TurnState,
    call_id: str,
    spec: ToolSpec,
    args: dict[str, Any],
) -> None:
    """Start the applicable call checks now (while the model may still be streaming)."""
    for check in exec_.checks:
        if check.applies_to(spec):
            request = CheckRequest(call_id=call_id, tool=spec.name, arguments=args, spec=spec)
            task = asyncio.get_running_loop().create_task(check.check(request))
            state.prechecks[f"{call_id}\x00{check.name}\x00{call_signature(spec.name, args)}"] = (
                task
            )


async def run_checks(
    exec_: ResolvedAgentExecution,
    state: TurnState,
    call_id: str,
    spec: ToolSpec,
    args: dict[str, Any],
) -> CheckVerdict | None:
    """The combined verdict of every applicable check: a refusal wins, then an escalation.

    A check that fails escalates: when a safety check cannot answer, a human decides.
    """
    checks = [c for c in exec_.checks if c.applies_to(spec)]
    if not checks:
        return None
    signature = call_signature(spec.name, args)
    state.sink(
        ProgressEvent(
            turn_id=state.turn_id,
            id=call_id,
            name=spec.name,
            message="checking the call: " + ", ".join(c.name for c in checks),
        )
    )
    tasks = []
    for check in checks:
        task = state.prechecks.pop(f"{call_id}\x00{check.name}\x00{signature}", None)
        if task is None:
            request = CheckRequest(call_id=call_id, tool=spec.name, arguments=args, spec=spec)
            task = asyncio.get_running_loop().create_task(check.check(request))
        tasks.append(task)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    verdicts = [
        r
        if isinstance(r, CheckVerdict)
        else CheckVerdict(decision="escalate", reason=f"{c.name} could not decide ({r!r})")
        for c, r in zip(checks, results, strict=True)
    ]
    for decision in ("refuse", "escalate"):
        for check, verdict in zip(checks, verdicts, strict=True):
            if verdict.decision == decision:
                return CheckVerdict(decision=decision, reason=f"{check.name}: {verdict.reason}")
    return CheckVerdict(decision="allow")


async def _decide(
    manager: ApprovalManager,
    spec: ToolSpec,
    args: dict[str, Any],
    *,
    state: TurnState,
    grace_s: float,
    **kwargs: Any,
) -> GateResult | None:
    """The approval decision, or None when the turn was cancelled while waiting for it."""
    # A cancellation of another task than the turn's (a tool's nested call) cancels the
    # decision and propagates.
    task, finished = await run_task(manager.decide(spec, args, **kwargs), state.cancel)
    if finished == "done":
        return task.result()
    await stop_task(task, state.cancel, grace_s)
    return None


def _approval_cancelled_text(name: str) -> str:
    return (
        f"[interrupted: the turn was cancelled while '{name}' waited for approval; it did not run]"
    )


def _duplicate_text(name: str) -> str:
    return (
        f"Skipped duplicate call: '{name}' was already called with identical arguments in this "
        "response; use that result."
    )


def _guard_stop_text(name: str) -> str:
    return f"[not started: heron stopped the loop before '{name}' ran]"


def _request_event(state: TurnState, req: ApprovalRequest) -> ApprovalRequestEvent:
    return ApprovalRequestEvent(
        turn_id=state.turn_id,
        request_id=req.request_id,
        call_id=req.call_id,
        tool=req.tool,
        summary=req.summary,
        reason=req.reason,
        risk=req.risk,
    )
