"""Telemetry: metrics (`metrics`), operator alerts (`alerts`) and OpenTelemetry (`otel`).

Each piece plugs into the engine as an `Observer` for tool calls, plus small calls the engine
makes for runs and model calls. `FanOutObserver` lets one agent feed several of them.
OpenTelemetry is optional (`pip install 'heron[telemetry]'`): only `heron.telemetry.otel`
needs it, and it imports the SDK when an exporter is actually built.
"""

from __future__ import annotations

import logging

from heron.turn.observer import Observer, ToolCallRecord, ToolCallStartRecord

__all__ = ["FanOutObserver"]

_log = logging.getLogger("heron.telemetry")


class FanOutObserver:
    """Passes every record to each observer in turn. An observer that raises is logged and
    skipped: telemetry must never break a tool call."""

    def __init__(self, *observers: Observer) -> None:
        self.observers = observers

    def tool_call_start(self, record: ToolCallStartRecord) -> None:
        for observer in self.observers:
            try:
                observer.tool_call_start(record)
            except Exception:
                _log.exception("observer %r failed on tool_call_start", observer)

    def tool_call_end(self, record: ToolCallRecord) -> None:
        for observer in self.observers:
            try:
                observer.tool_call_end(record)
            except Exception:
                _log.exception("observer %r failed on tool_call_end", observer)
