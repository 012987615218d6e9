"""The engine's events as MCP notifications on the stream of the request serving the call.

A tool's progress line is a `notifications/progress` (sent only when the client asked for
progress); every event — call, result, approval request and decision, loop detection,
truncation — is a log message (`notifications/message`, logger `heron`; the event as JSON,
without the output) at or above the level the session set with `logging/setLevel`. On
2026-07-28 the request's own opt-in decides instead (the SDK applies it). Events are already
scrubbed by the engine.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any, Literal

from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning

from heron.mcp.server.asking import uses_input_required
from heron.mcp.server.lifecycle import Session
from heron.turn.events import BaseEvent, ProgressEvent

__all__ = ["LEVELS", "LogLevel", "Notifier", "event_level", "send_log"]

LogLevel = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
LEVELS: tuple[LogLevel, ...] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)


class Notifier:
    """The engine's event sink for one served call: events become MCP notifications on the
    stream of the request currently serving the call."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.ctx: ServerRequestContext[Any] | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self._progress = 0

    def __call__(self, event: BaseEvent) -> None:
        ctx = self.ctx
        if ctx is None:
            return
        if isinstance(event, ProgressEvent):
            self._progress += 1
            self._send(ctx.session.report_progress(self._progress, None, event.message))
        level = event_level(event)
        wanted = self.session.log_level
        modern = uses_input_required(ctx)  # the request's own opt-in decides there
        if modern or (wanted is not None and LEVELS.index(level) >= LEVELS.index(wanted)):
            data = event.model_dump(mode="json", exclude={"output", "turn_id"})
            self._send(send_log(ctx, level, data))

    def _send(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def flush(self) -> None:
        """Wait until every notification so far is sent (before the result is)."""
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)


def event_level(event: BaseEvent) -> LogLevel:
    kind = getattr(event, "type", "")
    if kind == "tool_result":
        return "info" if getattr(event, "success", False) else "warning"
    if kind in ("approval_request", "approval_decision"):
        return "notice"
    if kind == "loop_detected":
        return "warning"
    if kind == "truncated":
        return "info"
    return "debug"


async def send_log(ctx: ServerRequestContext[Any], level: LogLevel, data: Any) -> None:
    with warnings.catch_warnings():
        # Deprecated with the logging capability in 2026-07-28; still what older clients read.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await ctx.session.send_log_message(
            level, data, logger="heron", related_request_id=ctx.request_id
        )
