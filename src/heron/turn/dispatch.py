"""Dispatch: run prepared calls sequentially or in parallel, honouring cancellation.

Parallel only when the knob allows it, the batch has more than one executable call, no call in
the response needed approval, no call is a search tool (`tool_search`, `discover_tools`), and (in
`read-only` mode) every call is
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
from typing import Any, assert_never

from heron._support.canonical import canonical_json
from heron._support.limits import clean_text
from heron.safety.redact import scrub_encoded, scrub_text
from heron.safety.secrets import known_secrets
from heron.tools.definition import ToolContext, ToolResult
from heron.turn.bounds import render_bounded, render_bounded_twice
from heron.turn.call_endings import (
    busy_text,
    interrupted,
    map_result,
    raised_text,
    running_calls,
    taken_in_data,
    timeout_text,
    work_ending,
)
from heron.turn.call_prep import PreparedBatch, TurnGuards, prepare_calls
from heron.turn.calls import (
    CallOutcome,
    ExecutableCall,
    checked_call,
    emit_synthetic_pair,
    plan_event,
    result_event,
)
from heron.turn.cancel import WaitOutcome, absorb, run_task, stop_task
from heron.turn.context import (
    BackgroundResult,
    Receipt,
    ResolvedAgentExecution,
    RuntimeKnobs,
    TurnHandle,
    TurnState,
)
from heron.turn.events import ProgressEvent, ToolCallEvent
from heron.turn.faults import hook_call, hook_failed, notify, observer_failed
from heron.turn.hooks import HookOutcome, run_after_hooks
from heron.turn.observer import NullObserver, ToolCallRecord, ToolCallStartRecord

SEARCH_TOOLS = frozenset({"tool_search", "discover_tools"})
"""The deferred-discovery tools: a batch with one of them runs sequentially (seed 000)."""
OBSERVER_MAX_CHARS = 1000


def should_run_parallel(knobs: RuntimeKnobs, batch: PreparedBatch, names: Sequence[str]) -> bool:
    """Whether this batch runs concurrently; an unknown `parallel` mode is an error."""
    eligible = (
        len(batch.executable) > 1
        and not batch.any_prompted
        and not batch.activated_from_catalogue
        and SEARCH_TOOLS.isdisjoint(names)
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
        and (running := running_calls(call.tool))
    ):
        outcome = CallOutcome(
            call_id=call.call_id,
            name=call.name,
            status="error",
            success=False,
            output=busy_text(call, running),
        )
        emit_synthetic_pair(state, call.arguments, outcome, max_chars=knobs.max_tool_result_chars)
        return outcome
    # One scrub serves the card and the observer record; arguments whose JSON shows nothing
    # to mask are shown as they are.
    shown = scrub_encoded(call.arguments, call.arguments_json)
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
            # Scrubbing changes only text, so an equal copy has the same JSON.
            arguments=(
                call.arguments_json
                if shown is call.arguments or shown == call.arguments
                else canonical_json(shown)
            )[:OBSERVER_MAX_CHARS],
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
                message=clean_text(scrub_text(message)),  # masked first, as `map_result`
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
        workspace_read_only=exec_.workspace_read_only,
        turn=TurnHandle(execution=exec_, state=state),
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
    try:
        outcome = await _ended(exec_, state, call, task, finished, limit, duration_ms)
    except asyncio.CancelledError:
        # Not the turn's own task, cancelled while it stopped its tool (a nested call that
        # timed out as the tool calling it did): close the cards, then let the caller see it.
        outcome = interrupted(call, "cancelled_while_running")
        outcome.duration_ms = duration_ms
        _finish(exec_, state, call, outcome, started_record)
        raise

    if exec_.hooks and outcome.executed:
        try:
            await run_after_hooks(
                exec_.hooks,
                hook_call(state, call.call_id, call.name, call.arguments),
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


async def _ended(
    exec_: ResolvedAgentExecution,
    state: TurnState,
    call: ExecutableCall,
    task: asyncio.Task[Any],
    finished: WaitOutcome,
    limit: float | None,
    duration_ms: float,
) -> CallOutcome:
    """The outcome of a call by how its wait ended; a task left running is stopped or detached."""
    knobs = exec_.knobs
    match finished:
        case "done":
            return _completed(exec_, call, task, duration_ms)
        case "cancelled":
            match state.cancel.mode:
                case "detach":
                    task_id = f"task-{call.call_id}"
                    _detach(state, task, task_id, call)
                    outcome = interrupted(call, "running_in_background", task_id)
                case "cancel":
                    unwound = await stop_task(task, state.cancel, knobs.cancel_grace_s)
                    ending = work_ending(call, unwound)
                    outcome = interrupted(call, "cancelled_while_running", ending=ending)
                case unknown_mode:
                    assert_never(unknown_mode)
            outcome.duration_ms = duration_ms
            return outcome
        case "timeout":
            assert limit is not None  # only a limit times out
            unwound = await stop_task(task, state.cancel, knobs.cancel_grace_s)
            return CallOutcome(
                call_id=call.call_id,
                name=call.name,
                status="error",
                success=False,
                output=timeout_text(call, limit, work_ending(call, unwound)),
                duration_ms=duration_ms,
                executed=True,
                read_only=call.tool.spec.annotations.read_only,
            )
        case unknown:
            assert_never(unknown)


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
    loaded: tuple[str, ...] = ()
    keep = False
    try:
        result = task.result()
        success, output = map_result(call, result)
        if isinstance(result, ToolResult):
            loaded, keep = result.loaded_tools, result.keep_in_context
            if result.data is not None:
                data, note = taken_in_data(result.data)
                output += known_secrets().mask(note)  # the note may quote a key
    except Exception as exc:
        success, output = False, raised_text(call, exc)
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
        loaded_tools=loaded,
        keep=keep,
    )
    if success and exec_.receipts is not None:
        outcome.receipt = exec_.receipts.sign(
            call.name, call.arguments, output, arguments_json=call.arguments_json
        )
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
    max_chars = exec_.knobs.max_tool_result_chars
    shown = None
    if started_record is not None:
        if exec_.spill is None:  # the card shows the output too: one scrub serves both
            shown, result = render_bounded_twice(outcome.output, max_chars, OBSERVER_MAX_CHARS)
        else:
            result = render_bounded(outcome.output, OBSERVER_MAX_CHARS)
        record = ToolCallRecord.ending(
            started_record,
            duration_ms=outcome.duration_ms,
            success=outcome.success,
            status=outcome.status,
            result=result,
        )
        notify(exec_.observer, record, observer_failed(state, call.call_id))
    if exec_.spill is not None and outcome.status in ("ok", "error"):
        outcome.visible = exec_.spill.spill(call.name, call.call_id, outcome.output)
    state.sink(result_event(state, outcome, max_chars, shown=shown))
    plan = plan_event(state, call, outcome)
    if plan is not None:
        state.sink(plan)
    return outcome


async def run_single_call(
    exec_: ResolvedAgentExecution,
    state: TurnState,
    call_id: str,
    name: str,
    arguments: dict[str, Any],
) -> CallOutcome:
    """One call that is not part of a model response, through the whole lifecycle: policy,
    approval, pending and terminal events, observer records, hooks, receipt, spill. It is not
    added to the model's history; its receipt joins `state.receipts`."""
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
    return outcome


async def run_nested_call(
    exec_: ResolvedAgentExecution,
    state: TurnState,
    call_id: str,
    name: str,
    arguments: dict[str, Any],
) -> ToolResult:
    """One tool call made by a tool (code orchestration), through the whole lifecycle; only
    what the calling tool returns enters the model's history."""
    outcome = await run_single_call(exec_, state, call_id, name, arguments)
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
            success, output = False, raised_text(call, exc)
        else:
            success, output = map_result(call, t.result())
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
