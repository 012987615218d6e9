"""Operator alerts: rules over tool outcomes and budgets, delivered through channels.

`AlertManager` is an `Observer`: every finished tool call goes through its rules; the engine
also reports budget exhaustion with `budget_exhausted(hit)`. Built-in rules:

* `RepeatedFailures(threshold=3)` — a tool failed (or timed out) that many times in a row;
  fires once per streak, a success re-arms it.
* `Timeouts(threshold=1, window_s=300)` — a tool timed out that many times within the window.
* `BudgetExhaustion()` — a run budget ran out.

An alert for the same rule and subject is not repeated within `cooldown_s` (default five
minutes), so a flapping tool does not flood the operator.

Channels: `ConsoleChannel` writes one line to standard error; `WebhookChannel` POSTs the alert
as JSON signed with heron's webhook scheme (`X-Heron-Timestamp`, `X-Heron-Signature:
sha256=<hex>` over `"<timestamp>." + body`, verifiable with `heron.safety.signing.check`).
Messages are credential-scrubbed before they leave.

Delivery never raises into the agent: failures are logged on the `heron.alerts` logger.
Inside an event loop deliveries run as tasks (`await manager.flush()` waits for them);
without one they complete before `notify` returns.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import IO, Any, Literal, Protocol

from heron.safety import signing
from heron.safety.redact import scrub_text
from heron.telemetry.metrics import Outcome, tool_outcome
from heron.turn.budgets import BudgetExhausted
from heron.turn.observer import ToolCallRecord, ToolCallStartRecord

Severity = Literal["warning", "critical"]

_log = logging.getLogger("heron.alerts")


@dataclass(frozen=True, kw_only=True, slots=True)
class Alert:
    rule: str
    severity: Severity
    subject: str
    """What the alert is about: a tool name, or a run label."""
    message: str
    at: float = field(default_factory=time.time)
    """Unix time."""
    details: dict[str, Any] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        """The JSON body a webhook receives (message scrubbed of credentials)."""
        body = asdict(self)
        body["message"] = scrub_text(self.message)
        return {"type": "heron.alert", **body}


class AlertChannel(Protocol):
    async def deliver(self, alert: Alert) -> None:
        """Send one alert; raise on failure (the manager logs it)."""
        ...


class ConsoleChannel:
    """One line per alert on a text stream (standard error unless given)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream

    async def deliver(self, alert: Alert) -> None:
        stream = self._stream or sys.stderr
        stream.write(
            f"heron alert [{alert.severity}] {alert.rule} {alert.subject}: "
            f"{scrub_text(alert.message)}\n"
        )
        stream.flush()


class WebhookChannel:
    """HTTP POST of `Alert.payload()`, HMAC-signed when a secret is configured.

    The secret comes from `secret`, or from the environment variable `secret_env` read at
    sending time (so it never sits in a config file). A `secret_env` that is unset fails the
    delivery: nothing unsigned is sent to a receiver that expects signatures.
    """

    def __init__(
        self,
        url: str,
        *,
        secret: bytes | None = None,
        secret_env: str | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        self.url = url
        self._secret = secret
        self._secret_env = secret_env
        self._timeout_s = timeout_s

    def _secret_bytes(self) -> bytes | None:
        if self._secret is not None:
            return self._secret
        if self._secret_env is None:
            return None
        value = os.environ.get(self._secret_env, "")
        if not value:
            raise RuntimeError(f"${self._secret_env} is not set; the alert was not sent")
        return value.encode()

    async def deliver(self, alert: Alert) -> None:
        body = json.dumps(alert.payload(), ensure_ascii=False).encode()
        headers = {"Content-Type": "application/json"}
        secret = self._secret_bytes()
        if secret is not None:
            headers.update(signing.signed_headers(secret, body, time.time()))
        import httpx  # at the first alert posted: an agent's build does not pay for it

        async with httpx.AsyncClient(timeout=self._timeout_s) as client:
            response = await client.post(self.url, content=body, headers=headers)
        response.raise_for_status()


# -- rules ------------------------------------------------------------------------------------


class AlertRule(Protocol):
    def on_tool(self, record: ToolCallRecord, outcome: Outcome) -> Alert | None: ...

    def on_budget(self, hit: BudgetExhausted) -> Alert | None: ...


class RepeatedFailures:
    """`threshold` failures (timeouts included) of one tool in a row."""

    def __init__(self, threshold: int = 3) -> None:
        if threshold < 1:
            raise ValueError("threshold must be at least 1")
        self.threshold = threshold
        self._streaks: dict[str, int] = {}

    def on_tool(self, record: ToolCallRecord, outcome: Outcome) -> Alert | None:
        if outcome == "success":
            self._streaks.pop(record.tool, None)
            return None
        if outcome == "interrupted":
            return None  # the user stopped it; says nothing about the tool
        streak = self._streaks.get(record.tool, 0) + 1
        self._streaks[record.tool] = streak
        if streak != self.threshold:
            return None
        return Alert(
            rule="repeated_failures",
            severity="critical",
            subject=record.tool,
            message=(
                f"tool '{record.tool}' failed {streak} times in a row; last error: "
                f"{record.result[:300]}"
            ),
            details={"failures": streak, "last_call_id": record.call_id, "turn_id": record.turn_id},
        )

    def on_budget(self, hit: BudgetExhausted) -> Alert | None:
        return None


class Timeouts:
    """`threshold` timeouts of one tool within `window_s` seconds."""

    def __init__(
        self,
        threshold: int = 1,
        *,
        window_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if threshold < 1:
            raise ValueError("threshold must be at least 1")
        self.threshold = threshold
        self.window_s = window_s
        self._clock = clock
        self._seen: dict[str, deque[float]] = {}

    def on_tool(self, record: ToolCallRecord, outcome: Outcome) -> Alert | None:
        if outcome != "timeout":
            return None
        now = self._clock()
        seen = self._seen.setdefault(record.tool, deque())
        seen.append(now)
        while seen and seen[0] < now - self.window_s:
            seen.popleft()
        if len(seen) < self.threshold:
            return None
        count = len(seen)
        seen.clear()
        return Alert(
            rule="tool_timeouts",
            severity="warning",
            subject=record.tool,
            message=(
                f"tool '{record.tool}' timed out {count} time(s) within {self.window_s:g} s "
                f"(last call took {record.duration_ms / 1000:.1f} s)"
            ),
            details={"timeouts": count, "last_call_id": record.call_id, "turn_id": record.turn_id},
        )

    def on_budget(self, hit: BudgetExhausted) -> Alert | None:
        return None


class BudgetExhaustion:
    """A run budget ran out."""

    def on_tool(self, record: ToolCallRecord, outcome: Outcome) -> Alert | None:
        return None

    def on_budget(self, hit: BudgetExhausted) -> Alert | None:
        return Alert(
            rule="budget_exhausted",
            severity="warning",
            subject=hit.run,
            message=f"heron stopped a run: {hit.reason}",
            details={"limit": hit.limit, "maximum": hit.maximum, "used": hit.used},
        )


def default_rules() -> list[AlertRule]:
    return [RepeatedFailures(), Timeouts(), BudgetExhaustion()]


# -- the manager ------------------------------------------------------------------------------


class AlertManager:
    """Runs the rules and delivers what they raise to every channel; an `Observer`."""

    def __init__(
        self,
        channels: Sequence[AlertChannel],
        rules: Sequence[AlertRule] | None = None,
        *,
        cooldown_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.channels = tuple(channels)
        self.rules = list(default_rules() if rules is None else rules)
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._last_sent: dict[tuple[str, str], float] = {}
        self._pending: set[asyncio.Task[None]] = set()

    def tool_call_start(self, record: ToolCallStartRecord) -> None:
        pass

    def tool_call_end(self, record: ToolCallRecord) -> None:
        outcome = tool_outcome(record)
        for rule in self.rules:
            alert = rule.on_tool(record, outcome)
            if alert is not None:
                self.notify(alert)

    def budget_exhausted(self, hit: BudgetExhausted) -> None:
        for rule in self.rules:
            alert = rule.on_budget(hit)
            if alert is not None:
                self.notify(alert)

    def notify(self, alert: Alert) -> bool:
        """Deliver `alert` unless the same rule and subject alerted within the cooldown.
        Returns whether it was sent."""
        key = (alert.rule, alert.subject)
        now = self._clock()
        last = self._last_sent.get(key)
        if last is not None and now - last < self.cooldown_s:
            return False
        self._last_sent[key] = now
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(self._deliver_all(alert))
            return True
        task = loop.create_task(self._deliver_all(alert))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return True

    async def flush(self) -> None:
        """Wait for deliveries still in flight."""
        while self._pending:
            await asyncio.gather(*self._pending)

    async def _deliver_all(self, alert: Alert) -> None:
        await asyncio.gather(*(self._deliver(channel, alert) for channel in self.channels))

    async def _deliver(self, channel: AlertChannel, alert: Alert) -> None:
        try:
            await channel.deliver(alert)
        except Exception as exc:
            _log.warning(
                "alert %s about %s not delivered by %s: %s",
                alert.rule,
                alert.subject,
                type(channel).__name__,
                scrub_text(str(exc)),
            )
