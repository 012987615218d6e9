"""Durable timers: one-shot, interval and cron schedules that publish `timer.trigger` events.

Timers live in a `TimerStore` (`SqliteTimerStore` in `heron.always_on.triggers.sqlite_store`
by default), so they survive restarts. A `TimerScheduler` task, driven by a `Clock`, sleeps
until the earliest due timer (waking early when timers change) and publishes one event per fire
with the idempotency key `timer:<id>:<slot>`; a crash between publishing and storing the next
slot republishes the same key, which the bus stores once.

Schedules: `at` (an RFC 3339 time) or `after_s` fire once; `every_s` repeats (its first fire at
`at`/`after_s` if given, else one interval from now); `cron` is a five-field expression read
in a time zone (`croniter`, so daylight-saving changes are honoured). Interval slots are
computed from the previous slot, not from the wake-up time, so a timer never drifts.

Misfires: due slots handled within `misfire_grace_s` of the oldest one's time are on time and
all fire (one long `FakeClock.advance` fires every slot that fell due, in order). When the
oldest due slot is later than that, the timer misfired (heron was down, or the machine slept)
and its policy decides what happens to all the slots that fell due meanwhile:

- `fire_once`: one catch-up fire for all of them, saying how many were missed;
- `skip`: no fire; the timer continues with its next future slot (a missed one-shot timer ends
  without firing);
- `catch_up`: one fire per missed slot, oldest first, at most `max_catch_up` (the most recent
  ones; the first says how many older ones were left out).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import secrets
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol
from zoneinfo import ZoneInfo

from croniter import croniter  # type: ignore[import-untyped]

from heron._support.clock import Clock, RealClock, timestamp
from heron.always_on.background import BackgroundLoop, TaskScope
from heron.always_on.bus.model import BusEvent, EventContent, EventContext
from heron.errors import HeronError

Publish = Callable[[BusEvent], Awaitable[bool]]
Misfire = Literal["fire_once", "skip", "catch_up"]
ScheduleKind = Literal["at", "every", "cron"]
TimerState = Literal["active", "done", "cancelled"]
CRON_SCAN_LIMIT = 10_000
"""Missed cron slots counted one by one; beyond this the count is a lower bound."""


class TimerError(HeronError, ValueError):
    """A timer request that cannot be honoured; nothing was changed."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TimerConfig:
    misfire_grace_s: float = 30.0
    max_catch_up: int = 10
    min_interval_s: float = 1.0
    default_tz: str = "UTC"
    max_active: int = 200
    """Active timers per session, so a runaway loop cannot schedule without bound."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TimerRecord:
    """One timer as stored; `next_fire` is the next slot (epoch seconds), `None` when over."""

    id: str
    session: str
    call_id: str | None
    message: str
    kind: ScheduleKind
    every_s: float | None
    cron: str | None
    tz: str
    misfire: Misfire
    next_fire: float | None
    fires: int
    missed: int
    state: TimerState
    created_at: float
    last_fired: float | None

    def describe(self) -> str:
        """The schedule in words."""
        if self.kind == "cron":
            return f"cron '{self.cron}' ({self.tz})"
        if self.kind == "every":
            return f"every {self.every_s:g} s"
        return f"once at {rfc3339(self.next_fire or self.last_fired or 0.0, self.tz)}"


TIMER_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(TimerRecord))
"""The stored fields of a timer, in declaration order."""


class TimerStore(Protocol):
    """Durable timers (`TimerRecord`), per session. Timers are never deleted: a cancelled or
    finished timer keeps its record. Synchronous, like the scheduler's other steps between two
    awaits; a back-end failure raises `heron.errors.StoreError`."""

    def insert(self, timer: TimerRecord) -> None:
        """Store a new timer (its id must be new)."""
        ...

    def update(self, timer_id: str, **changes: Any) -> TimerRecord:
        """Change fields of a timer and return the stored result; `ValueError` for a name not
        in `TIMER_FIELDS` (nothing changes), `KeyError` for an unknown timer."""
        ...

    def get(self, session: str, timer_id: str) -> TimerRecord | None:
        """The session's timer, or `None` (also for another session's timer)."""
        ...

    def timers(self, session: str, *, active_only: bool = True) -> list[TimerRecord]:
        """The session's timers, soonest `next_fire` first, those without one last."""
        ...

    def count_active(self, session: str) -> int:
        """How many of the session's timers are `active`."""
        ...

    def due(self, session: str, now: float) -> list[TimerRecord]:
        """The session's active timers whose `next_fire` is at or before `now`, soonest first."""
        ...

    def next_fire(self, session: str) -> float | None:
        """The earliest `next_fire` of the session's active timers; `None` when none is."""
        ...


def rfc3339(epoch: float, tz: str = "UTC") -> str:
    """An epoch time as RFC 3339 in `tz` (UTC as `Z`)."""
    text = datetime.fromtimestamp(epoch, ZoneInfo(tz)).isoformat(timespec="seconds")
    return text.replace("+00:00", "Z") if tz == "UTC" else text


def parse_time(text: str, tz: str | None) -> float:
    """An RFC 3339 time as epoch seconds; without an offset it is read in `tz`, if given."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise TimerError(
            f"`at` {text!r} is not an RFC 3339 time like 2025-06-01T09:00:00Z"
        ) from None
    if moment.tzinfo is None:
        if tz is None:
            raise TimerError(f"`at` {text!r} has no UTC offset; add one (e.g. Z) or pass tz")
        moment = moment.replace(tzinfo=_zone(tz))
    return moment.timestamp()


def _zone(tz: str) -> ZoneInfo:
    try:
        return ZoneInfo(tz)
    except (KeyError, ValueError):
        raise TimerError(f"unknown time zone {tz!r}; use an IANA name like Europe/Berlin") from None


def _cron_after(expr: str, tz: str, after: float) -> float:
    return float(croniter(expr, datetime.fromtimestamp(after, ZoneInfo(tz))).get_next(float))


def _due(timer: TimerRecord, now: float, keep: int | None) -> tuple[list[float], int, float | None]:
    """The slots due at `now` (only the last `keep` if given), how many were due, and the
    first slot after `now` (`None`: the timer is over)."""
    first = timer.next_fire
    assert first is not None  # only active timers are due
    if timer.kind == "at":
        return [first], 1, None
    if timer.kind == "every":
        step = timer.every_s
        assert step is not None
        count = math.floor((now - first) / step) + 1
        start = 0 if keep is None else max(count - keep, 0)
        return [first + k * step for k in range(start, count)], count, first + count * step
    assert timer.cron is not None
    tail: deque[float] = deque(maxlen=keep)
    count = 0
    slot = first
    while slot <= now:
        tail.append(slot)
        count += 1
        if count >= CRON_SCAN_LIMIT:
            return list(tail), count, _cron_after(timer.cron, timer.tz, now)
        slot = _cron_after(timer.cron, timer.tz, slot)
    return list(tail), count, slot


class TimerScheduler:
    """Timers of one session: storage, the tools' operations, and the firing loop."""

    def __init__(
        self,
        store: TimerStore,
        *,
        publish: Publish,
        session: str = "default",
        clock: Clock | None = None,
        config: TimerConfig | None = None,
        tasks: TaskScope | None = None,
    ) -> None:
        """`tasks`: the scope the firing loop runs in (the trigger runtime's), else its own."""
        self.store = store
        self._publish = publish
        self.session = session
        self.clock: Clock = clock or RealClock()
        self.config = config or TimerConfig()
        self._sleeping = self._wake_pending = self._stale = False
        self._loop = BackgroundLoop(self._run, name="timers", scope=tasks)

    # -- operations ---------------------------------------------------------------------------

    def add(
        self,
        *,
        message: str,
        at: str | None = None,
        after_s: float | None = None,
        every_s: float | None = None,
        cron: str | None = None,
        tz: str | None = None,
        misfire: Misfire = "fire_once",
        call_id: str | None = None,
    ) -> TimerRecord:
        """Create a timer; raises `TimerError` for an impossible or ambiguous schedule."""
        config = self.config
        now = self.clock.time()
        if not message.strip():
            raise TimerError("`message` is empty: say what the timer is for")
        zone = tz or config.default_tz
        _zone(zone)
        if at is not None and after_s is not None:
            raise TimerError("give `at` or `after_s`, not both")
        if cron is not None and (at, after_s, every_s) != (None, None, None):
            raise TimerError("`cron` cannot be combined with `at`, `after_s` or `every_s`")
        if after_s is not None and after_s < 0:
            raise TimerError("`after_s` must be >= 0")
        if every_s is not None and every_s < config.min_interval_s:
            raise TimerError(f"`every_s` must be at least {config.min_interval_s:g}")
        first = parse_time(at, tz) if at is not None else None
        if after_s is not None:
            first = now + after_s
        if first is not None and first < now - 1.0:
            raise TimerError(f"`at` {at} is in the past (now is {rfc3339(now, zone)})")
        kind: ScheduleKind
        if cron is not None:
            if not croniter.is_valid(cron):
                raise TimerError(f"invalid cron expression {cron!r} (five fields: m h dom mon dow)")
            kind, first = "cron", _cron_after(cron, zone, now)
        elif every_s is not None:
            kind, first = "every", first if first is not None else now + every_s
        elif first is not None:
            kind = "at"
        else:
            raise TimerError("give one of `at`, `after_s`, `every_s` or `cron`")
        active = self.store.count_active(self.session)
        if active >= config.max_active:
            raise TimerError(f"{active} timers are active, the limit; cancel some first")
        timer = TimerRecord(
            id=f"tmr-{secrets.token_hex(4)}",
            session=self.session,
            call_id=call_id,
            message=message,
            kind=kind,
            every_s=every_s,
            cron=cron,
            tz=zone,
            misfire=misfire,
            next_fire=first,
            fires=0,
            missed=0,
            state="active",
            created_at=now,
            last_fired=None,
        )
        self.store.insert(timer)
        self._wake()
        return timer

    def cancel(self, timer_id: str) -> TimerRecord | None:
        """Cancel an active timer; `None` if the session has no such timer."""
        timer = self.get(timer_id)
        if timer is None:
            return None
        if timer.state == "active":
            timer = self.store.update(timer.id, state="cancelled", next_fire=None)
            self._wake()
        return timer

    def get(self, timer_id: str) -> TimerRecord | None:
        return self.store.get(self.session, timer_id)

    def timers(self, *, active_only: bool = True) -> list[TimerRecord]:
        """The session's timers, soonest first."""
        return self.store.timers(self.session, active_only=active_only)

    # -- firing -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start firing (due and missed timers are handled at once, by their policies)."""
        await self._loop.start()

    async def aclose(self) -> None:
        await self._loop.stop()

    async def fire_due(self) -> int:
        """Fire every timer due now, applying misfire policies; returns events published."""
        now = self.clock.time()
        return await self._fire(self.store.due(self.session, now), now)

    async def _fire(self, due: list[TimerRecord], now: float) -> int:
        published = 0
        for timer in due:
            assert timer.next_fire is not None  # selected by next_fire <= now
            misfired = timer.next_fire < now - self.config.misfire_grace_s
            keep = max(self.config.max_catch_up, 1) if misfired else None
            slots, count, upcoming = _due(timer, now, keep)
            fires: list[tuple[float, dict[str, Any]]] = []
            if not misfired:
                fires = [(slot, {}) for slot in slots]
            elif timer.misfire == "fire_once":
                fires = [(slots[-1], {"missed": count})]
            elif timer.misfire == "catch_up":
                for index, slot in enumerate(slots):
                    note: dict[str, Any] = {
                        "catch_up": f"{index + 1}/{len(slots)}",
                        "missed": count,
                    }
                    if index == 0 and count > len(slots):
                        note["left_out"] = count - len(slots)
                    fires.append((slot, note))
            for slot, note in fires:
                await self._publish(self._event(timer, slot, now, note))
            published += len(fires)
            self.store.update(
                timer.id,
                next_fire=upcoming,
                state="active" if upcoming is not None else "done",
                fires=timer.fires + len(fires),
                missed=timer.missed + (count if misfired else 0),
                last_fired=fires[-1][0] if fires else timer.last_fired,
            )
        return published

    async def _run(self) -> None:
        # The task sleeps inline, so a due timer is one loop iteration from firing (extra
        # tasks between the clock and the firing cost iterations, which is jitter on a busy
        # loop). A change to the timers wakes it by cancelling that sleep (`_wake`).
        task = asyncio.current_task()
        assert task is not None
        while True:
            self._stale = False
            # One read for both what is due now and the next one after it (soonest first):
            # a wake of a session reads its timers once.
            now = self.clock.time()
            active = self.store.timers(self.session)
            due = [t for t in active if t.next_fire is not None and t.next_fire <= now]
            if due:
                await self._fire(due, now)
                continue  # firing moved them: read them again
            if self._stale:
                continue
            upcoming = active[0].next_fire if active else None
            self._sleeping = True
            try:
                if upcoming is None:
                    await asyncio.get_running_loop().create_future()
                else:
                    await self.clock.sleep_until(upcoming)
            except asyncio.CancelledError:
                if not self._wake_pending or task.uncancel() > 0:
                    raise
            finally:
                self._sleeping = self._wake_pending = False

    def _wake(self) -> None:
        """Make the firing loop look at the timers again."""
        task = self._loop.task
        if task is not None and self._sleeping and not self._wake_pending:
            self._wake_pending = True
            task.cancel()
        else:
            self._stale = True

    def _event(self, timer: TimerRecord, slot: float, now: float, note: dict[str, Any]) -> BusEvent:
        text = timer.message
        if "catch_up" in note:
            text += f"\n[catch-up fire {note['catch_up']} for runs missed while heron was down"
            text += f"; {note['left_out']} older ones left out]" if "left_out" in note else "]"
        elif note.get("missed"):
            text += (
                f"\n[fired late: {note['missed']} scheduled run(s) were missed while heron was "
                "down; this one fire covers them]"
            )
        data = {
            "timer_id": timer.id,
            "schedule": timer.describe(),
            "scheduled_for": rfc3339(slot, timer.tz),
            "late_s": round(max(now - slot, 0.0), 3),
            **note,
        }
        return BusEvent(
            kind="timer.trigger",
            source="system",
            channel="timer",
            session=timer.session,
            timestamp=timestamp(self.clock),
            content=EventContent(text=text, data=data),
            context=EventContext(related_task=timer.id),
            idempotency_key=f"timer:{timer.id}:{slot:.3f}",
        )
