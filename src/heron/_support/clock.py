"""Time for everything time-driven: a `Clock` protocol, the real clock and a fake one.

Everything time-driven (timers, polling, heartbeats) asks a `Clock` instead of `time` and
`asyncio.sleep`, so tests run on a `FakeClock` and never sleep.

Schedules should wait with `sleep_until(absolute_deadline)` and compute the next deadline from
the previous one, not from `time()`: then one long `FakeClock.advance` fires every occurrence
that fell due, in order (a deadline already past returns at once).

Recording and replaying the bus's events on a clock is `heron.always_on.bus.timeline`.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol

from heron._support.timefmt import utc_rfc3339


class Clock(Protocol):
    """Wall-clock time and sleeping."""

    def time(self) -> float:
        """Seconds since the epoch."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    async def sleep_until(self, deadline: float) -> None:
        """Return once `time()` has reached `deadline` (at once if it has)."""
        ...


def timestamp(clock: Clock) -> str:
    """The clock's now as an event timestamp (ISO 8601, UTC, milliseconds)."""
    return utc_rfc3339(clock.time(), precision="milliseconds")


class RealClock:
    """The system clock."""

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))

    async def sleep_until(self, deadline: float) -> None:
        # asyncio sleeps on the monotonic clock: a wall-clock change while asleep shifts the
        # wake-up; schedules re-read `time()` after each wake.
        await asyncio.sleep(max(deadline - time.time(), 0.0))


class FakeClock:
    """A clock that moves only when told to. Sleepers wake in deadline order, ties in the
    order they started sleeping."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def time(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        await self.sleep_until(self._now + seconds)

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= self._now:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (deadline, next(self._order), future))
        await future

    @property
    def sleepers(self) -> int:
        """Sleepers still waiting (a cancelled sleep no longer counts)."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    @property
    def next_deadline(self) -> float | None:
        live = [d for d, _, f in self._sleepers if not f.done()]
        return min(live) if live else None

    def advance(self, seconds: float) -> int:
        """Move time forward and wake every sleeper now due; returns how many woke.

        The woken tasks run when the caller next yields to the event loop (`await`).
        """
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._now += seconds
        woken = 0
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():  # a cancelled sleep leaves a done future behind
                future.set_result(None)
                woken += 1
        return woken
