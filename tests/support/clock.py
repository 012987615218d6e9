"""The tests' one fake clock is heron's own `heron._support.clock.FakeClock`.

Where the code under test takes a callable clock (`clock=`, `now=`), pass `clock.time` and move
time with `clock.advance(seconds)`. Two shapes wrap it for code that asks for more:

- `FakeTime`, for code that sleeps inline while it answers one call (the connectors' retry and
  rate-limit waits through their `sleep=` / `clock=` / `wall_clock=` seams, all three given as
  `**fake_time.seams`): nothing else would advance the clock there, so a sleep returns at once,
  having moved the clock on by what it asked for, and is recorded.
- `ticking(clock, step_s)`, a reading that moves the clock on by `step_s` each time it is read,
  for stores that stamp every write and tests that want the stamps to differ.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypedDict

from heron._support.clock import FakeClock


class Seams(TypedDict):
    """How the connectors take their time (`HttpApi` and every connector's tool builder)."""

    sleep: Callable[[float], Awaitable[None]]
    clock: Callable[[], float]
    wall_clock: Callable[[], float]


class FakeTime:
    """A `FakeClock` whose sleeps return at once, having advanced it; `sleeps` records them."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.clock = clock if clock is not None else FakeClock()
        self.sleeps: list[float] = []

    def time(self) -> float:
        return self.clock.time()

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.clock.advance(seconds)

    @property
    def seams(self) -> Seams:
        """The connectors' `sleep=`, `clock=` (monotonic) and `wall_clock=`, all on this clock."""
        return {"sleep": self.sleep, "clock": self.time, "wall_clock": self.time}


def ticking(clock: FakeClock, step_s: float) -> Callable[[], float]:
    """A reading of `clock` that first moves it on by `step_s`."""

    def now() -> float:
        clock.advance(step_s)
        return clock.time()

    return now
