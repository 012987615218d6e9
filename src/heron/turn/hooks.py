"""Lifecycle hooks around tool calls.

`before_tool_call` runs first in preparation and may cancel the call or rewrite its name and
arguments; `after_tool_call` runs for executed calls. Hooks run in descending `priority`. A
hook that raises is logged, reported (`on_error`: the engine makes it an `extension_error`
event) and skipped, so one broken hook cannot take the turn down.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from heron.turn.events import ToolStatus

log = logging.getLogger("heron.hooks")

HookErrorHandler = Callable[["ToolHook", str, Exception], None]
"""Told about a hook that raised: the hook, the stage (`before_tool_call`, `after_tool_call`)
and the exception."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HookCall:
    """The tool call a hook sees: id, name and arguments (as rewritten by earlier hooks)."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    turn_id: str
    channel: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Rewrite:
    """A `before_tool_call` decision: replace the call's name and/or arguments before anything
    else sees it."""

    name: str | None = None
    arguments: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Cancel:
    """A `before_tool_call` decision that skips this one call: it does not run, and the model
    sees `Cancelled by hook: <reason>`; the turn goes on.

    Not to be confused with `CancelScope`, which cancels the whole turn (or detaches its
    running tools) from outside.
    """

    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class HookOutcome:
    """What an executed call produced, as after-hooks see it (raw, unbounded)."""

    status: ToolStatus
    success: bool
    output: str
    duration_ms: float


class ToolHook:
    """A lifecycle hook around tool calls. Subclass and override what you need.

    `before_tool_call` may return `Rewrite`, `Cancel` (skip this call) or `None` (go on);
    `after_tool_call` sees what an executed call produced. Higher `priority` runs first.
    """

    priority: int = 0

    async def before_tool_call(self, call: HookCall) -> Rewrite | Cancel | None:
        return None

    async def after_tool_call(self, call: HookCall, outcome: HookOutcome) -> None:
        return None


async def run_before_hooks(
    hooks: Sequence[ToolHook], call: HookCall, on_error: HookErrorHandler | None = None
) -> tuple[str, dict[str, Any], str | None]:
    """Returns the (possibly rewritten) name and arguments, and a cancel reason or None."""
    name, arguments = call.name, call.arguments
    current = call
    for hook in hooks:
        if current.name is not name or current.arguments is not arguments:
            current = HookCall(
                call_id=call.call_id,
                name=name,
                arguments=arguments,
                turn_id=call.turn_id,
                channel=call.channel,
            )
        try:
            decision = await hook.before_tool_call(current)
        except Exception as exc:
            if on_error is None:
                log.exception("before_tool_call hook %r failed; continuing without it", hook)
            else:
                on_error(hook, "before_tool_call", exc)
            continue
        if isinstance(decision, Cancel):
            return name, arguments, decision.reason
        if isinstance(decision, Rewrite):
            name = decision.name or name
            arguments = decision.arguments if decision.arguments is not None else arguments
    return name, arguments, None


async def run_after_hooks(
    hooks: Sequence[ToolHook],
    call: HookCall,
    outcome: HookOutcome,
    on_error: HookErrorHandler | None = None,
) -> None:
    for hook in hooks:
        try:
            await hook.after_tool_call(call, outcome)
        except Exception as exc:
            if on_error is None:
                log.exception("after_tool_call hook %r failed; continuing", hook)
            else:
                on_error(hook, "after_tool_call", exc)


def sort_hooks(hooks: Sequence[ToolHook]) -> tuple[ToolHook, ...]:
    return tuple(sorted(hooks, key=lambda h: -h.priority))
