"""Dispatch: run prepared calls sequentially or in parallel, honouring cancellation.

Parallel only when the knob allows it, the batch has more than one executable call, no call in
the response needed approval, no call is `tool_search`, and (in `read-only` mode) every call is
read-only. Each executed call emits its pending `tool_call` event immediately before it runs and
its terminal `tool_result` when it ends. Calls that never started get both at cancellation.

A plain asyncio cancellation of the task running the turn is absorbed into the turn's scope
(`heron.turn.cancel.absorb`) wherever dispatch waits, so it closes the batch exactly like
`CancelScope.cancel()`: finished calls keep their real results, the others are interrupted, and
the loop re-raises the `CancelledError` afterwards. An observer or after-hook that raises is
reported (`extension_error`) and the call goes on.

What a timeout or an interrupt stopped is said truthfully (`Ending`): a task that unwound, a
worker process heron killed, a worker thread that is still running (heron cannot stop it), or
a task that ignored its cancellation. A non-idempotent threaded tool is not started again while
an earlier call of it still runs in its thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from typing import Any, Literal, assert_never

from pydantic_core import to_jsonable_python

from heron._support.canonical import canonical_json
from heron._support.limits import InputRejected, check_value, clean_text, clean_value
from heron.safety.redact import scrub_text, scrub_value
from heron.safety.secrets import known_secrets
from heron.tools.definition import ToolContext, ToolResult
from heron.turn.bounds import render_bounded
from heron.turn.call_prep import NOT_STARTED, PreparedBatch, TurnGuards, prepare_calls
from heron.turn.calls import (
    CallOutcome,
    ExecutableCall,
    checked_call,
    emit_synthetic_pair,
    plan_event,
    result_event,
)
from heron.turn.cancel import absorb, run_task, stop_task
from heron.turn.context import (
    BackgroundResult,
    Receipt,
    ResolvedAgentExecution,
    RuntimeKnobs,
    TurnState,
)
from heron.turn.events import InterruptPhase, ProgressEvent, ToolCallEvent
from heron.turn.faults import hook_failed, notify, observer_failed
from heron.turn.hooks import HookCall, HookOutcome, run_after_hooks
from heron.turn.observer import NullObserver, ToolCallRecord, ToolCallStartRecord

TOOL_SEARCH = "tool_search"
OBSERVER_MAX_CHARS = 1000

Ending = Literal["stopped", "killed", "thread", "unstopped"]
"""What became of a call's work once heron stopped waiting for it: its task unwound, its worker
process was killed, its worker thread runs on (a thread cannot be stopped), or its task did not
unwind within `cancel_grace_s`."""


def should_run_parallel(knobs: RuntimeKnobs, batch: PreparedBatch, names: Sequence[str]) -> bool:
    """Whether this batch runs concurrently; an unknown `parallel` mode is an error."""
    eligible = (
        len(batch.executable) > 1
        and not batch.any_prompted
        and not batch.activated_from_catalogue
        and TOOL_SEARCH not in names
    )
    match knobs.parallel:
        case "off":
            return False
        case "read-only":
            return eligible and all(c.tool.spec.annotations.read_only for c in batch.executable)
        case "all":
            return eligible
        case unknown:
            assert_never(unknown)


async def execute_batch(
    exec_: ResolvedAgentExecution, state: TurnState, batch: PreparedBatch, *, parallel: bool
) -> None:
    """Fill every executable slot of `batch` with a terminal outcome."""
    calls = batch.executable
    if parallel:
        for call, outcome in zip(calls, await _run_parallel(exec_, state, calls), strict=True):
            batch.slots[call.index] = outcome
        return
    for call in calls:
        if state.cancel.cancelled:
            break
        batch.slots[call.index] = await execute_one(exec_, state, call)
    for call in calls:
        if batch.slots[call.index] is None:
            outcome = interrupted(call, "not_started")
            batch.slots[call.index] = outcome
            emit_synthetic_pair(
                state, call.arguments, outcome, max_chars=exec_.knobs.max_tool_result_chars
            )


async def _run_parallel(
    exec_: ResolvedAgentExecution, state: TurnState, calls: Sequence[ExecutableCall]
) -> list[CallOutcome]:
    """Run `calls` concurrently. A cancellation of the waiting task becomes a scope cancel, so
    every call still ends with its own outcome (finished ones keep their real result)."""
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(execute_one(exec_, state, c)) for c in calls]
    while True:
        try:
            await asyncio.wait(tasks)
            break
        except asyncio.CancelledError as exc:
            try:
                absorb(state.cancel, exc)
            except asyncio.CancelledError:
                for task in tasks:
                    task.cancel()
                raise
    return [task.result() for task in tasks]


def interrupted(
    call: ExecutableCall,
    phase: InterruptPhase,
    task_id: str | None = None,
    *,
    ending: Ending = "stopped",
) -> CallOutcome:
    """The interrupted result of a call, worded by how far it got (`phase`) and, for a call
    cancelled while running, by what became of its work (`ending`)."""
    ann = call.tool.spec.annotations
    match phase:
        case "not_started":
            text = NOT_STARTED
        case "running_in_background":
            text = (
                f"[still running in the background as task {task_id}: the turn was interrupted, "
                "and the result will arrive later as a new event. Handle the new message first.]"
            )
        case "cancelled_while_running":
            text = _INTERRUPTED_TEXT[ending]
            if ending == "thread" and ann.read_only:
                text += " Its result will be discarded."
            elif ending == "thread" and not ann.idempotent:
                text += (
                    " Outcome unknown: its effects may still land. heron will not start "
                    f"'{call.name}' again until it has finished; check the current state first."
                )
            elif not (ann.read_only or ann.idempotent):
                text += (
                    " Outcome unknown: it may have taken effect in part or in full. Do not retry "
                    "blindly; check the current state first."
                )
        case unknown:
            assert_never(unknown)
    return CallOutcome(
        call_id=call.call_id,
        name=call.name,
        status="interrupted",
        success=False,
        output=text,
        read_only=ann.read_only,
        phase=phase,
        background_task=task_id,
    )


_INTERRUPTED_TEXT: dict[Ending, str] = {
    "stopped": "[interrupted: cancelled while running]",
    "killed": "[interrupted: cancelled while running; heron killed its worker process]",
    "thread": (
        "[interrupted: cancelled, but it is still running in a worker thread (heron cannot stop "
        "a thread)]"
    ),
    "unstopped": "[interrupted: cancelled, but it had not stopped when heron stopped waiting]",
}


def _timeout_text(call: ExecutableCall, limit_s: float, ending: Ending) -> str:
    """The error a timed-out call gets: what happened to its work, and whether to retry."""
    head = f"Error: '{call.name}' timed out after {limit_s:g} s"
    ann = call.tool.spec.annotations
    safe = ann.read_only or ann.idempotent
    match ending:
        case "stopped":
            return f"{head} and was stopped."
        case "killed":
            text = f"{head} and was stopped: heron killed its worker process."
            if not safe:
                text += " Anything it did before that stays done; check the current state first."
            return text
        case "thread":
            text = (
                f"{head} and is still running: heron cannot stop a worker thread, so its outcome "
                "is unknown and its effects may still land."
            )
            if ann.read_only:
                return text + " Its result will be discarded."
            if ann.idempotent:
                return text + " It is idempotent: calling it again is safe."
            return (
                text + f" Do not retry: heron will not start '{call.name}' again until it has "
                "finished. Check the current state first."
            )
        case "unstopped":
            text = (
                f"{head}; heron cancelled it, but it had not stopped when heron stopped waiting "
                "and may still be running."
            )
            if not safe:
                text += " Outcome unknown: do not retry blindly; check the current state first."
            return text
        case unknown:
            assert_never(unknown)


def _ending(call: ExecutableCall, unwound: bool) -> Ending:
    """What became of a call's work after heron cancelled its task (`unwound`: the task ended)."""
    match call.tool.spec.runs_in:
        case "process":
            return "killed" if unwound else "unstopped"
        case "thread":
            # A thread runs on unless its tool says it returned (a tool that cannot say is
            # assumed to be running still).
            if not hasattr(call.tool, "still_running") or call.call_id in _still_running(call.tool):
                return "thread"
        case "event_loop":
            pass
        case unknown:
            assert_never(unknown)
    return "stopped" if unwound else "unstopped"


def _still_running(tool: object) -> tuple[str, ...]:
    """The call ids a threaded tool is still running after heron stopped waiting for them."""
    still_running = getattr(tool, "still_running", None)
    return still_running() if still_running is not None else ()


def _busy_text(call: ExecutableCall, running: Sequence[str]) -> str:
    return (
        f"Error: '{call.name}' was not started: an earlier call of it ({', '.join(running)}) is "
        "still running in a worker thread after heron stopped waiting for it, and the tool is not "
        "idempotent. Nothing was run. Check the current state; call it again once that run has "
        "finished."
    )


def _map_result(call: ExecutableCall, result: Any) -> tuple[bool, str]:
    """Success and the text the model sees: this is where a tool's output enters the data path.

    Every known secret becomes its placeholder first, then what is not Unicode (a file name's
    undecodable byte) gets the documented replacement (`clean_text`): masking sees the text as
    the tool produced it, so a secret whose value holds undecodable bytes (the environment's
    `surrogateescape`) still matches, and nothing the replacement writes can form a secret.
    Both come before any bound on the text (`render_bounded`), which so never cuts a secret
    in half and leaves a prefix of it unmasked.
    """
    success, text = _mapped(call, result)
    return success, _taken_in_text(text)


def _taken_in_text(text: str) -> str:
    return clean_text(known_secrets().mask(text))


def _mapped(call: ExecutableCall, result: Any) -> tuple[bool, str]:
    if not isinstance(result, ToolResult):
        return False, f"Error: '{call.name}' returned {type(result).__name__}, not a ToolResult"
    if result.success:
        return True, result.output or "(no output)"
    reason = result.error or result.output or "the tool failed without a message"
    if result.error and result.output:
        return False, f"Error: {reason}\n{result.output}"
    return False, f"Error: {reason}"


def _raised(call: ExecutableCall, exc: BaseException) -> str:
    return _taken_in_text(f"Error: '{call.name}' raised {type(exc).__name__}: {exc}")


def taken_in_data(data: Any) -> tuple[Any, str]:
    """A tool's structured data checked against the input limits where it enters the engine.

    Returns the data to keep (with known secrets as placeholders, and the text replacement
    applied where needed) and a note for the output: data nested deeper or larger than the
    limits, or not renderable as JSON, is dropped (the text result stays) and the note says
    why. The limits come first (masking walks the value recursively; after the check it is at
    most `max_depth` deep), then the masking, then the replacement, as for the text
    (`_map_result`).
    """
    shown = data
    try:
        try:
            odd = check_value(shown, strict_text=False)
        except InputRejected as exc:
            if exc.kind != "type":
                raise
            # Not plain JSON (a datetime, a model): checked as the event will render it.
            shown = to_jsonable_python(data, fallback=repr)
            odd = check_value(shown, strict_text=False)
    except InputRejected as exc:
        return None, f"\n[structured data not kept: {exc.problem}]"
    except ValueError as exc:  # pydantic's own serialisation depth guard
        return None, f"\n[structured data not kept: {exc}]"
    known = known_secrets()
    return (clean_value(known.mask_value(shown)) if odd else known.mask_value(data)), ""


async def execute_one(
    exec_: ResolvedAgentExecution, state: TurnState, call: ExecutableCall
) -> CallOutcome:
    spec = call.tool.spec
    knobs = exec_.knobs
    if state.cancel.cancelled:  # a parallel sibling scheduled after the cancel
        return _not_started(exec_, state, call)
    if (
        spec.runs_in == "thread"
        and not (spec.annotations.read_only or spec.annotations.idempotent)
        and (running := _still_running(call.tool))
    ):
        outcome = CallOutcome(
            call_id=call.call_id,
            name=call.name,
            status="error",
            success=False,
            output=_busy_text(call, running),
        )
        emit_synthetic_pair(state, call.arguments, outcome, max_chars=knobs.max_tool_result_chars)
        return outcome
    # One scrub serves the card and the observer record.
    shown = scrub_value(call.arguments)
    state.sink(
        ToolCallEvent(
            turn_id=state.turn_id,
            id=call.call_id,
            name=call.name,
            arguments=shown,
            owner=spec.owner,
            injected=call.injected,
            risk=call.risk,
        )
    )
    # No observer, no records: their JSON rendering is the cost of a call's cards again.
    started_record = (
        ToolCallStartRecord(
            tool=call.name,
            call_id=call.call_id,
            arguments=canonical_json(shown)[:OBSERVER_MAX_CHARS],
            turn_id=state.turn_id,
            owner=spec.owner,
            channel=state.channel,
            agent=exec_.agent,
            parent_agent=exec_.parent_agent,
            risk=call.risk,
        )
        if type(exec_.observer) is not NullObserver
        else None
    )
    if started_record is not None:
        notify(exec_.observer, started_record, observer_failed(state, call.call_id))

    loop = asyncio.get_running_loop()
    loop_thread = threading.get_ident()

    def emit_progress(message: str) -> None:
        state.sink(
            ProgressEvent(
                turn_id=state.turn_id,
                id=call.call_id,
                name=call.name,
                message=clean_text(scrub_text(message)),  # masked first, as `_map_result`
            )
        )

    def progress(message: str) -> None:
        # Sync tools run in worker threads; sinks are only ever called on the loop's thread.
        if threading.get_ident() == loop_thread:
            emit_progress(message)
        else:
            loop.call_soon_threadsafe(emit_progress, message)

    nested = 0

    async def call_tool(name: str, arguments: dict[str, Any]) -> ToolResult:
        nonlocal nested
        nested += 1
        return await run_nested_call(exec_, state, f"{call.call_id}.{nested}", name, arguments)

    ctx = ToolContext(
        call_id=call.call_id,
        turn_id=state.turn_id,
        channel=state.channel,
        agent=exec_.agent,
        progress=progress,
        call_tool=call_tool,
        workspace=exec_.workspace,
    )
    started = time.perf_counter()
    cached = (
        exec_.cache.get(spec, call.arguments)
        if exec_.cache is not None and spec.annotations.read_only
        else None
    )
    if cached is not None:
        outcome = CallOutcome(
            call_id=call.call_id,
            name=call.name,
            status="ok",
            success=True,
            output=cached,
            duration_ms=(time.perf_counter() - started) * 1000,
            read_only=True,
            cached=True,
        )
        return _finish(exec_, state, call, outcome, started_record)
    limit = knobs.tool_timeout_s
    if spec.timeout_s is not None and (limit is None or spec.timeout_s < limit):
        limit = spec.timeout_s
    try:
        task, finished = await run_task(call.tool.execute(call.validated, ctx), state.cancel, limit)
    except asyncio.CancelledError:
        # Not the turn's own task: a tool calling a tool was itself cancelled (`run_task`
        # cancelled the nested tool). Close its cards, then let the calling tool see it.
        outcome = interrupted(call, "cancelled_while_running")
        outcome.duration_ms = (time.perf_counter() - started) * 1000
        _finish(exec_, state, call, outcome, started_record)
        raise
    duration_ms = (time.perf_counter() - started) * 1000

    match finished:
        case "done":
            outcome = _completed(exec_, call, task, duration_ms)
        case "cancelled":
            match state.cancel.mode:
                case "detach":
                    task_id = f"task-{call.call_id}"
                    _detach(state, task, task_id, call)
                    outcome = interrupted(call, "running_in_background", task_id)
                case "cancel":
                    unwound = await stop_task(task, state.cancel, knobs.cancel_grace_s)
                    ending = _ending(call, unwound)
                    outcome = interrupted(call, "cancelled_while_running", ending=ending)
                case unknown_mode:
                    assert_never(unknown_mode)
            outcome.duration_ms = duration_ms
        case "timeout":
            assert limit is not None  # only a limit times out
            unwound = await stop_task(task, state.cancel, knobs.cancel_grace_s)
            outcome = CallOutcome(
                call_id=call.call_id,
                name=call.name,
                status="error",
                success=False,
                output=_timeout_text(call, limit, _ending(call, unwound)),
                duration_ms=duration_ms,
                executed=True,
                read_only=spec.annotations.read_only,
            )
        case unknown:
            assert_never(unknown)

    if exec_.hooks and outcome.executed:
        try:
            await run_after_hooks(
                exec_.hooks,
                HookCall(
                    call_id=call.call_id,
                    name=call.name,
                    arguments=call.arguments,
                    turn_id=state.turn_id,
                    channel=state.channel,
                ),
                HookOutcome(
                    status=outcome.status,
                    success=outcome.success,
                    output=outcome.output,
                    duration_ms=duration_ms,
                ),
                hook_failed(state, call.call_id),
            )
        except asyncio.CancelledError as exc:
            try:
                absorb(state.cancel, exc)  # the outcome is known: close the call first
            except asyncio.CancelledError:
                _finish(exec_, state, call, outcome, started_record)
                raise
    return _finish(exec_, state, call, outcome, started_record)


def _not_started(
    exec_: ResolvedAgentExecution, state: TurnState, call: ExecutableCall
) -> CallOutcome:
    outcome = interrupted(call, "not_started")
    emit_synthetic_pair(state, call.arguments, outcome, max_chars=exec_.knobs.max_tool_result_chars)
    return outcome


def _completed(
    exec_: ResolvedAgentExecution, call: ExecutableCall, task: asyncio.Task[Any], duration_ms: float
) -> CallOutcome:
    """The outcome of a call whose task finished: mapped result, receipt, cache upkeep."""
    spec = call.tool.spec
    data: Any = None
    try:
        result = task.result()
        success, output = _map_result(call, result)
        if isinstance(result, ToolResult) and result.data is not None:
            data, note = taken_in_data(result.data)
            output += known_secrets().mask(note)  # the note may quote a key
    except Exception as exc:
        success, output = False, _raised(call, exc)
    outcome = CallOutcome(
        call_id=call.call_id,
        name=call.name,
        status="ok" if success else "error",
        success=success,
        output=output,
        duration_ms=duration_ms,
        executed=True,
        read_only=spec.annotations.read_only,
        data=data,
    )
    if success and exec_.receipts is not None:
        outcome.receipt = exec_.receipts.sign(call.name, call.arguments, output)
    if success and exec_.cache is not None:
        if spec.annotations.read_only:
            exec_.cache.put(spec, call.arguments, output)
        else:
            exec_.cache.invalidate(spec, call.arguments)
    return outcome


def _finish(
    exec_: ResolvedAgentExecution,
    state: TurnState,
    call: ExecutableCall,
    outcome: CallOutcome,
    started_record: ToolCallStartRecord | None,
) -> CallOutcome:
    """Observer terminal record, spill of oversize output, terminal event."""
    if started_record is not None:
        record = ToolCallRecord.ending(
            started_record,
            duration_ms=outcome.duration_ms,
            success=outcome.success,
            status=outcome.status,
            result=render_bounded(outcome.output, OBSERVER_MAX_CHARS),
        )
        notify(exec_.observer, record, observer_failed(state, call.call_id))
    if exec_.spill is not None and outcome.status in ("ok", "error"):
        outcome.visible = exec_.spill.spill(call.name, call.call_id, outcome.output)
    state.sink(result_event(state, outcome, exec_.knobs.max_tool_result_chars))
    plan = plan_event(state, call, outcome)
    if plan is not None:
        state.sink(plan)
    return outcome


async def run_nested_call(
    exec_: ResolvedAgentExecution,
    state: TurnState,
    call_id: str,
    name: str,
    arguments: dict[str, Any],
) -> ToolResult:
    """One tool call made by a tool (code orchestration), through the whole lifecycle.

    It gets its own pending and terminal events, approval, observer records and receipt; it is
    not added to the model's history — only what the calling tool returns is.
    """
    batch = await prepare_calls(
        exec_,
        state,
        [checked_call(0, call_id, name, arguments)],
        TurnGuards(),
    )
    await execute_batch(exec_, state, batch, parallel=False)
    outcome = batch.slots[0]
    assert outcome is not None  # execute_batch fills every slot
    if outcome.receipt is not None:
        state.receipts.append(
            Receipt(tool=outcome.name, call_id=outcome.call_id, receipt=outcome.receipt)
        )
    if outcome.executed and state.run_budget is not None:
        state.run_budget.record_tool_call()
    if outcome.success:
        return ToolResult.ok(outcome.output, data=outcome.data)
    return ToolResult.fail(outcome.output, data=outcome.data)


def _detach(state: TurnState, task: asyncio.Task[Any], task_id: str, call: ExecutableCall) -> None:
    state.background[task_id] = task

    def finished(t: asyncio.Task[Any]) -> None:
        state.background.pop(task_id, None)
        if t.cancelled():
            success, output = False, "Error: cancelled"
        elif (exc := t.exception()) is not None:
            success, output = False, _raised(call, exc)
        else:
            success, output = _map_result(call, t.result())
        if state.on_background_result is not None:
            state.on_background_result(
                BackgroundResult(
                    task_id=task_id,
                    call_id=call.call_id,
                    tool=call.name,
                    success=success,
                    output=output,
                )
            )

    task.add_done_callback(finished)
