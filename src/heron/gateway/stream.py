"""The event stream of a session (`GET /v1/sessions/{session}/events` as Server-Sent Events;
`…/ws` sends the same frames over a WebSocket, `Frame.message`).

A stream is two durable sequences merged in time order: the session's bus events (the
`BusStore` sequence) and its turn log (`heron.gateway.eventlog`). Each frame's SSE `id` is
the cursor after it, `<epoch>.<bus seq>.<turn seq>`, so `Last-Event-ID` names exactly what a
client has seen of both and a reconnect replays from the store what it missed — nothing twice,
nothing skipped. Frames:

- `event: bus`, data `{"seq", "event"}` (the `BusEvent`, scrubbed);
- `event: turn`, data the turn event (a card, a folded `text`, the final answer, …);
- `event: live`, data a streamed delta, a progress line or a card not stored yet, *without*
  an id (a replay has the folded text, and the card once its history entry is written);
- `event: resync`, data `{"reason"}`, with the cursor of now as its id: the client's cursor
  is not one (each position is 1 to 18 ASCII digits), is from another database (another
  epoch), is ahead of what the store holds, or is more than `replay_max` events behind, so it
  should reload what it shows from the API and go on from here.

A stream waits for news on the `Hub` (woken by this process's publishes and turn-log writes,
and on PostgreSQL by every worker's commits, announced by `NOTIFY`) and polls every
`poll_interval_s` for what other processes wrote.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import deque
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from heron.always_on.bus.store import BusStore, StoredEvent
from heron.gateway.eventlog import LoggedEvent, TurnLog
from heron.safety.redact import scrub_value

__all__ = ["Batch", "Cursor", "Frame", "Hub", "session_frames"]

_BATCHES = 64
"""Batches kept per session between two wakes (one per distinct cursor of its clients)."""
_LIVE_QUEUE = 1000
"""Live frames kept for a slow client; beyond, the oldest are dropped (they are not durable:
the folded text arrives with the next stored record anyway)."""
_POSITION = re.compile(r"[0-9]{1,18}")
"""A position of a cursor: ASCII digits only, few enough for a SQLite INTEGER (and for
`int()`, which takes other digits too)."""


@dataclass(frozen=True, slots=True)
class Cursor:
    epoch: str
    bus: int = 0
    turn: int = 0

    def __str__(self) -> str:
        return f"{self.epoch}.{self.bus}.{self.turn}"

    @classmethod
    def parse(cls, text: str) -> Cursor | None:
        epoch, _, rest = text.strip().partition(".")
        bus, _, turn = rest.partition(".")
        if not epoch or not _POSITION.fullmatch(bus) or not _POSITION.fullmatch(turn):
            return None
        return cls(epoch, int(bus), int(turn))


@dataclass(frozen=True, slots=True)
class Frame:
    event: str
    data: dict[str, Any]
    id: str | None = None
    stored_before: int = 0
    wire: str = ""
    """For a live frame: the session's last turn-log sequence when it was shown. Its text is
    folded into the session's next record, so a client past `stored_before` has it already."""

    def message(self) -> str:
        """The frame as one WebSocket text message: `{"event", "id", "data"}`."""
        return json.dumps(
            {"event": self.event, "id": self.id, "data": self.data},
            ensure_ascii=False,
            separators=(",", ":"),
        )

    def encode(self) -> str:
        """The frame on the wire (computed once for a frame many clients are sent)."""
        if self.wire:
            return self.wire
        lines = [f"event: {self.event}"]
        if self.id is not None:
            lines.append(f"id: {self.id}")
        lines.append("data: " + json.dumps(self.data, ensure_ascii=False, separators=(",", ":")))
        return "\n".join(lines) + "\n\n"


Batch = list[tuple[Frame, Cursor]]
"""Frames in order, each with the cursor after it."""


class Subscriber:
    """One stream's mailbox: live frames not sent yet, and whether the stores have news."""

    __slots__ = ("live", "news", "woken")

    def __init__(self) -> None:
        self.live: deque[Frame] = deque(maxlen=_LIVE_QUEUE)
        self.woken = False
        """Something durable was written since the stream last read the stores."""
        self.news = asyncio.Event()
        """Set by a live frame or a wake; cleared by the stream when it looks."""


class Hub:
    """Wakes the streams of a session and hands them its live frames."""

    def __init__(self) -> None:
        self._subscribers: dict[str, set[Subscriber]] = {}
        self._batches: dict[str, dict[Cursor, Batch]] = {}
        """Per session: what was read from the stores after a cursor since the last wake, so
        many clients at the same place read, scrub and encode it once. The stores only grow,
        so a kept batch stays a true prefix of what follows its cursor; an empty one is used
        only until the next wake or poll (it would hide what another process writes)."""

    def batch(self, session: str, cursor: Cursor) -> Batch | None:
        return self._batches.get(session, {}).get(cursor)

    def keep(self, session: str, cursor: Cursor, batch: Batch) -> None:
        kept = self._batches.setdefault(session, {})
        if len(kept) >= _BATCHES:
            kept.clear()
        kept[cursor] = batch

    def subscribe(self, session: str) -> Subscriber:
        subscriber = Subscriber()
        self._subscribers.setdefault(session, set()).add(subscriber)
        return subscriber

    def unsubscribe(self, session: str, subscriber: Subscriber) -> None:
        subscribers = self._subscribers.get(session)
        if subscribers is not None:
            subscribers.discard(subscriber)
            if not subscribers:
                del self._subscribers[session]

    @property
    def clients(self) -> int:
        return sum(len(s) for s in self._subscribers.values())

    def wake(self, session: str) -> None:
        """Something durable was written for `session`."""
        self._batches.pop(session, None)
        for subscriber in self._subscribers.get(session, ()):
            subscriber.woken = True
            subscriber.news.set()

    def wake_all(self) -> None:
        """Every stream looks again (and, when stopping, ends)."""
        for session in list(self._subscribers):
            self.wake(session)

    def live(self, session: str, body: dict[str, Any], stored_before: int) -> None:
        if session not in self._subscribers:
            return
        frame = Frame("live", body, stored_before=stored_before)
        frame = Frame("live", body, stored_before=stored_before, wire=frame.encode())  # once
        for subscriber in self._subscribers.get(session, ()):
            subscriber.live.append(frame)  # a full mailbox drops its oldest
            subscriber.news.set()


def _when(stored: StoredEvent) -> float:
    try:
        return datetime.fromisoformat(stored.event.timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


async def session_frames(
    session: str,
    *,
    bus: BusStore,
    log: TurnLog,
    hub: Hub,
    start: str | None,
    replay_max: int,
    poll_interval_s: float,
    stopping: asyncio.Event,
) -> AsyncGenerator[list[Frame]]:
    """The frames of `session` from the cursor `start` (`Last-Event-ID`; `None`: from the
    beginning) until `stopping` is set or the client goes away, in chunks: what is ready at
    once goes out in one write."""
    mailbox = hub.subscribe(session)
    try:
        given = Cursor.parse(start) if start else Cursor(log.epoch)
        cursor, reason = await _starting_point(session, given, bus, log)
        if reason is not None:
            yield [Frame("resync", {"reason": reason}, str(cursor))]
        polled = False
        while not stopping.is_set():
            merged = None if polled else hub.batch(session, cursor)
            polled = False
            if merged is None:
                bus_new = await bus.events(session=session, after=cursor.bus, limit=replay_max + 1)
                turn_new = log.after(session, cursor.turn, limit=replay_max + 1)
                if len(bus_new) + len(turn_new) > replay_max:
                    cursor = await _now(session, bus, log)
                    reason = f"more than {replay_max} events behind"
                    yield [Frame("resync", {"reason": reason}, str(cursor))]
                    continue
                merged = _merged(bus_new, turn_new, cursor)
                hub.keep(session, cursor, merged)
            if merged:
                cursor = merged[-1][1]
                yield [frame for frame, _ in merged]
                continue
            while not stopping.is_set():
                try:
                    await asyncio.wait_for(mailbox.news.wait(), poll_interval_s)
                except TimeoutError:
                    polled = True  # read the stores: another process may have written
                    break
                mailbox.news.clear()
                # A live frame a client is past came folded into a stored record.
                live = [f for f in mailbox.live if cursor.turn <= f.stored_before]
                mailbox.live.clear()
                if live:
                    yield live
                if mailbox.woken:
                    mailbox.woken = False
                    break
    finally:
        hub.unsubscribe(session, mailbox)


def _merged(bus_new: list[StoredEvent], turn_new: list[LoggedEvent], cursor: Cursor) -> Batch:
    """Both sequences merged by time, each kept in its own order (so the cursor only moves
    forward), each frame with the cursor after it."""
    out: list[tuple[Frame, Cursor]] = []
    i = j = 0
    while i < len(bus_new) or j < len(turn_new):
        if j == len(turn_new) or (i < len(bus_new) and _when(bus_new[i]) <= turn_new[j].at):
            stored = bus_new[i]
            i += 1
            cursor = Cursor(cursor.epoch, stored.seq, cursor.turn)
            event = scrub_value(stored.event.model_dump(mode="json"))
            out.append(
                (_wired(Frame("bus", {"seq": stored.seq, "event": event}, str(cursor))), cursor)
            )
        else:
            logged = turn_new[j]
            j += 1
            cursor = Cursor(cursor.epoch, cursor.bus, logged.seq)
            out.append((_wired(Frame("turn", logged.body, str(cursor))), cursor))
    return out


def _wired(frame: Frame) -> Frame:
    return Frame(frame.event, frame.data, frame.id, wire=frame.encode())


async def _starting_point(
    session: str, cursor: Cursor | None, bus: BusStore, log: TurnLog
) -> tuple[Cursor, str | None]:
    """Where the stream goes on from: `cursor`, or the cursor of now with why the client
    must resync (the store's head is read once, and only for a cursor that needs it)."""
    if cursor is None:
        return await _now(session, bus, log), "the cursor is not a cursor of this stream"
    if cursor.epoch != log.epoch:
        return await _now(session, bus, log), "the cursor is from another epoch"
    if cursor.bus or cursor.turn:
        # Beyond the head, it would wait in silence until the store caught up with it.
        now = await _now(session, bus, log)
        if cursor.bus > now.bus or cursor.turn > now.turn:
            return now, "the cursor is ahead of the store"
    return cursor, None


async def _now(session: str, bus: BusStore, log: TurnLog) -> Cursor:
    last = await bus.events(session=session, limit=1)
    return Cursor(log.epoch, last[-1].seq if last else 0, log.last(session))
