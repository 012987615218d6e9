"""`run_tool_call_loop`: model → parse → prepare → dispatch → collect → append, until a final
answer, a cancellation, or the iteration cap.

Safe points are explicit: after each model step that ends the turn and after each round of
tool results, `state.on_safe_point` runs (the event loop drains its queue there) and steering
messages are appended at the top of the next iteration. Cancellation is checked at every safe
point and raced against the model stream and running tools.

A plain asyncio cancellation of the task running the turn is absorbed into the turn's scope
where the engine waits, so the turn ends exactly as after `CancelScope.cancel()` — every call
answered, every card closed, the history valid — and then `run_tool_call_loop` re-raises the
`CancelledError`. Should anything still escape mid-round, the open round's calls are answered
before it propagates, so the history never keeps a call without its result.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal

from heron._support.limits import clean_text
from heron.errors import HeronError
from heron.messages import AssistantMessage, Message, ToolCallPart, ToolResultMessage, UserMessage
from heron.models import text_protocol
from heron.models.base import (
    ModelRequest,
    ModelToolCall,
    ReasoningDelta,
    StreamInterrupted,
    TextDelta,
    Usage,
)
from heron.safety.redact import scrub_text
from heron.safety.secrets import known_secrets
from heron.tools.definition import ToolSpec
from heron.turn.bounds import bound_text
from heron.turn.call_prep import PreparedBatch, TurnGuards, is_excluded, prepare_calls, start_check
from heron.turn.calls import CallOutcome, ParsedCall, result_event, synthetic
from heron.turn.cancel import absorb, bind_task, run_task, stop_task, take_absorbed
from heron.turn.context import ResolvedAgentExecution, SafePoint, TurnState
from heron.turn.dispatch import execute_batch, should_run_parallel
from heron.turn.events import (
    CancelledEvent,
    ErrorEvent,
    FinalEvent,
    FinalReason,
    HistoryTrimmedEvent,
    ReasoningDeltaEvent,
    TextDeltaEvent,
    ending,
)
from heron.turn.faults import guard_sink
from heron.turn.loop_detector import LoopDetector
from heron.turn.outcome import EMPTY_RESPONSE, TurnOutcome, TurnReason
from heron.turn.parsing import CallParser
from heron.turn.receipts import RECEIPT_PROMPT_NOTE
from heron.turn.results import collect_results

CAP_REQUEST = (
    "You have used the maximum number of tool iterations for this turn. Do not call tools. "
    "Answer with your best result from the work so far: what you did, what you found, and "
    "what remains to be done."
)
LOOP_BREAK_REQUEST = (
    "heron's loop detector stopped the tool loop: {message} Do not call tools. Summarise what "
    "you did, what you found, and what remains to be done."
)
INTERRUPTED_SUFFIX = "\n\n[interrupted by user]"
UNFINISHED_CALL = (
    "[interrupted: the turn ended before this call finished; its outcome is unknown. Check the "
    "current state before retrying.]"
)
STREAM_INTERRUPTED_SUFFIX = "\n\n[stream interrupted]"


@dataclass(kw_only=True, slots=True)
class ModelResponse:
    text: str = ""
    reasoning: str = ""
    calls: list[ModelToolCall] = field(default_factory=list)
    usage: Usage | None = None
    interrupted: bool = False


class _LoopStopped(HeronError):
    def __init__(self, outcome: TurnOutcome) -> None:
        self.outcome = outcome


async def run_tool_call_loop(exec_: ResolvedAgentExecution, state: TurnState) -> TurnOutcome:
    """Run one turn to its end. Never raises for run outcomes; they are in the result.

    The one exception is a cancellation of the task running the turn (`task.cancel()`,
    `asyncio.timeout`, `wait_for`, a `TaskGroup`): the turn is closed as a `CancelScope`
    cancel closes it (`state.history` whole, a `cancelled` event), then the `CancelledError`
    propagates. An event sink that raises is reported, never fatal (`heron.turn.faults`).
    """
    sink = state.sink
    state.sink = guard_sink(sink, state.turn_id)
    previous = bind_task(state.cancel, asyncio.current_task())
    try:
        if exec_.tracer is None:
            outcome = await _Loop(exec_, state).run()
        else:
            with exec_.tracer.run(agent=exec_.agent or "heron", turn_id=state.turn_id) as span:
                outcome = await _Loop(exec_, state).run()
                span.finish(
                    status=outcome.status, reason=outcome.reason, iterations=outcome.iterations
                )
    finally:
        bind_task(state.cancel, previous)
        state.sink = sink
    if (cancelled := take_absorbed(state.cancel)) is not None:
        raise cancelled
    return outcome


class _Loop:
    def __init__(self, exec_: ResolvedAgentExecution, state: TurnState) -> None:
        self.exec = exec_
        self.state = state
        self.iterations = 0
        self.guards = TurnGuards()
        self.malformed = 0
        loop_knobs = exec_.knobs.loop_detection
        self.detector = (
            LoopDetector(
                window=loop_knobs.window,
                max_repeats=loop_knobs.max_repeats,
                ignore_tools=loop_knobs.ignore_tools,
            )
            if loop_knobs.enabled
            else None
        )
        self._system_cache: tuple[int, str] | None = None
        self._last_trim_tokens = 0
        self._reported_drop = 0
        self.parser = CallParser(exec_, state)
        self._open: list[ParsedCall] | None = None
        """The calls of the round in progress, until their results are in the history."""
        self._open_batch: PreparedBatch | None = None
        self._deferred: tuple[ToolSpec, ...] | None = None

    # -- the loop ---------------------------------------------------------------------------

    async def run(self) -> TurnOutcome:
        try:
            return await self._run()
        except _LoopStopped as stop:
            return stop.outcome
        except BaseException:
            self._close_open_round()
            raise

    async def _run(self) -> TurnOutcome:
        exec_, state = self.exec, self.state
        budget = state.budget
        remaining = exec_.knobs.max_iterations
        while True:
            self._drain_steering()
            self._check_cancel()
            if budget is not None:
                if not budget.take():
                    return await self._summarise(CAP_REQUEST, "iteration_cap")
            elif remaining <= 0:
                return await self._summarise(CAP_REQUEST, "iteration_cap")
            remaining -= 1
            if state.run_budget is not None and (hit := state.run_budget.check()) is not None:
                if exec_.alerts is not None:
                    exec_.alerts.budget_exhausted(hit)
                return await self._summarise(hit.summary_request(), "budget_exhausted", hit.reason)

            specs = self._specs()
            native = exec_.model.native_tools
            response = await self._call_model(specs if native else (), self._system(specs))
            calls, visible, issue = self.parser.parse(response.calls, response.text, specs)

            if not calls and issue is not None and self.parser.text_protocol_on(specs):
                self.malformed += 1
                if self.malformed > text_protocol.MAX_MALFORMED_RETRIES:
                    return self._final(
                        text_protocol.MALFORMED_FALLBACK_ANSWER, "malformed_protocol"
                    )
                self._append_assistant(response.text, (), response.reasoning)
                feedback = f"{text_protocol.PARSE_ERROR_FEEDBACK}\nWhat was wrong: {issue}"
                self._append(UserMessage(content=feedback, source="runtime"))
                continue

            if not calls:
                if not visible.strip():
                    return self._fail(EMPTY_RESPONSE)
                if not native:
                    state.sink(TextDeltaEvent(turn_id=state.turn_id, text=scrub_text(visible)))
                outcome = self._final(visible, "answer", reasoning=response.reasoning)
                await self._safe_point("after_model")
                return outcome

            if not native and visible:
                state.sink(TextDeltaEvent(turn_id=state.turn_id, text=scrub_text(visible)))
            await self._run_round(calls, visible, response.reasoning)

    async def _run_round(self, calls: list[ParsedCall], text: str, reasoning: str) -> None:
        exec_, state = self.exec, self.state
        # Rule 1: the assistant's turn is recorded as soon as it was emitted, before any tool runs.
        self._append_assistant(text, calls, reasoning)
        self._open, self._open_batch = calls, None
        batch = self._open_batch = await prepare_calls(exec_, state, calls, self.guards)
        parallel = should_run_parallel(exec_.knobs, batch, [c.name for c in calls])
        await execute_batch(exec_, state, batch, parallel=parallel)
        slots: list[CallOutcome] = [s for s in batch.slots if s is not None]
        for slot in slots:
            if slot.executed and slot.name in batch.activated_from_catalogue:
                # Loaded by being called: its result is where a deferred-loading provider
                # learns the tool (as from a search tool's result).
                slot.loaded_tools = (*slot.loaded_tools, slot.name)
        if state.run_budget is not None:
            for slot in slots:
                if slot.executed:
                    state.run_budget.record_tool_call()
        collected = collect_results(exec_, state, calls, slots, self.detector)
        aborted = f"loop aborted: {batch.abort}" if batch.abort is not None else None
        failed = self._error(aborted) if aborted is not None else None
        cancelled = self._cancelled() if failed is None else None
        with ending(failed or cancelled):  # an aborted or cancelled round ends with its results
            self._append(*collected.messages)
        self._open = self._open_batch = None
        if aborted is not None:
            raise _LoopStopped(self._fail(aborted, reason="aborted", event=failed))
        self._check_cancel(cancelled)
        await self._safe_point("after_tools")
        if collected.stop is not None:
            self._check_cancel()
            message = LOOP_BREAK_REQUEST.format(message=collected.stop.message)
            raise _LoopStopped(await self._summarise(message, "loop_break"))

    # -- model calls ------------------------------------------------------------------------

    async def _call_model(
        self, specs: tuple[ToolSpec, ...] | tuple[()], system: str
    ) -> ModelResponse:
        """One model call with its accounting: trimming, budget, metrics and tracing."""
        exec_ = self.exec
        self.iterations += 1
        request = ModelRequest(
            system=system,
            messages=self._trimmed(system, specs),
            tools=specs,
            deferred_tools=self._deferred_specs() if specs else (),
            turn_id=self.state.turn_id,
            iteration=self.iterations,
        )
        response = ModelResponse()
        started = time.perf_counter()
        outcome: Literal["success", "failure", "interrupted"] = "failure"
        tracing = (
            exec_.tracer.model_call(exec_.model.name, iteration=self.iterations)
            if exec_.tracer is not None
            else nullcontext(None)
        )
        with tracing as span:
            try:
                await self._stream(request, response)
                outcome = "success"
            except _LoopStopped as stop:
                outcome = "interrupted" if stop.outcome.status == "cancelled" else "failure"
                raise
            finally:
                self._account(response, outcome, time.perf_counter() - started, span)
        return response

    def _trimmed(self, system: str, specs: tuple[ToolSpec, ...] | tuple[()]) -> Sequence[Message]:
        """The history to send: the whole history, or a trimmed view of it (never shortened
        in place, so the stored conversation stays complete)."""
        trimmer = self.exec.trimmer
        if trimmer is None:
            return self.state.history
        result = trimmer.trim(
            self.state.history,
            system=system,
            tools=specs,
            reserve_tokens=self.exec.knobs.reply_reserve_tokens,
        )
        self._last_trim_tokens = result.counted_tokens
        if result.report is None:
            return self.state.history
        if result.report.dropped_messages != self._reported_drop:
            self._reported_drop = result.report.dropped_messages
            fields = result.report.event_fields()
            self.state.sink(HistoryTrimmedEvent(turn_id=self.state.turn_id, **fields))
        return result.messages

    def _account(self, response: ModelResponse, outcome: str, duration_s: float, span: Any) -> None:
        exec_, usage = self.exec, response.usage
        if span is not None:
            span.record_usage(usage)
        if self.state.run_budget is not None:
            self.state.run_budget.record_model_call(exec_.model.name, usage)
        if exec_.metrics is not None:
            exec_.metrics.record_model(
                exec_.model.name,
                outcome=outcome,  # type: ignore[arg-type]
                duration_s=duration_s,
                input_tokens=usage.input_tokens if usage else 0,
                output_tokens=usage.output_tokens if usage else 0,
            )
        # A calibrated counter learns from what the provider says the request really cost.
        observe = getattr(getattr(exec_.trimmer, "counter", None), "observe", None)
        if usage and outcome == "success" and observe is not None:
            observe(self._last_trim_tokens, usage.input_tokens)

    async def _stream(self, request: ModelRequest, response: ModelResponse) -> None:
        exec_, state = self.exec, self.state
        live_text = exec_.model.native_tools

        async def consume() -> None:
            async for part in exec_.model.stream(request):
                # Model text is outside data too: what is not Unicode gets the replacement.
                if isinstance(part, TextDelta):
                    text = clean_text(part.text)
                    response.text += text
                    if live_text:
                        state.sink(TextDeltaEvent(turn_id=state.turn_id, text=scrub_text(text)))
                elif isinstance(part, ReasoningDelta):
                    text = clean_text(part.text)
                    response.reasoning += text
                    state.sink(ReasoningDeltaEvent(turn_id=state.turn_id, text=scrub_text(text)))
                elif isinstance(part, ModelToolCall):
                    response.calls.append(part)
                    self._precheck(part)
                else:
                    response.usage = part

        # A cancellation of another task than this turn's (a shared scope) cancels the stream
        # and propagates.
        task, finished = await run_task(consume(), state.cancel)
        if finished != "done":
            await stop_task(task, state.cancel, exec_.knobs.cancel_grace_s)
            # Thinking is discarded; visible text the user already saw is kept, marked.
            cancelled = self._cancelled()
            if response.text and live_text:
                with ending(cancelled):
                    self._append_assistant(response.text + INTERRUPTED_SUFFIX, (), None)
            self._check_cancel(cancelled)
        try:
            task.result()
        except StreamInterrupted as exc:
            # Text the user already saw is kept, marked, so the history matches the screen. Tool
            # calls received before the break are dropped: they could never get results.
            message = f"model {exec_.model.name} failed: {exc}"
            failed = self._error(message)
            if response.text and live_text:
                with ending(failed):
                    self._append_assistant(response.text + STREAM_INTERRUPTED_SUFFIX, (), None)
            raise _LoopStopped(self._fail(message, event=failed)) from exc
        except Exception as exc:
            raise _LoopStopped(self._fail(f"model {exec_.model.name} failed: {exc}")) from exc

    async def _summarise(
        self, request_text: str, reason: FinalReason, why: str | None = None
    ) -> TurnOutcome:
        if self.exec.knobs.cap_behavior == "error" and reason in (
            "iteration_cap",
            "budget_exhausted",
        ):
            return self._fail(
                why or f"exceeded the maximum of {self.exec.knobs.max_iterations} tool iterations",
                reason=reason,
            )
        self._append(UserMessage(content=request_text, source="runtime"))
        response = await self._call_model((), self.exec.system_prompt)
        text = response.text.strip() or "I stopped before finishing and have no summary to give."
        if not self.exec.model.native_tools:
            text = text_protocol.parse_text_tool_calls(text, ()).text or text
            self.state.sink(TextDeltaEvent(turn_id=self.state.turn_id, text=scrub_text(text)))
        return self._final(text, reason)

    # -- helpers ----------------------------------------------------------------------------

    def _precheck(self, part: ModelToolCall) -> None:
        """Start call checks while the model is still streaming, so safety costs no latency."""
        if not self.exec.checks or part.id is None or part.arguments is None:
            return
        if self.parser.used(part.id):
            return  # a reused id will be replaced; its checks run during preparation
        tool = self.exec.registry.get(part.name)
        if tool is not None:
            start_check(self.exec, self.state, part.id, tool.spec, part.arguments)

    def _specs(self) -> tuple[ToolSpec, ...]:
        static = self.exec.registry.specs()
        activated = self.exec.activated
        if activated is not None and len(activated):
            static = static + activated.specs()
        if not self.state.excluded and activated is None:
            return static  # the registry already removed the agent's exclusions
        return tuple(s for s in static if not is_excluded(self.exec, self.state, s.name))

    def _deferred_specs(self) -> tuple[ToolSpec, ...]:
        """The catalogue's loadable tools this turn may see (constant for the turn)."""
        if self._deferred is None:
            specs = self.exec.catalogue.specs() if self.exec.catalogue is not None else ()
            self._deferred = tuple(
                s for s in specs if not is_excluded(self.exec, self.state, s.name)
            )
        return self._deferred

    def _system(self, specs: tuple[ToolSpec, ...]) -> str:
        if self._system_cache is not None and self._system_cache[0] == len(specs):
            return self._system_cache[1]
        parts = [self.exec.system_prompt] if self.exec.system_prompt else []
        if not self.exec.model.native_tools and self.parser.text_protocol_on(specs):
            # Tools loaded from the catalogue are described in the results that loaded them:
            # the system prompt stays byte-identical for the provider's prompt cache.
            deferred = {s.name for s in self._deferred_specs()}
            shown = [s.to_wire() for s in specs if s.name not in deferred]
            parts.append(text_protocol.render_tool_protocol_prompt(shown))
        if self.exec.receipts is not None:
            parts.append(RECEIPT_PROMPT_NOTE)
        system = "\n\n".join(parts)
        self._system_cache = (len(specs), system)
        return system

    def _append(self, *messages: Message) -> None:
        self.state.history.extend(messages)
        if self.state.on_append is not None:
            self.state.on_append(messages)

    def _append_assistant(
        self, text: str, calls: tuple[()] | list[ParsedCall], reasoning: str | None
    ) -> None:
        # The model can only repeat a known secret it was given despite the masking (a guess,
        # a script): the history keeps the placeholder; preparation refuses the raw call.
        known = known_secrets()
        self._append(
            AssistantMessage(
                text=known.mask(text),
                tool_calls=tuple(
                    ToolCallPart(id=c.call_id, name=c.name, arguments=known.mask_value(c.arguments))
                    for c in calls
                ),
                reasoning=known.mask(reasoning) if reasoning else None,
            )
        )

    def _drain_steering(self) -> None:
        steering = self.state.steering
        while steering:
            self._append(UserMessage(content=known_secrets().mask(steering.popleft())))

    def _cancelled(self) -> CancelledEvent | None:
        """The `cancelled` event that ends the turn, when it is cancelled."""
        cancel = self.state.cancel
        if not cancel.cancelled:
            return None
        return CancelledEvent(turn_id=self.state.turn_id, reason=cancel.reason or "cancelled")

    def _check_cancel(self, event: CancelledEvent | None = None) -> None:
        """End the turn if it is cancelled, with `event` when its entry was just appended."""
        event = event or self._cancelled()
        if event is not None:
            self.state.sink(event)
            raise _LoopStopped(
                TurnOutcome(
                    status="cancelled",
                    text="",
                    reason="cancelled",
                    iterations=self.iterations,
                    error=event.reason,
                )
            )

    async def _safe_point(self, point: SafePoint) -> None:
        if self.state.on_safe_point is not None:
            try:
                await self.state.on_safe_point(point)
            except asyncio.CancelledError as exc:
                absorb(self.state.cancel, exc)  # the next check ends the turn

    def _close_open_round(self) -> None:
        """Answer the calls of a round an exception broke off, so the history stays valid: a
        finished call keeps its result, the others say their outcome is unknown."""
        calls, batch = self._open, self._open_batch
        if calls is None:
            return
        self._open = self._open_batch = None
        limit = self.exec.knobs.max_tool_result_chars
        messages = []
        for call in calls:
            outcome = batch.slots[call.index] if batch is not None else None
            if outcome is None:
                outcome = synthetic(call.call_id, call.name, "interrupted", UNFINISHED_CALL)
                outcome.phase = "cancelled_while_running"
                self.state.sink(result_event(self.state, outcome, limit))
            content, _ = bound_text(outcome.visible or outcome.output, limit)
            messages.append(
                ToolResultMessage(
                    call_id=outcome.call_id,
                    name=outcome.name,
                    content=content,
                    is_error=not outcome.success,
                )
            )
        self._append(*messages)

    def _final(
        self, text: str, reason: FinalReason, *, reasoning: str | None = None
    ) -> TurnOutcome:
        final = FinalEvent(turn_id=self.state.turn_id, text=scrub_text(text), reason=reason)
        with ending(final):  # the turn's end commits with the answer
            self._append_assistant(text, (), reasoning)
        self.state.sink(final)
        return TurnOutcome(status="final", text=text, reason=reason, iterations=self.iterations)

    def _error(self, message: str) -> ErrorEvent:
        return ErrorEvent(turn_id=self.state.turn_id, message=scrub_text(message))

    def _fail(
        self, message: str, *, reason: TurnReason = "error", event: ErrorEvent | None = None
    ) -> TurnOutcome:
        """End the turn with an error (`event`: its `error` event, already made)."""
        self.state.sink(event or self._error(message))
        return TurnOutcome(
            status="error", text="", reason=reason, iterations=self.iterations, error=message
        )
