"""Observer records: execution telemetry for logs, metrics and tracing back ends.

One start and one terminal record per executed tool call. Field names follow the
OpenTelemetry GenAI conventions where one exists (`gen_ai.tool.name`, `gen_ai.tool.call.id`)
so an exporter can map them one to one. Arguments and results are scrubbed of credentials and
bounded before they get here: an observer is a rendering surface, never the data path.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from typing import Protocol

_log = logging.getLogger("heron.telemetry")


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallStartRecord:
    """The start record of an executed tool call: who, what (scrubbed, bounded), where."""

    tool: str
    call_id: str
    arguments: str
    """Scrubbed compact JSON of the executed arguments."""
    turn_id: str
    owner: str
    channel: str | None = None
    agent: str | None = None
    parent_agent: str | None = None
    risk: str | None = None
    """The call's risk tier, for a tool that judges each call (`CallApproval`)."""

    def otel_attributes(self) -> dict[str, str]:
        attrs = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": self.tool,
            "gen_ai.tool.call.id": self.call_id,
            "heron.turn.id": self.turn_id,
            "heron.tool.owner": self.owner,
        }
        if self.agent:
            attrs["gen_ai.agent.name"] = self.agent
        if self.channel:
            attrs["heron.channel"] = self.channel
        if self.risk:
            attrs["heron.tool.risk"] = self.risk
        return attrs


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallRecord(ToolCallStartRecord):
    """The terminal record: the start record's correlation fields again (span-oriented back ends
    need them on both ends) plus the outcome."""

    duration_ms: float
    success: bool
    status: str
    result: str
    """Scrubbed and bounded output, or the failure reason."""

    @classmethod
    def ending(
        cls,
        start: ToolCallStartRecord,
        *,
        duration_ms: float,
        success: bool,
        status: str,
        result: str,
    ) -> ToolCallRecord:
        # Field by field (a new start field goes here too): cheaper than a reflective copy.
        return cls(
            tool=start.tool,
            call_id=start.call_id,
            arguments=start.arguments,
            turn_id=start.turn_id,
            owner=start.owner,
            channel=start.channel,
            agent=start.agent,
            parent_agent=start.parent_agent,
            risk=start.risk,
            duration_ms=duration_ms,
            success=success,
            status=status,
            result=result,
        )


class Observer(Protocol):
    """Receives one start and one terminal record per executed tool call (telemetry, logs).

    Records are scrubbed and bounded. Keep the methods cheap: they run on the loop's thread.
    """

    def tool_call_start(self, record: ToolCallStartRecord) -> None: ...

    def tool_call_end(self, record: ToolCallRecord) -> None: ...


class NullObserver:
    def tool_call_start(self, record: ToolCallStartRecord) -> None:
        pass

    def tool_call_end(self, record: ToolCallRecord) -> None:
        pass


class FanOutObserver:
    """Passes every record to each observer in turn (telemetry, the execution audit trail, a
    caller's own). An observer that raises is logged and skipped: observing must never break a
    tool call."""

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


class RecordingObserver:
    """Keeps every record in memory, in order (tests, embedders)."""

    def __init__(self) -> None:
        self.records: list[ToolCallStartRecord | ToolCallRecord] = []

    def tool_call_start(self, record: ToolCallStartRecord) -> None:
        self.records.append(record)

    def tool_call_end(self, record: ToolCallRecord) -> None:
        self.records.append(record)


class LoggingObserver:
    """Writes one JSON log line per record to the `heron.tools` logger."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._log = logger or logging.getLogger("heron.tools")

    def tool_call_start(self, record: ToolCallStartRecord) -> None:
        self._log.info("tool_call_start %s", json.dumps(asdict(record), ensure_ascii=False))

    def tool_call_end(self, record: ToolCallRecord) -> None:
        self._log.info("tool_call %s", json.dumps(asdict(record), ensure_ascii=False))
