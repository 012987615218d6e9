"""Clients of the gateway for tests and benches: a Server-Sent Events reader over httpx."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class SseFrame:
    event: str = "message"
    data: Any = None
    id: str | None = None


def frames(lines: Iterator[str]) -> Iterator[SseFrame]:
    """SSE frames from the lines of a response (comments skipped)."""
    frame = SseFrame()
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                frame.data = json.loads("\n".join(data))
                yield frame
            frame, data = SseFrame(), []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                frame.event = value
            elif name == "id":
                frame.id = value
            elif name == "data":
                data.append(value)


@dataclass
class Stream:
    """Reads one session's event stream until a frame satisfies `until`."""

    url: str
    headers: dict[str, str]
    seen: list[SseFrame] = field(default_factory=list)

    def read(
        self,
        until: Callable[[SseFrame], bool],
        *,
        last_event_id: str | None = None,
        timeout: float = 30.0,
    ) -> list[SseFrame]:
        headers = dict(self.headers)
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        got: list[SseFrame] = []
        with httpx.stream(
            "GET", self.url, headers=headers, timeout=timeout, trust_env=False
        ) as response:
            assert response.status_code == 200, response.read()
            for frame in frames(response.iter_lines()):
                got.append(frame)
                if until(frame):
                    break  # leaving the block drops the connection: a cut stream
        self.seen += got
        return got


def is_turn(type_: str, **fields: Any) -> Callable[[SseFrame], bool]:
    def check(frame: SseFrame) -> bool:
        data = frame.data if isinstance(frame.data, dict) else {}
        return (
            frame.event == "turn"
            and data.get("type") == type_
            and all(data.get(k) == v for k, v in fields.items())
        )

    return check


def durable(got: list[SseFrame]) -> list[tuple[str | None, str, Any]]:
    """The frames that carry an id (what a replay must reproduce)."""
    return [(f.id, f.event, f.data) for f in got if f.id is not None]
