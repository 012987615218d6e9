"""Poison messages: an event that cannot be consumed is set aside, and the agent goes on.

An always-on agent must not stop, or crash again on every restart, because one event cannot be
taken in (a payload that breaks the framing, a router that raises on it, a stored event a newer
heron wrote). `Quarantine` is the event loop's part of that (`BusStore.fail` and
`BusStore.dead_letters` are the store's):

- `failed` records a failed attempt for every event of the batch that failed (durably, so a
  restart goes on counting) and marks them suspect: until the suspects are consumed or
  quarantined, the loop takes events in one at a time (`narrow`), so the one poison event is
  found and the others go through. An event that failed `max_attempts` times (default 3) is
  quarantined by the store.
- `announce` looks for new dead letters of the session (also those the store quarantined on
  its own: a stored event that cannot be read back) and, once per dead letter, publishes a
  `system.dead_letter` event (the agent and the operator's `heron events tail` see it), logs
  an error on the `heron.alerts` logger and sends an `Alert` through the agent's
  `AlertManager`, when it has one. `heron events tail --dead` lists the dead letters.

Storage failures (`StoreError`) and a second writer (`ConcurrentWriteError`) are not poison: they
say nothing about the event, and the loop lets them through as before.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from heron._support.clock import Clock, timestamp
from heron.always_on.bus.model import BusEvent, EventContent, EventContext
from heron.always_on.bus.store import BusStore, DeadLetter

if TYPE_CHECKING:
    from heron.telemetry.alerts import Alert, AlertManager

DEFAULT_MAX_ATTEMPTS = 3
"""Failed consumptions after which an event is quarantined (`EventDrivenAgent(max_attempts=)`,
`heron serve --max-attempts`)."""

log = logging.getLogger("heron.alerts")


def describe_failure(exc: BaseException) -> str:
    """One line for the dead letter: `ExceptionType: message`, at most 500 characters."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:500]


def dead_letter_event(letter: DeadLetter, *, session: str, clock: Clock) -> BusEvent:
    """The `system.dead_letter` event announcing `letter` (published once: its key)."""
    if letter.attempts:
        why = f"it failed {letter.attempts} times"
    else:
        why = "what is stored cannot be read as an event"
    origin = ""
    if letter.event is not None:
        origin = f" from {letter.event.source} via {letter.event.channel}"
    return BusEvent(
        kind="system.dead_letter",
        source="system",
        channel="system",
        session=session,
        timestamp=timestamp(clock),
        content=EventContent(
            text=(
                f"An event could not be processed and was set aside: {letter.kind} "
                f"{letter.event_id}{origin}; {why} ({letter.error}). Its content was not "
                "read. The operator finds it with `heron events tail --dead`."
            ),
            data={
                "event_id": letter.event_id,
                "kind": letter.kind,
                "attempts": letter.attempts,
                "error": letter.error,
            },
        ),
        context=EventContext(related_task=letter.event_id),
        idempotency_key=f"dead_letter:{letter.event_id}",
    )


class Quarantine:
    """The event loop's side of poison-message handling; see the module docstring."""

    def __init__(
        self,
        store: BusStore,
        session: str,
        *,
        clock: Clock,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        alerts: AlertManager | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        self.store = store
        self.session = session
        self.clock = clock
        self.max_attempts = max_attempts
        self.alerts = alerts
        self.suspects: set[str] = set()
        """Events of a batch that failed: taken in one at a time until they are gone."""
        self.failures = 0
        """Failed attempts counted by this loop so far."""
        self._seen: int | None = None

    def narrow(self, pending: list[BusEvent]) -> list[BusEvent]:
        """`pending`, or only its first event while a failed batch is being retried."""
        self.suspects &= {e.id for e in pending}
        return pending[:1] if self.suspects else pending

    async def failed(self, events: Sequence[BusEvent], exc: BaseException) -> list[str]:
        """Count a failed attempt to consume `events`; returns the ids now quarantined."""
        error = describe_failure(exc)
        ids = [e.id for e in events]
        log.warning("consuming events %s failed: %s", ", ".join(ids), error)
        self.suspects.update(ids)
        self.failures += 1
        dead = await self.store.fail(self.session, ids, error, max_attempts=self.max_attempts)
        self.suspects.difference_update(dead)
        return dead

    async def announce(self) -> list[DeadLetter]:
        """Publish, log and alert each dead letter of the session not announced yet."""
        letters = await self.store.dead_letters(session=self.session, after=self._seen)
        announced: list[DeadLetter] = []
        for letter in letters:
            self._seen = letter.seq
            if letter.kind == "system.dead_letter":
                # Never announce an announcement: a loop that fails on everything stays finite.
                log.error("dead letter %s not announced: %s", letter.event_id, letter.error)
                continue
            event = dead_letter_event(letter, session=self.session, clock=self.clock)
            if not await self.store.publish(event):
                continue  # announced before (by an earlier run of this session)
            announced.append(letter)
            log.error(
                "event %s (%s) quarantined after %d failed attempts: %s",
                letter.event_id,
                letter.kind,
                letter.attempts,
                letter.error,
            )
            if self.alerts is not None:
                self.alerts.notify(_alert(letter))
        return announced


def _alert(letter: DeadLetter) -> Alert:
    from heron.telemetry.alerts import Alert  # only when alerts are on

    return Alert(
        rule="dead_letter",
        severity="critical",
        subject=letter.kind,
        message=f"event {letter.event_id} quarantined: {letter.error}",
        details={"event_id": letter.event_id, "attempts": letter.attempts},
    )
