"""Result collection: loop detection, bounding and receipt markers, in slot order.

Slots are walked in the model's call order, so history order equals call order even when
parallel calls finished out of order. The data path stays raw; only what enters the model's
history is bounded (with an explicit marker and a `truncated` event).
"""

from __future__ import annotations

from dataclasses import dataclass

from heron.messages import ToolResultMessage
from heron.turn.bounds import bound_text
from heron.turn.calls import CallOutcome, ParsedCall
from heron.turn.context import Receipt, ResolvedAgentExecution, TurnState
from heron.turn.events import LoopDetectedEvent, TruncatedEvent
from heron.turn.loop_detector import LoopDetector, LoopVerdict
from heron.turn.receipts import receipt_marker


@dataclass(frozen=True, kw_only=True, slots=True)
class Collected:
    messages: list[ToolResultMessage]
    stop: LoopVerdict | None
    """A `break` verdict: the loop ends after this round."""


def collect_results(
    exec_: ResolvedAgentExecution,
    state: TurnState,
    calls: list[ParsedCall],
    slots: list[CallOutcome],
    detector: LoopDetector | None,
) -> Collected:
    messages: list[ToolResultMessage] = []
    stop: LoopVerdict | None = None
    limit = exec_.knobs.max_tool_result_chars
    for call, outcome in zip(calls, slots, strict=True):
        verdict = None
        if detector is not None and outcome.status == "ok":
            verdict = detector.record(outcome.name, call.arguments, outcome.output, success=True)
        visible = outcome.visible or outcome.output
        content, cut = bound_text(visible, limit)
        if cut:
            state.sink(
                TruncatedEvent(
                    turn_id=state.turn_id,
                    id=outcome.call_id,
                    name=outcome.name,
                    original_chars=len(visible),
                    retained_chars=len(content),
                )
            )
        if outcome.receipt is not None:
            state.receipts.append(
                Receipt(tool=outcome.name, call_id=outcome.call_id, receipt=outcome.receipt)
            )
        if verdict is not None:
            state.sink(
                LoopDetectedEvent(
                    turn_id=state.turn_id,
                    level=verdict.level,
                    kind=verdict.kind,
                    tool=verdict.tool,
                    message=verdict.message,
                )
            )
            if verdict.level == "warn":
                if outcome.receipt is not None:
                    content += receipt_marker(outcome.receipt)
                content += f"\n\n[heron loop detector] {verdict.message}"
            else:
                # A block withholds the repeated result: the model must change course.
                content = (
                    f"[heron loop detector: result withheld] {verdict.message} "
                    "This result is not shown; change your approach."
                )
                if verdict.level == "break":
                    stop = verdict
        elif outcome.receipt is not None:
            content += receipt_marker(outcome.receipt)
        messages.append(
            ToolResultMessage(
                call_id=outcome.call_id,
                name=outcome.name,
                content=content,
                is_error=not outcome.success,
                loaded_tools=outcome.loaded_tools,
                keep=outcome.keep,
            )
        )
    return Collected(messages=messages, stop=stop)
