"""Helpers for engine tests: an event recorder and small script builders."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from heron.turn.events import BaseEvent, ToolCallEvent, ToolResultEvent


class Events:
    """Records every event; helpers answer the questions tests ask most."""

    def __init__(self) -> None:
        self.all: list[BaseEvent] = []
        self._arrived: dict[str, asyncio.Event] = {}

    def __call__(self, event: BaseEvent) -> None:
        self.all.append(event)
        self.arrived(getattr(event, "type", "")).set()

    def arrived(self, kind: str) -> asyncio.Event:
        """Set once an event of `kind` has been recorded: wait on it, not on event-loop turns."""
        return self._arrived.setdefault(kind, asyncio.Event())

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.all if getattr(e, "type", None) == kind]

    def results(self) -> dict[str, ToolResultEvent]:
        return {e.id: e for e in self.all if isinstance(e, ToolResultEvent)}

    def assert_one_pair_per_call(self) -> None:
        """Every call id has exactly one pending and one terminal event, pending first."""
        calls = Counter(e.id for e in self.all if isinstance(e, ToolCallEvent))
        results = Counter(e.id for e in self.all if isinstance(e, ToolResultEvent))
        assert calls == results, (calls, results)
        assert set(calls.values()) <= {1}, calls
        for call_id in calls:
            first = next(i for i, e in enumerate(self.all) if getattr(e, "id", None) == call_id)
            assert isinstance(self.all[first], ToolCallEvent)


def call(name: str, call_id: str | None = None, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id or f"c_{name}", "name": name, "arguments": arguments}


def calls_turn(*calls: dict[str, Any], text: str = "") -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls)}
