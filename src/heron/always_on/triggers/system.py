"""System events: `user_inactive`, `resource_alert` (and where `process_timeout` comes from).

`SystemEvents` checks on a `Clock`, every `check_every_s`:

- `system.user_inactive`: no `user.input` or `user.interrupt` in the session for
  `user_inactive_after_s` (counted from start-up until the first input). Published once per
  quiet period; the next user input re-arms it.
- `system.resource_alert`: a disk (`shutil.disk_usage` of each configured path) or memory
  (`MemTotal - MemAvailable` from /proc/meminfo) at or above its `high` fraction. Hysteresis:
  after an alert, the same resource alerts again only once it has dropped below its `low`
  fraction and risen past `high` once more, so a value hovering at the threshold does not
  repeat every tick.

`system.process_timeout` is produced by the job manager
(`heron.always_on.jobs.events.timeout_event`), once per job, when a background job passes its
deadline.

Register `SystemEvents.observe` with the bus (`BusStore.watch`) so user activity is seen.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from heron._support.clock import Clock, RealClock, timestamp
from heron.always_on.background import BackgroundLoop, TaskScope
from heron.always_on.bus.model import BusEvent, EventContent, EventKind

Publish = Callable[[BusEvent], Awaitable[bool]]
USER_KINDS = frozenset({"user.input", "user.interrupt"})


@dataclass(frozen=True, kw_only=True, slots=True)
class Usage:
    used: int
    total: int

    @property
    def fraction(self) -> float:
        return self.used / self.total if self.total else 0.0


def disk_usage(path: Path) -> Usage:
    """Used and total bytes of the file system holding `path`."""
    usage = shutil.disk_usage(path)
    return Usage(used=usage.total - usage.free, total=usage.total)


def memory_usage(meminfo: Path = Path("/proc/meminfo")) -> Usage | None:
    """Memory in use (total minus available) from /proc/meminfo; `None` where there is none."""
    try:
        text = meminfo.read_text()
    except OSError:
        return None
    values: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[name] = int(parts[0]) * 1024
    total, available = values.get("MemTotal"), values.get("MemAvailable")
    if total is None or available is None:
        return None
    return Usage(used=total - available, total=total)


@dataclass(frozen=True, kw_only=True, slots=True)
class SystemEventConfig:
    check_every_s: float = 60.0
    user_inactive_after_s: float | None = 1800.0
    """`None` turns `user_inactive` off."""
    disk_paths: tuple[Path, ...] = ()
    disk_high: float = 0.90
    disk_low: float = 0.85
    memory: bool = True
    memory_high: float = 0.90
    memory_low: float = 0.85


@dataclass(slots=True)
class _Resource:
    name: str
    label: str
    probe: Callable[[], Usage | None]
    high: float
    low: float
    alerting: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class SystemEvents:
    """Produces `user_inactive` and `resource_alert` events. See the module docstring.

    `disk_probe` and `memory_probe` default to the real measurements; `tasks` is the scope the
    checking loop runs in (the trigger runtime's), else its own."""

    def __init__(
        self,
        config: SystemEventConfig,
        *,
        publish: Publish,
        session: str = "default",
        clock: Clock | None = None,
        disk_probe: Callable[[Path], Usage] = disk_usage,
        memory_probe: Callable[[], Usage | None] = memory_usage,
        tasks: TaskScope | None = None,
    ) -> None:
        pairs = ((config.disk_low, config.disk_high), (config.memory_low, config.memory_high))
        for low, high in pairs:
            if not 0 < low <= high <= 1:
                raise ValueError("thresholds need 0 < low <= high <= 1")
        self.config = config
        self.session = session
        self.clock: Clock = clock or RealClock()
        self._publish = publish
        self._last_input = self.clock.time()
        self._inactive_reported = False
        self._resources: list[_Resource] = [
            _Resource(
                name=f"disk:{path}",
                label=f"disk holding {path}",
                probe=functools.partial(disk_probe, path),
                high=config.disk_high,
                low=config.disk_low,
                extra={"resource": "disk", "path": str(path)},
            )
            for path in config.disk_paths
        ]
        if config.memory:
            self._resources.append(
                _Resource(
                    name="memory",
                    label="memory",
                    probe=memory_probe,
                    high=config.memory_high,
                    low=config.memory_low,
                    extra={"resource": "memory"},
                )
            )
        self._loop = BackgroundLoop(self._run, name="system events", scope=tasks)

    def observe(self, event: BusEvent) -> None:
        """`BusStore.watch` callback: user input in this session re-arms `user_inactive`."""
        if event.session == self.session and event.kind in USER_KINDS:
            self._last_input = self.clock.time()
            self._inactive_reported = False

    async def start(self) -> None:
        await self._loop.start()

    async def aclose(self) -> None:
        await self._loop.stop()

    async def check(self) -> list[BusEvent]:
        """Measure now and publish what is due; returns the events published."""
        now = self.clock.time()
        events: list[BusEvent] = []
        after = self.config.user_inactive_after_s
        idle = now - self._last_input
        if after is not None and not self._inactive_reported and idle >= after:
            self._inactive_reported = True
            minutes = int(idle // 60)
            events.append(
                self._event(
                    "system.user_inactive",
                    f"the user has not written for {minutes} minutes",
                    {"idle_s": round(idle, 1)},
                )
            )
        for resource in self._resources:
            usage = resource.probe()
            if usage is None:
                continue
            fraction = usage.fraction
            if resource.alerting and fraction < resource.low:
                resource.alerting = False
            elif not resource.alerting and fraction >= resource.high:
                resource.alerting = True
                events.append(self._resource_event(resource, usage))
        for event in events:
            await self._publish(event)
        return events

    async def _run(self) -> None:
        while True:
            await self.clock.sleep(self.config.check_every_s)
            await self.check()

    def _resource_event(self, resource: _Resource, usage: Usage) -> BusEvent:
        gib = 1024**3
        text = (
            f"{resource.label} is {usage.fraction:.0%} full ({usage.used / gib:.1f} of "
            f"{usage.total / gib:.1f} GiB; alert threshold {resource.high:.0%})"
        )
        data = {
            **resource.extra,
            "used_fraction": round(usage.fraction, 4),
            "used_bytes": usage.used,
            "total_bytes": usage.total,
            "threshold": resource.high,
        }
        return self._event("system.resource_alert", text, data)

    def _event(self, kind: EventKind, text: str, data: dict[str, Any]) -> BusEvent:
        return BusEvent(
            kind=kind,
            source="system",
            channel="system",
            urgency="low" if kind == "system.user_inactive" else "normal",
            session=self.session,
            timestamp=timestamp(self.clock),
            content=EventContent(text=text, data=data),
        )
