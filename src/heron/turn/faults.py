"""Extension failures: an observer, a hook or an event sink that raises is reported, never fatal.

Each failure becomes an `extension_error` event (component, name, stage, the scrubbed error)
and a `heron.turn` log record with the scrubbed traceback; the turn goes on. Only the engine's
own invariants may end a run. A sink that raises cannot be told about its own failure: it gets
the event once (if that raises too, the log is all there is), and its later failures in the same
turn are logged at debug level.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any, Literal

from heron.safety.redact import scrub_text
from heron.turn.bounds import render_bounded
from heron.turn.context import TurnState
from heron.turn.events import BaseEvent, EventSink, ExtensionErrorEvent, discard
from heron.turn.hooks import HookCall, HookErrorHandler, ToolHook
from heron.turn.observer import FanOutObserver, Observer, ToolCallRecord, ToolCallStartRecord

log = logging.getLogger("heron.turn")

Component = Literal["observer", "hook", "sink"]
MAX_ERROR_CHARS = 500


def component_name(component: object) -> str:
    """A function's qualified name, or an object's class name (without `<locals>` paths)."""
    name = getattr(component, "__qualname__", None)
    if not isinstance(name, str):
        name = type(component).__qualname__
    return name.rsplit("<locals>.", 1)[-1]


def report(
    sink: EventSink,
    turn_id: str,
    *,
    component: Component,
    name: str,
    stage: str,
    exc: BaseException,
    call_id: str | None = None,
) -> None:
    """Log and emit one extension failure (the sink is the turn's guarded sink)."""
    error = render_bounded(scrub_text(f"{type(exc).__name__}: {exc}"), MAX_ERROR_CHARS)
    trace = scrub_text("".join(traceback.format_exception(exc)))
    log.warning(
        "%s %s failed in %s (the turn goes on): %s\n%s", component, name, stage, error, trace
    )
    sink(
        ExtensionErrorEvent(
            turn_id=turn_id,
            component=component,
            name=name,
            stage=stage,
            call_id=call_id,
            error=error,
        )
    )


def guard_sink(raw: EventSink, turn_id: str) -> EventSink:
    """`raw`, made safe: an exception it raises is reported instead of ending the turn."""
    if raw is discard:
        return raw
    failed = False
    reporting = False

    def sink(event: BaseEvent) -> None:
        nonlocal failed, reporting
        try:
            raw(event)
        except Exception as exc:
            kind = getattr(event, "type", type(event).__name__)
            if reporting:
                log.warning("the event sink also refused the extension_error event: %r", exc)
                return
            if failed:
                log.debug("event sink %s failed again on %s: %r", component_name(raw), kind, exc)
                return
            failed = reporting = True
            try:
                report(
                    sink,
                    turn_id,
                    component="sink",
                    name=component_name(raw),
                    stage=str(kind),
                    exc=exc,
                    call_id=getattr(event, "id", None),
                )
            finally:
                reporting = False

    return sink


ObserverErrorHandler = Callable[[Observer, str, Exception], None]


def hook_call(state: TurnState, call_id: str, name: str, arguments: dict[str, Any]) -> HookCall:
    """What a call's hooks are shown of it (before and after it runs); `hook_failed` is their
    `on_error`."""
    return HookCall(
        call_id=call_id,
        name=name,
        arguments=arguments,
        turn_id=state.turn_id,
        channel=state.channel,
    )


def hook_failed(state: TurnState, call_id: str) -> HookErrorHandler:
    """The `on_error` for a call's hooks: an `extension_error` event and a log record."""

    def failed(hook: ToolHook, stage: str, exc: Exception) -> None:
        report(
            state.sink,
            state.turn_id,
            component="hook",
            name=component_name(hook),
            stage=stage,
            exc=exc,
            call_id=call_id,
        )

    return failed


def observer_failed(state: TurnState, call_id: str) -> ObserverErrorHandler:
    """The `on_error` for a call's observer records: an `extension_error` event and a log
    record."""

    def failed(observer: Observer, stage: str, exc: Exception) -> None:
        report(
            state.sink,
            state.turn_id,
            component="observer",
            name=component_name(observer),
            stage=stage,
            exc=exc,
            call_id=call_id,
        )

    return failed


def notify(
    observer: Observer, record: ToolCallStartRecord | ToolCallRecord, on_error: ObserverErrorHandler
) -> None:
    """Deliver `record` to `observer` (to each member of a `FanOutObserver`); never raises."""
    if isinstance(observer, FanOutObserver):
        for member in observer.observers:
            notify(member, record, on_error)
        return
    if isinstance(record, ToolCallRecord):
        try:
            observer.tool_call_end(record)
        except Exception as exc:
            on_error(observer, "tool_call_end", exc)
        return
    try:
        observer.tool_call_start(record)
    except Exception as exc:
        on_error(observer, "tool_call_start", exc)
