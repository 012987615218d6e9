"""What a call's ending says: the interrupted and timed-out texts, worded by how far the call
got and what became of its work, and the mapping of a tool's result into the data path (known
secrets masked, text replacement, structured data checked against the input limits)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, assert_never

from pydantic_core import to_jsonable_python

from heron._support.limits import InputRejected, check_value, clean_text, clean_value
from heron.safety.secrets import known_secrets
from heron.tools.definition import ToolResult
from heron.turn.call_prep import NOT_STARTED
from heron.turn.calls import CallOutcome, ExecutableCall
from heron.turn.events import InterruptPhase

Ending = Literal["stopped", "killed", "thread", "unstopped"]
"""What became of a call's work once heron stopped waiting for it: its task unwound, its worker
process was killed, its worker thread runs on (a thread cannot be stopped), or its task did not
unwind within `cancel_grace_s`."""


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


def timeout_text(call: ExecutableCall, limit_s: float, ending: Ending) -> str:
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


def work_ending(call: ExecutableCall, unwound: bool) -> Ending:
    """What became of a call's work after heron cancelled its task (`unwound`: the task ended)."""
    match call.tool.spec.runs_in:
        case "process":
            return "killed" if unwound else "unstopped"
        case "thread":
            # A thread runs on unless its tool says it returned (a tool that cannot say is
            # assumed to be running still).
            if not hasattr(call.tool, "still_running") or call.call_id in running_calls(call.tool):
                return "thread"
        case "event_loop":
            pass
        case unknown:
            assert_never(unknown)
    return "stopped" if unwound else "unstopped"


def running_calls(tool: object) -> tuple[str, ...]:
    """The call ids a threaded tool is still running after heron stopped waiting for them."""
    still_running = getattr(tool, "still_running", None)
    return still_running() if still_running is not None else ()


def busy_text(call: ExecutableCall, running: Sequence[str]) -> str:
    return (
        f"Error: '{call.name}' was not started: an earlier call of it ({', '.join(running)}) is "
        "still running in a worker thread after heron stopped waiting for it, and the tool is not "
        "idempotent. Nothing was run. Check the current state; call it again once that run has "
        "finished."
    )


def map_result(call: ExecutableCall, result: Any) -> tuple[bool, str]:
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


def raised_text(call: ExecutableCall, exc: BaseException) -> str:
    return _taken_in_text(f"Error: '{call.name}' raised {type(exc).__name__}: {exc}")


def taken_in_data(data: Any) -> tuple[Any, str]:
    """A tool's structured data checked against the input limits where it enters the engine.

    Returns the data to keep (with known secrets as placeholders, and the text replacement
    applied where needed) and a note for the output: data nested deeper or larger than the
    limits, or not renderable as JSON, is dropped (the text result stays) and the note says
    why. The limits come first (masking walks the value recursively; after the check it is at
    most `max_depth` deep), then the masking, then the replacement, as for the text
    (`map_result`).
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
