"""Bounded waits for state that no event announces.

Await the event when there is one (an `asyncio.Event`, `Events.arrived(kind)`, a task). These
two are for the rest. Both are bounded, so a wait that never ends fails with what it waited for
instead of hanging the suite:

- `until`: state the tasks of this event loop change (a `FakeClock`'s sleepers, a scheduler's
  table, a recorder's list). Those tasks run only when this one yields, so each check follows
  a bare yield and no real time passes.
- `poll_until`: state another process or a thread creates (a file, a pid, a thread's side
  effect). That work goes on without this loop, so the loop sleeps a little real time between
  checks instead of spinning the CPU the other side needs.
- `wait_until`: the same for a test with no event loop (one driving a `heron serve`
  subprocess).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

BOUND = 10.0
"""Seconds; an upper bound for waits that normally take milliseconds on a loaded machine."""


async def until(
    condition: Callable[[], bool],
    what: str = "the condition",
    *,
    within_s: float = BOUND,
    changed: asyncio.Event | None = None,
) -> None:
    """Yield to the event loop until `condition()` holds; fail after `within_s`.

    With `changed`, the check is repeated each time that event is set (and the event cleared)
    instead of after every yield: for state whose owner signals each change.
    """
    try:
        async with asyncio.timeout(within_s):
            while not condition():
                if changed is None:
                    await asyncio.sleep(0)
                else:
                    await changed.wait()
                    changed.clear()
    except TimeoutError:
        raise AssertionError(f"timed out after {within_s:g} s waiting for {what}") from None


async def poll_until(
    condition: Callable[[], bool],
    what: str,
    *,
    within_s: float = BOUND,
    every_s: float = 0.01,
) -> None:
    """Check `condition()` every `every_s` of real time until it holds; fail after `within_s`.

    For state another process or a thread makes true: nothing in this loop can announce it.
    """
    try:
        async with asyncio.timeout(within_s):
            while not condition():  # noqa: ASYNC110 - another process or thread sets this
                await asyncio.sleep(every_s)
    except TimeoutError:
        raise AssertionError(f"timed out after {within_s:g} s waiting for {what}") from None


def wait_until(
    condition: Callable[[], bool],
    what: str = "the condition",
    *,
    within_s: float = 20.0,
    every_s: float = 0.05,
) -> None:
    """`poll_until` for a synchronous test: another process makes `condition()` true."""
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {within_s:g} s waiting for {what}")
        time.sleep(every_s)
