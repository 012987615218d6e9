"""Timeline replay: record the bus's events on a clock, publish them again on a fake one.

`TimelineRecorder` records each published event with its offset on the clock; `replay`
publishes a recorded `Timeline` again on a `FakeClock`, advancing the clock to each event's
offset first. Events keep their ids and timestamps, so the same scripted agent produces the
same history.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from pydantic import BaseModel, ConfigDict

from heron._support.clock import Clock, FakeClock
from heron.always_on.bus.model import BusEvent


class TimelineEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    at: float
    """Seconds after the start of the recording."""
    event: BusEvent


class Timeline(BaseModel):
    """Recorded events with their offsets: a test fixture that replays exactly."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    entries: tuple[TimelineEntry, ...] = ()


Publish = Callable[[BusEvent], Awaitable[bool]]


class TimelineRecorder:
    """Wraps a publish function and records every event it publishes, with its offset."""

    def __init__(self, clock: Clock, publish: Publish) -> None:
        self._clock = clock
        self._publish = publish
        self._start = clock.time()
        self._entries: list[TimelineEntry] = []

    async def publish(self, event: BusEvent) -> bool:
        self._entries.append(TimelineEntry(at=self._clock.time() - self._start, event=event))
        return await self._publish(event)

    async def publish_many(self, events: Sequence[BusEvent]) -> list[bool]:
        return [await self.publish(event) for event in events]

    @property
    def timeline(self) -> Timeline:
        return Timeline(entries=tuple(self._entries))


async def replay(
    timeline: Timeline,
    *,
    clock: FakeClock,
    publish: Publish,
    settle: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Publish `timeline` again: advance `clock` to each entry's offset, publish its event,
    then await `settle` (typically the agent's `run_until_idle`) before the next one."""
    start = clock.time()
    for entry in timeline.entries:
        clock.advance(max(start + entry.at - clock.time(), 0.0))
        await publish(entry.event)
        if settle is not None:
            await settle()
