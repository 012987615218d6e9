"""`TriggerRuntime`: every trigger of one agent session, wired together for `heron serve`.

Usage::

    runtime = TriggerRuntime(
        state_dir=state_dir, stores=open_trigger_stores(state_dir), bus=bus,
        workspace=workspace, sandbox=sandbox, policy=policy, session=session,
        config=TriggerConfig(heartbeat=HeartbeatConfig(every_s=1800)),
    )
    agent = HookedAgent(hooks=runtime.hooks, model=model, tools=[*tools, *runtime.tools], ...)
    loop = EventDrivenAgent(agent, bus, bus.sessions, session=session,
                            sink=runtime.sink(render))
    await runtime.start()      # re-attach jobs, resume monitors/timers, run start hooks
    ...                        # await loop.serve()
    await runtime.aclose()     # stop hooks, stop the schedulers; jobs keep running detached

Everything publishes on `bus` (the same `BusStore` object the event loop watches, so events
wake it at once) and persists in `stores` (`TriggerStores`: jobs, timers, monitors and
subscriptions; `heron.always_on.triggers.sqlite_store.open_trigger_stores` opens them in
`<state_dir>/heron.db`). The runtime owns the stores it is given and closes them in `aclose`;
runtimes that share one set (`heron serve` gives every session's runtime the process's) are
each given `TriggerStores.shared()`. `state_dir` also holds the jobs' directories.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from heron._support.clock import Clock, RealClock
from heron.always_on.background import TaskScope
from heron.always_on.bus.store import BusStore, Unwatch
from heron.always_on.hooks import LifecycleHooks
from heron.always_on.jobs.manager import JobConfig, JobManager
from heron.always_on.jobs.store import JobStore
from heron.always_on.jobs.tools import job_tools
from heron.always_on.triggers.heartbeat import AllClearFilter, Heartbeat, HeartbeatConfig
from heron.always_on.triggers.monitor import MonitorStore, ShellMonitors
from heron.always_on.triggers.subscriptions import Subscriptions, SubscriptionStore
from heron.always_on.triggers.system import SystemEventConfig, SystemEvents
from heron.always_on.triggers.timers import TimerConfig, TimerScheduler, TimerStore
from heron.always_on.triggers.tools import monitor_tools, subscription_tools, timer_tools
from heron.safety.command_policy import CommandPolicy
from heron.sandbox.base import Sandbox
from heron.tools.definition import Tool
from heron.turn.events import EventSink


@dataclass(frozen=True, kw_only=True, slots=True)
class TriggerConfig:
    """Configuration of every trigger. `heartbeat=None` turns the heartbeat off, `system=None`
    the system events; empty `system.disk_paths` watch the state directory's and the
    workspace's disks."""

    jobs: JobConfig = field(default_factory=JobConfig)
    timers: TimerConfig = field(default_factory=TimerConfig)
    heartbeat: HeartbeatConfig | None = None
    system: SystemEventConfig | None = field(default_factory=SystemEventConfig)
    monitor_poll_s: float = 0.5


@dataclass(frozen=True, kw_only=True, slots=True)
class TriggerStores:
    """The durable state of the triggers. Each store keeps every session's records (its
    methods take the session), so one set can serve the runtimes of many sessions."""

    jobs: JobStore
    timers: TimerStore
    monitors: MonitorStore
    subscriptions: SubscriptionStore
    close: Callable[[], None] = lambda: None
    """Releases the stores' connections (called by `TriggerRuntime.aclose`)."""

    def shared(self) -> TriggerStores:
        """The same stores with a `close` that leaves them open: for one of several runtimes
        that share them (`heron serve`'s sessions); whoever opened them closes them once."""
        return dataclasses.replace(self, close=lambda: None)


class TriggerRuntime:
    """Jobs, monitors, timers, heartbeat, system events and subscriptions of one session.

    The background loops of the monitors, timers, heartbeat and system checks run in one
    `TaskScope` (`tasks`), opened by `start` and closed by `aclose`."""

    def __init__(
        self,
        *,
        state_dir: Path,
        stores: TriggerStores,
        bus: BusStore,
        workspace: Path,
        sandbox: Sandbox,
        policy: CommandPolicy,
        session: str = "default",
        clock: Clock | None = None,
        config: TriggerConfig | None = None,
        hooks: LifecycleHooks | None = None,
    ) -> None:
        """`stores`: the runtime closes them in `aclose`; to share one set of stores among
        the runtimes of many sessions (their methods take the session), give each runtime
        `stores.shared()` and close the stores once, after the last runtime."""
        config = config or TriggerConfig()
        self.config = config
        self.clock: Clock = clock or RealClock()
        self.hooks = hooks or LifecycleHooks()
        self._bus = bus
        self.stores = stores
        self.tasks = TaskScope()
        """The task group every trigger's background loop runs in."""
        publish = bus.publish
        self.jobs = JobManager(
            stores.jobs,
            state_dir=state_dir,
            workspace=workspace,
            sandbox=sandbox,
            policy=policy,
            publish=publish,
            session=session,
            clock=self.clock,
            config=config.jobs,
        )
        self.monitors = ShellMonitors(
            stores.monitors,
            self.jobs,
            publish=publish,
            clock=self.clock,
            poll_interval_s=config.monitor_poll_s,
            tasks=self.tasks,
        )
        self.timers = TimerScheduler(
            stores.timers,
            publish=publish,
            session=session,
            clock=self.clock,
            config=config.timers,
            tasks=self.tasks,
        )
        self.subscriptions = Subscriptions(stores.subscriptions, session=session)
        system = config.system
        if system is not None and not system.disk_paths:
            system = dataclasses.replace(system, disk_paths=(state_dir, workspace))
        self.system = (
            SystemEvents(
                system, publish=publish, session=session, clock=self.clock, tasks=self.tasks
            )
            if system is not None
            else None
        )
        self.heartbeat = (
            Heartbeat(
                config.heartbeat,
                publish=publish,
                session=session,
                clock=self.clock,
                tasks=self.tasks,
            )
            if config.heartbeat is not None
            else None
        )
        self.tools: list[Tool] = [
            *job_tools(self.jobs),
            *monitor_tools(self.monitors),
            *timer_tools(self.timers),
            *subscription_tools(self.subscriptions, self.clock),
        ]
        """Every trigger tool, to add to the agent's tools."""
        self._unwatch: Unwatch | None = None

    def sink(self, inner: EventSink) -> EventSink:
        """The output sink to give the event loop: drops the heartbeat's all-clear reply."""
        beat = self.config.heartbeat
        if beat is None:
            return inner
        return AllClearFilter(inner, token=beat.token, max_ack_chars=beat.max_ack_chars)

    async def start(self) -> None:
        """Re-attach jobs, resume monitors and timers (misfire policies apply), start the
        heartbeat and system checks, then run the start hooks."""
        await self.tasks.start()
        await self.jobs.start()
        await self.monitors.start()
        await self.timers.start()
        if self.system is not None:
            self._unwatch = self._bus.watch(self.system.observe)
            await self.system.start()
        if self.heartbeat is not None:
            await self.heartbeat.start()
        await self.hooks.started()

    async def aclose(self) -> None:
        """Run the stop hooks, stop every scheduler and close the stores. Background jobs keep
        running; the next `start()` re-attaches them."""
        await self.hooks.stopped()
        if self.heartbeat is not None:
            await self.heartbeat.aclose()
        if self.system is not None:
            await self.system.aclose()
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        await self.timers.aclose()
        await self.monitors.aclose()
        await self.tasks.aclose()
        await self.jobs.aclose()
        self.stores.close()
