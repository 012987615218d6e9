"""The heartbeat, its silent all-clear, and lifecycle hooks (OpenClaw-style automation).

`Heartbeat` publishes a `system.heartbeat` event every `every_s` seconds, but only within the
configured active hours (a daily window in a time zone, which may wrap midnight): the agent
looks around (pending jobs, timers, messages) and either acts or answers with the all-clear
token (`HEARTBEAT_OK` by default). `AllClearFilter` wraps the output sink so that reply is
dropped silently instead of shown: a final answer that is the token, alone or with at most
`max_ack_chars` of other text before or after it. Text deltas are held back while the reply
could still be an all-clear, so nothing of it leaks to the screen. The reply stays in the
session history (it is what happened); only its display is suppressed.

The lifecycle hooks (start, stop, before/after each turn) are `heron.always_on.hooks`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, time
from zoneinfo import ZoneInfo

from heron._support.clock import Clock, RealClock, timestamp
from heron.always_on.background import BackgroundLoop, TaskScope
from heron.always_on.bus.model import BusEvent, EventContent
from heron.turn.events import BaseEvent, EventSink, FinalEvent, TextDeltaEvent

Publish = Callable[[BusEvent], Awaitable[bool]]
DEFAULT_TOKEN = "HEARTBEAT_OK"


@dataclass(frozen=True, kw_only=True, slots=True)
class ActiveHours:
    """A daily window `start`..`end` in `tz`; `end` before `start` wraps past midnight."""

    start: time
    end: time
    tz: str = "UTC"

    def contains(self, epoch: float) -> bool:
        now = datetime.fromtimestamp(epoch, ZoneInfo(self.tz)).time()
        if self.start <= self.end:
            return self.start <= now < self.end
        return now >= self.start or now < self.end


@dataclass(frozen=True, kw_only=True, slots=True)
class HeartbeatConfig:
    every_s: float = 1800.0
    active_hours: ActiveHours | None = None
    """`None`: around the clock."""
    token: str = DEFAULT_TOKEN
    max_ack_chars: int = 30
    """Other text an all-clear reply may carry beside the token and still be dropped."""
    prompt: str = ""
    """The heartbeat's instruction; empty: the default, which names the token."""

    def instruction(self) -> str:
        return self.prompt or (
            "Heartbeat: check whether anything needs your attention now (background jobs, "
            "timers, unanswered messages, follow-ups you promised). If something does, act on "
            f"it. If nothing does, reply with exactly {self.token} and nothing else."
        )


class Heartbeat:
    """Publishes heartbeats on a `Clock`. Ticks are `every_s` apart from the start; a tick
    that falls outside the active hours is skipped, and after a long sleep the missed ticks
    are not made up (the next one is the next future tick)."""

    def __init__(
        self,
        config: HeartbeatConfig,
        *,
        publish: Publish,
        session: str = "default",
        clock: Clock | None = None,
        tasks: TaskScope | None = None,
    ) -> None:
        """`tasks`: the scope the beating loop runs in (the trigger runtime's), else its own."""
        if config.every_s <= 0:
            raise ValueError("every_s must be positive")
        self.config = config
        self.session = session
        self.clock: Clock = clock or RealClock()
        self._publish = publish
        self._loop = BackgroundLoop(self._run, name="heartbeat", scope=tasks)
        self.beats = 0
        """Heartbeats published so far."""

    async def start(self) -> None:
        await self._loop.start()

    async def aclose(self) -> None:
        await self._loop.stop()

    async def _run(self) -> None:
        every = self.config.every_s
        tick = self.clock.time() + every
        while True:
            await self.clock.sleep_until(tick)
            hours = self.config.active_hours
            if hours is None or hours.contains(tick):
                await self._publish(self._event(tick))
                self.beats += 1
            now = self.clock.time()
            tick += every * max(1, int((now - tick) // every) + 1)

    def _event(self, tick: float) -> BusEvent:
        return BusEvent(
            kind="system.heartbeat",
            source="system",
            channel="system",
            urgency="low",
            session=self.session,
            timestamp=timestamp(self.clock),
            content=EventContent(
                text=self.config.instruction(), data={"all_clear_token": self.config.token}
            ),
            idempotency_key=f"heartbeat:{tick:.3f}",
        )


def is_all_clear(text: str, token: str = DEFAULT_TOKEN, max_ack_chars: int = 30) -> bool:
    """Whether a reply is the all-clear: the token at its start or end (markdown emphasis and
    punctuation around it ignored) with at most `max_ack_chars` of other text."""
    core = text.strip().strip(_DECORATION)
    if core.startswith(token):
        rest = core[len(token) :]
    elif core.endswith(token):
        rest = core[: -len(token)]
    else:
        return False
    return len(rest.strip(_DECORATION)) <= max_ack_chars


_DECORATION = " \t\n.!:*_`-"


class AllClearFilter:
    """An `EventSink` wrapper that drops the all-clear reply (see the module docstring)."""

    def __init__(
        self, sink: EventSink, *, token: str = DEFAULT_TOKEN, max_ack_chars: int = 30
    ) -> None:
        self._sink = sink
        self._token = token
        self._max = max_ack_chars
        self._held: dict[str, list[TextDeltaEvent]] = {}
        self.dropped = 0
        """All-clear replies suppressed so far."""

    def __call__(self, event: BaseEvent) -> None:
        turn = event.turn_id
        if isinstance(event, TextDeltaEvent):
            held = self._held.setdefault(turn, [])
            held.append(event)
            text = "".join(e.text for e in held)
            if len(text.strip()) > len(self._token) + self._max + 8:  # cannot be an all-clear
                self._release(turn)
            return
        if isinstance(event, FinalEvent) and is_all_clear(event.text, self._token, self._max):
            self._held.pop(turn, None)
            self.dropped += 1
            return
        self._release(turn)
        self._sink(event)

    def _release(self, turn: str) -> None:
        for held in self._held.pop(turn, []):
            self._sink(held)
