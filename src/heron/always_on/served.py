"""`ServedSession`: what runs while one session of `heron serve` is awake — its event loop
over its own agent, and its triggers (`heron.always_on.sessions.SessionRuntime`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from heron.always_on.bus.loop import EventDrivenAgent
from heron.always_on.bus.model import BusEvent
from heron.always_on.jobs.manager import JobManager
from heron.always_on.triggers.runtime import TriggerRuntime

__all__ = ["ServedSession"]


class ServedSession:
    """What runs while one session is awake (`heron.always_on.sessions.SessionRuntime`): its
    event loop over its own agent, and its triggers."""

    def __init__(
        self,
        loop: EventDrivenAgent,
        triggers: TriggerRuntime,
        *,
        children: Callable[[], str | None] | None = None,
    ) -> None:
        """`children()`: what keeps the session awake besides its jobs (its running
        sub-agents: their results land in this session)."""
        self._loop = loop
        self.triggers = triggers
        self._children = children
        self._stopping_jobs: set[asyncio.Task[None]] = set()

    @property
    def loop(self) -> EventDrivenAgent:
        return self._loop

    @property
    def jobs(self) -> JobManager:
        return self.triggers.jobs

    def notify(self, event: BusEvent) -> None:
        """A stop request also stops the session's background jobs (see the module
        docstring); their ends are published as `job.exit` events."""
        route = self._loop.router.route_now(event)
        if route is not None and route.strategy == "cancel" and route.cancel_mode == "cancel":
            task = asyncio.ensure_future(_cancel_jobs(self.jobs))
            self._stopping_jobs.add(task)
            task.add_done_callback(self._stopping_jobs.discard)
        self._loop.notify(event)

    def busy(self) -> str | None:
        for job in self.jobs.store.open_jobs(self.jobs.session):
            return f"background job {job.id} is {job.state}"
        return self._children() if self._children is not None else None

    def next_alarm(self) -> float | None:
        timers = self.triggers.timers.timers()
        return timers[0].next_fire if timers else None

    async def start(self) -> None:
        await self.triggers.start()  # re-attach jobs, resume timers: what fell due fires

    async def aclose(self) -> None:
        await self._loop.aclose()
        await asyncio.gather(*self._stopping_jobs, return_exceptions=True)
        await self.triggers.aclose()


async def _cancel_jobs(jobs: JobManager) -> None:
    for job in jobs.jobs():
        if not job.finished:
            await jobs.cancel(job.id)
