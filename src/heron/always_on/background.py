"""Structured concurrency for the always-on pieces' background loops.

Timers, shell monitors, the heartbeat and the system checks each run one loop in the
background. `TaskScope` holds one `asyncio.TaskGroup` open from `start` to `aclose`; the
trigger runtime owns one and every trigger's loop runs in it, so no loop outlives the runtime
and `aclose` returns only when all of them have ended. `BackgroundLoop` is the start/stop pair
a trigger uses for its loop: in the scope it is given, else in a scope of its own (a trigger
used alone, as tests and `heron timers` do).

A loop that fails is logged and ends alone: one broken trigger does not stop the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger("heron.always_on")

Loop = Callable[[], Coroutine[Any, Any, None]]
"""A background loop: runs until it is cancelled."""


class TaskScope:
    """A `TaskGroup` held open between `start` and `aclose` (see the module docstring)."""

    def __init__(self) -> None:
        self._stack: contextlib.AsyncExitStack | None = None
        self._group: asyncio.TaskGroup | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def running(self) -> bool:
        """Whether the group is open (between `start` and `aclose`)."""
        return self._group is not None

    @property
    def loops(self) -> list[str]:
        """The names of the loops still running, sorted."""
        return sorted(task.get_name() for task in self._tasks)

    async def start(self) -> None:
        """Open the group (a no-op when it is open)."""
        if self._group is None:
            stack = contextlib.AsyncExitStack()
            self._group = await stack.enter_async_context(asyncio.TaskGroup())
            self._stack = stack

    def spawn(self, loop: Loop, *, name: str) -> asyncio.Task[None]:
        """Run `loop()` in the group until it ends or `aclose` cancels it."""
        if self._group is None:
            raise RuntimeError(f"cannot start {name}: the task scope is not running")
        task = self._group.create_task(_logged(name, loop), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def aclose(self) -> None:
        """Cancel every task still running and wait until all have ended."""
        stack, self._stack, self._group = self._stack, None, None
        if stack is None:
            return
        for task in self._tasks:
            task.cancel()
        await stack.aclose()


async def _logged(name: str, loop: Loop) -> None:
    # Failures stay inside their loop: the group never cancels its siblings or its owner.
    try:
        await loop()
    except Exception:
        log.exception("background loop %s failed and stopped", name)


class BackgroundLoop:
    """One trigger's background loop: `start` runs it once, `stop` cancels it and waits."""

    def __init__(self, loop: Loop, *, name: str, scope: TaskScope | None = None) -> None:
        self._loop = loop
        self.name = name
        self._scope = scope
        self._own: TaskScope | None = None
        self.task: asyncio.Task[None] | None = None
        """The running loop's task, `None` when stopped."""

    async def start(self) -> None:
        if self.task is not None:
            return
        scope = self._scope
        if scope is None:
            scope = self._own = TaskScope()
            await scope.start()
        self.task = scope.spawn(self._loop, name=self.name)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.wait([self.task])
            self.task = None
        if self._own is not None:
            own, self._own = self._own, None
            await own.aclose()
