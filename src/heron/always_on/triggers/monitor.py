"""Shell monitors: a background job's new output (or only lines matching a pattern) as events.

`ShellMonitors.add` (the `monitor_shell` tool) watches one job. New complete lines are read
from the job's output file, filtered by the optional regular expression and coalesced: the
first line opens a window of `coalesce_s` seconds and every line arriving within it joins the
same `job.output` event. A rate limit (`max_events_per_min`, a sliding one-minute window)
keeps a flood from drowning the agent: a window over the limit is dropped and counted, and the
next event says how many lines and events were dropped. Each event quotes at most
`MAX_LINES` lines / `MAX_CHARS` characters and gives the byte range, so `job_output` can read
the rest. When the job ends, what is left is flushed in one last event (never rate limited, so
drop counts are always reported) before the job's `job.exit` event.

Monitors persist in a `MonitorStore` (`SqliteMonitorStore` by default): the stored offset is
where everything before it has been published, dropped or filtered out, so after a restart the
output is tailed from there.
Events carry idempotency keys made of the monitor id and the byte range.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from heron._support.clock import Clock, RealClock, timestamp
from heron._support.patterns import OutsidePattern, PatternError, stored_pattern
from heron.always_on.background import BackgroundLoop, TaskScope
from heron.always_on.bus.model import BusEvent
from heron.always_on.jobs.events import job_event, short_command
from heron.always_on.jobs.manager import JobManager
from heron.always_on.jobs.output import output_size
from heron.always_on.jobs.store import JobRecord

Publish = Callable[[BusEvent], Awaitable[bool]]
MAX_LINES = 50
MAX_CHARS = 4000
READ_CHUNK = 1 << 20
READS_PER_POLL = 8
RATE_WINDOW_S = 60.0


@dataclass(frozen=True, kw_only=True, slots=True)
class MonitorRecord:
    """One monitor as stored. `offset`: bytes of output fully handled."""

    id: str
    job_id: str
    session: str
    call_id: str | None
    pattern: str | None
    coalesce_s: float
    max_events_per_min: int
    offset: int
    state: Literal["active", "done"]
    created_at: float


MONITOR_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(MonitorRecord))
"""The stored fields of a monitor, in declaration order."""


class MonitorStore(Protocol):
    """Durable shell monitors (`MonitorRecord`), per session. Synchronous, like the monitors'
    other steps between two awaits; a back-end failure raises `heron.errors.StoreError`."""

    def insert(self, monitor: MonitorRecord) -> None:
        """Store a new monitor (its id must be new)."""
        ...

    def update(self, monitor_id: str, *, offset: int, done: bool = False) -> None:
        """Record how far a monitor has handled its job's output; `done` ends the monitor
        (`False` leaves its state as it is)."""
        ...

    def monitors(self, session: str, *, active_only: bool = True) -> list[MonitorRecord]:
        """The session's monitors, oldest first."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class Batch:
    """Lines to publish as one event, with what was dropped since the previous event."""

    lines: tuple[str, ...]
    start: int
    end: int
    dropped_lines: int = 0
    dropped_events: int = 0


class LineBatcher:
    """Filtering, coalescing and rate limiting for one monitor; times come from the caller."""

    def __init__(
        self,
        *,
        pattern: str | None,
        coalesce_s: float,
        max_events_per_min: int,
        offset: int = 0,
    ) -> None:
        self.pattern = stored_pattern(pattern) if pattern else None
        self.coalesce_s = coalesce_s
        self.max_events_per_min = max_events_per_min
        self.read_end = offset
        """Bytes read so far (complete lines only)."""
        self.safe_offset = offset
        """Bytes published, dropped or filtered out: where a restart resumes."""
        self._pending: list[str] = []
        self._pending_start = offset
        self._since = 0.0
        self._sent: deque[float] = deque()
        self._dropped_lines = 0
        self._dropped_events = 0

    def feed(self, lines: Sequence[str], start: int, end: int, now: float) -> None:
        """Lines read from bytes `start`..`end` of the output."""
        matching = [ln for ln in lines if self.pattern is None or self.pattern.found_in(ln)]
        if matching and not self._pending:
            self._since = now
            self._pending_start = start
        self._pending.extend(matching)
        self.read_end = end
        if not self._pending:
            self.safe_offset = end

    def take(self, now: float, *, final: bool = False) -> Batch | None:
        """The batch due at `now`, if any. A window over the rate limit is dropped and
        counted; `final` (the job ended) flushes everything and ignores the limit."""
        if self._pending and (final or now - self._since >= self.coalesce_s):
            while self._sent and self._sent[0] <= now - RATE_WINDOW_S:
                self._sent.popleft()
            lines, start = tuple(self._pending), self._pending_start
            self._pending = []
            self.safe_offset = self.read_end
            if not final and len(self._sent) >= self.max_events_per_min:
                self._dropped_lines += len(lines)
                self._dropped_events += 1
                return None
            self._sent.append(now)
            return self._batch(lines, start)
        if final and self._dropped_lines:
            return self._batch((), self.read_end)
        return None

    def _batch(self, lines: tuple[str, ...], start: int) -> Batch:
        batch = Batch(
            lines=lines,
            start=start,
            end=self.read_end,
            dropped_lines=self._dropped_lines,
            dropped_events=self._dropped_events,
        )
        self._dropped_lines = self._dropped_events = 0
        return batch


class ShellMonitors:
    """Runs the monitors of one session's jobs. See the module docstring."""

    def __init__(
        self,
        store: MonitorStore,
        jobs: JobManager,
        *,
        publish: Publish,
        clock: Clock | None = None,
        poll_interval_s: float = 0.5,
        tasks: TaskScope | None = None,
    ) -> None:
        """`tasks`: the scope the polling loop runs in (the trigger runtime's), else its own."""
        self.store = store
        self.jobs = jobs
        self.clock: Clock = clock or RealClock()
        self.poll_interval_s = poll_interval_s
        self._publish = publish
        self._batchers: dict[str, LineBatcher] = {}
        self._lock = asyncio.Lock()
        self._added = asyncio.Event()
        self._loop = BackgroundLoop(self._run, name="shell monitors", scope=tasks)
        jobs.add_finish_listener(self._job_finished)

    async def start(self) -> None:
        """Resume the session's active monitors from their stored offsets and start polling."""
        await self._loop.start()

    async def aclose(self) -> None:
        await self._loop.stop()

    async def add(
        self,
        job_id: str,
        *,
        pattern: str | None = None,
        coalesce_s: float = 2.0,
        max_events_per_min: int = 6,
        call_id: str | None = None,
    ) -> MonitorRecord:
        """Watch a running job's output from now on. Raises `KeyError` (unknown job),
        `ValueError` (bad arguments, or the job already ended)."""
        job = self.jobs.get(job_id)
        if job is None:
            raise KeyError(job_id)
        if job.finished:
            raise ValueError(f"{job_id} already ended ({job.state}); job_output reads its output")
        if pattern is not None:
            try:
                OutsidePattern(pattern)
            except PatternError as exc:
                raise ValueError(f"invalid pattern {pattern!r}: {exc}") from None
        if not 0 <= coalesce_s <= 3600:
            raise ValueError("coalesce_s must be between 0 and 3600")
        if not 1 <= max_events_per_min <= 600:
            raise ValueError("max_events_per_min must be between 1 and 600")
        record = MonitorRecord(
            id=f"mon-{secrets.token_hex(4)}",
            job_id=job_id,
            session=job.session,
            call_id=call_id,
            pattern=pattern or None,
            coalesce_s=coalesce_s,
            max_events_per_min=max_events_per_min,
            offset=output_size(job),
            state="active",
            created_at=self.clock.time(),
        )
        self.store.insert(record)
        self._added.set()
        return record

    def monitors(self, *, active_only: bool = True) -> list[MonitorRecord]:
        """The session's monitors, oldest first."""
        return self.store.monitors(self.jobs.session, active_only=active_only)

    async def poll(self) -> None:
        """Read new output of every active monitor and publish what is due."""
        for monitor in self.monitors():
            await self._pump(monitor, final=False)

    async def _run(self) -> None:
        while True:
            active = self.monitors()
            for monitor in active:
                await self._pump(monitor, final=False)
            if active:
                await self.clock.sleep(self.poll_interval_s)
            else:  # nothing to watch until `add` (most sessions, most wakes): no polling
                await self._added.wait()
                self._added.clear()

    async def _job_finished(self, job: JobRecord) -> None:
        for monitor in self.monitors():
            if monitor.job_id == job.id:
                await self._pump(monitor, final=True)

    async def _pump(self, monitor: MonitorRecord, *, final: bool) -> None:
        async with self._lock:
            batcher = self._batchers.get(monitor.id)
            if batcher is None:
                batcher = self._batchers[monitor.id] = LineBatcher(
                    pattern=monitor.pattern,
                    coalesce_s=monitor.coalesce_s,
                    max_events_per_min=monitor.max_events_per_min,
                    offset=monitor.offset,
                )
            job = self.jobs.get(monitor.job_id)
            now = self.clock.time()
            # A flood is read a few chunks per poll, so one monitor cannot hold the loop; the
            # final read takes everything.
            for _ in range(1 << 30 if final else READS_PER_POLL):
                if job is None:
                    break
                lines, end = _read_lines(job, batcher.read_end, final=final)
                if end == batcher.read_end:
                    break
                batcher.feed(lines, batcher.read_end, end, now)
            batch = batcher.take(now, final=final)
            if batch is not None:
                await self._publish(self._event(monitor, job, batch, final=final))
            done = final or job is None
            if done:
                self._batchers.pop(monitor.id, None)
            self.store.update(monitor.id, offset=batcher.safe_offset, done=done)

    def _event(
        self, monitor: MonitorRecord, job: JobRecord | None, batch: Batch, *, final: bool
    ) -> BusEvent:
        assert job is not None  # a batch needs output, and output needs the job
        what = f"lines matching /{monitor.pattern}/" if monitor.pattern else "new output"
        head = f"{what} of background job {job.id} (`{short_command(job.command)}`)"
        if final:
            head += ", which has ended"
        text, omitted = _quote(batch.lines)
        body = [head + ":", *text]
        if omitted:
            body.append(
                f"[{omitted} more lines not shown; job_output with offset={batch.start} reads them]"
            )
        if batch.dropped_lines:
            body.append(
                f"[rate limit: {batch.dropped_lines} lines in {batch.dropped_events} updates "
                f"were dropped since the previous update; job_output has them]"
            )
        data = {
            "monitor_id": monitor.id,
            "lines": len(batch.lines),
            "start_offset": batch.start,
            "end_offset": batch.end,
            "omitted_lines": omitted,
            "dropped_lines": batch.dropped_lines,
            "dropped_events": batch.dropped_events,
            "final": final,
        }
        return job_event(
            dataclasses.replace(job, call_id=monitor.call_id),
            "job.output",
            "\n".join(body),
            data,
            when=timestamp(self.clock),
            key=f"job.output:{monitor.id}:{batch.start}-{batch.end}",
            channel="shell_monitor",
        )


def _read_lines(job: JobRecord, offset: int, *, final: bool) -> tuple[list[str], int]:
    """Complete lines from `offset` (a last partial line too when `final`), and where they end."""
    try:
        with open(job.output_path, "rb") as handle:
            handle.seek(offset)
            raw = handle.read(READ_CHUNK)
    except FileNotFoundError:
        return [], offset
    cut = len(raw) if final else raw.rfind(b"\n") + 1
    if cut == 0 and len(raw) == READ_CHUNK:  # one enormous line: take it as it is
        cut = len(raw)
    text = raw[:cut].decode("utf-8", "replace")
    return text.splitlines(), offset + cut


def _quote(lines: tuple[str, ...]) -> tuple[list[str], int]:
    """At most MAX_LINES lines and MAX_CHARS characters; returns them and how many were left."""
    shown: list[str] = []
    used = 0
    for line in lines[:MAX_LINES]:
        if used + len(line) > MAX_CHARS and shown:
            break
        shown.append(line[:MAX_CHARS])
        used += len(line) + 1
    return shown, len(lines) - len(shown)
