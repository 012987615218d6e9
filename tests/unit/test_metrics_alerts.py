"""Metrics (rates, success rates, latency, timeouts; Prometheus rendering) and operator alerts
(repeated failures, timeouts, budgets) delivered on the console and to a signed webhook."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from heron import Agent, RuntimeKnobs, ScriptedModel, tool
from heron._support.clock import FakeClock
from heron.safety import signing
from heron.telemetry.alerts import (
    Alert,
    AlertManager,
    BudgetExhaustion,
    ConsoleChannel,
    RepeatedFailures,
    Timeouts,
    WebhookChannel,
)
from heron.telemetry.metrics import Histogram, MetricsObserver, MetricsRegistry, tool_outcome
from heron.turn.budgets import BudgetLimits, RunBudget
from heron.turn.observer import FanOutObserver, ToolCallRecord, ToolCallStartRecord
from support.engine import call, calls_turn


def record(
    tool: str = "fetch",
    *,
    success: bool = True,
    status: str | None = None,
    result: str = "ok",
    duration_ms: float = 10.0,
    call_id: str = "c1",
) -> ToolCallRecord:
    start = ToolCallStartRecord(
        tool=tool, call_id=call_id, arguments="{}", turn_id="t1", owner="builtin"
    )
    return ToolCallRecord.ending(
        start,
        duration_ms=duration_ms,
        success=success,
        status=status or ("ok" if success else "error"),
        result=result,
    )


def timeout_record(tool: str = "fetch") -> ToolCallRecord:
    return record(
        tool,
        success=False,
        result=f"Error: '{tool}' timed out after 5 s and was stopped.",
        duration_ms=5000,
    )


@dataclass
class Recorder:
    alerts: list[Alert] = field(default_factory=list)

    async def deliver(self, alert: Alert) -> None:
        self.alerts.append(alert)


# -- metrics ----------------------------------------------------------------------------------


def test_tool_stats_give_call_rate_success_rate_latency_and_timeouts() -> None:
    clock = FakeClock(0.0)
    registry = MetricsRegistry(clock=clock.time, rate_window_s=60)
    for seconds in (0.02, 0.04, 0.3):
        registry.record_tool("fetch", outcome="success", duration_s=seconds)
    registry.record_tool("fetch", outcome="failure", duration_s=0.01)
    registry.record_tool("fetch", outcome="timeout", duration_s=5.0)
    registry.record_tool("fetch", outcome="interrupted", duration_s=0.5)
    stats = registry.tool_stats("fetch")
    assert stats is not None
    assert (stats.calls, stats.successes, stats.failures, stats.timeouts) == (6, 3, 1, 1)
    assert stats.success_rate == pytest.approx(3 / 5)  # interrupted calls are not judged
    assert stats.per_minute == pytest.approx(6)
    assert stats.mean_latency_s == pytest.approx((0.02 + 0.04 + 0.3 + 0.01 + 5.0 + 0.5) / 6)
    assert stats.p95_latency_s == 5.0
    clock.advance(61)
    later = registry.tool_stats("fetch")
    assert later is not None and later.per_minute == 0 and later.calls == 6
    assert registry.tool_stats("never") is None


def test_histogram_buckets_are_inclusive_upper_bounds() -> None:
    histogram = Histogram((0.1, 1.0))
    for value in (0.1, 0.5, 1.0, 2.0):
        histogram.observe(value)
    assert list(histogram.cumulative()) == [(0.1, 1), (1.0, 3), (float("inf"), 4)]
    assert histogram.quantile(0.5) == 1.0


def test_prometheus_rendering_exposes_counters_histograms_and_tokens() -> None:
    registry = MetricsRegistry(buckets=(0.1, 1.0))
    registry.record_tool("fetch", outcome="success", duration_s=0.05)
    registry.record_tool("fetch", outcome="timeout", duration_s=3.0)
    registry.record_model(
        "openai:gpt-4o", outcome="success", duration_s=0.8, input_tokens=120, output_tokens=30
    )
    text = registry.render_prometheus()
    lines = text.splitlines()
    assert "# TYPE heron_tool_calls_total counter" in lines
    assert 'heron_tool_calls_total{tool="fetch",outcome="success"} 1' in lines
    assert 'heron_tool_calls_total{tool="fetch",outcome="timeout"} 1' in lines
    assert "# TYPE heron_tool_call_duration_seconds histogram" in lines
    assert 'heron_tool_call_duration_seconds_bucket{tool="fetch",le="0.1"} 1' in lines
    assert 'heron_tool_call_duration_seconds_bucket{tool="fetch",le="1.0"} 1' in lines
    assert 'heron_tool_call_duration_seconds_bucket{tool="fetch",le="+Inf"} 2' in lines
    assert 'heron_tool_call_duration_seconds_count{tool="fetch"} 2' in lines
    assert 'heron_model_calls_total{model="openai:gpt-4o",outcome="success"} 1' in lines
    assert 'heron_model_tokens_total{model="openai:gpt-4o",type="input"} 120' in lines
    assert 'heron_model_tokens_total{model="openai:gpt-4o",type="output"} 30' in lines
    assert text.endswith("\n")


def test_prometheus_label_values_are_escaped() -> None:
    registry = MetricsRegistry()
    registry.record_tool('odd"name\\x\ny', outcome="success", duration_s=0.1)
    assert 'tool="odd\\"name\\\\x\\ny"' in registry.render_prometheus()


def test_timeouts_are_told_apart_from_other_failures() -> None:
    assert tool_outcome(record()) == "success"
    assert tool_outcome(record(success=False, result="Error: boom")) == "failure"
    assert tool_outcome(timeout_record()) == "timeout"
    assert tool_outcome(record(success=False, status="timeout", result="slow")) == "timeout"
    assert tool_outcome(record(success=False, status="interrupted")) == "interrupted"


class _Mirror:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def record_tool(self, tool: str, *, outcome: str, duration_s: float) -> None:
        self.calls.append(("tool", tool))

    def record_model(self, model: str, **_: object) -> None:
        self.calls.append(("model", model))


def test_the_registry_mirrors_every_record_to_another_sink() -> None:
    mirror = _Mirror()
    registry = MetricsRegistry(mirror=mirror)
    registry.record_tool("fetch", outcome="success", duration_s=0.1)
    registry.record_model("m", outcome="failure", duration_s=0.1)
    assert mirror.calls == [("tool", "fetch"), ("model", "m")]


@tool()
async def hang(seconds: int) -> str:
    """Waits for something that never comes.

    Args:
        seconds: Ignored.
    """
    await asyncio.Event().wait()
    return "never"


@tool()
def flaky(attempt: int) -> str:
    """Always fails.

    Args:
        attempt: Attempt number.
    """
    raise RuntimeError(f"disk full (attempt {attempt}) api_key=sk-live-abcd1234efgh5678")


@tool(read_only=True)
def ping(host: str) -> str:
    """Ping a host.

    Args:
        host: Host name.
    """
    return f"pong from {host}"


async def test_a_real_run_feeds_tool_metrics_including_engine_timeouts() -> None:
    registry = MetricsRegistry()
    turns = [
        calls_turn(call("ping", "p1", host="a"), call("hang", "h1", seconds=1)),
        {"text": "done"},
    ]
    agent = Agent(
        model=ScriptedModel(turns),
        tools=[ping, hang],
        autonomy="full",
        knobs=RuntimeKnobs(tool_timeout_s=0.05, cancel_grace_s=0.05, parallel="all"),
        observer=MetricsObserver(registry),
    )
    result = await agent.run("go")
    assert result.ok
    ping_stats, hang_stats = registry.tool_stats("ping"), registry.tool_stats("hang")
    assert ping_stats is not None and ping_stats.successes == 1
    assert hang_stats is not None and hang_stats.timeouts == 1 and hang_stats.successes == 0
    assert registry.tool_names() == ["hang", "ping"]


# -- alert rules ------------------------------------------------------------------------------


def test_repeated_failures_fire_once_per_streak_and_rearm_after_a_success() -> None:
    rule = RepeatedFailures(threshold=3)
    failure = record(success=False, result="Error: boom")
    fired = [rule.on_tool(failure, "failure") for _ in range(5)]
    assert [a is not None for a in fired] == [False, False, True, False, False]
    alert = fired[2]
    assert alert is not None
    assert (alert.rule, alert.subject, alert.severity) == ("repeated_failures", "fetch", "critical")
    assert "failed 3 times in a row" in alert.message and "Error: boom" in alert.message
    assert rule.on_tool(record(), "success") is None
    again = [rule.on_tool(failure, "timeout") for _ in range(3)]
    assert again[2] is not None


def test_interruptions_and_other_tools_do_not_extend_a_failure_streak() -> None:
    rule = RepeatedFailures(threshold=2)
    assert rule.on_tool(record(success=False), "failure") is None
    assert rule.on_tool(record(success=False, status="interrupted"), "interrupted") is None
    assert rule.on_tool(record("other", success=False), "failure") is None
    assert rule.on_tool(record(success=False), "failure") is not None


def test_timeouts_alert_when_enough_happen_within_the_window() -> None:
    clock = FakeClock(0.0)
    rule = Timeouts(threshold=2, window_s=60, clock=clock.time)
    assert rule.on_tool(timeout_record(), "timeout") is None
    clock.advance(61)
    assert rule.on_tool(timeout_record(), "timeout") is None  # the first one expired
    clock.advance(10)
    alert = rule.on_tool(timeout_record(), "timeout")
    assert alert is not None and alert.rule == "tool_timeouts"
    assert "timed out 2 time(s) within 60 s" in alert.message
    assert rule.on_tool(record(success=False), "failure") is None


def test_budget_exhaustion_becomes_an_alert_about_the_run() -> None:
    budget = RunBudget(BudgetLimits(model_calls=1), label="nightly")
    budget.record_model_call("m", None)
    hit = budget.check()
    assert hit is not None
    alert = BudgetExhaustion().on_budget(hit)
    assert alert is not None and alert.subject == "nightly"
    assert hit.reason in alert.message
    assert alert.details == {"limit": "model_calls", "maximum": 1, "used": 1}


# -- the manager and its channels -------------------------------------------------------------


async def test_the_manager_observes_a_real_run_and_alerts_on_repeated_failures() -> None:
    recorder = Recorder()
    alerts = AlertManager([recorder], [RepeatedFailures(threshold=3)])
    registry = MetricsRegistry()
    turns = [calls_turn(call("flaky", f"f{i}", attempt=i)) for i in range(3)] + [
        {"text": "gave up"}
    ]
    agent = Agent(
        model=ScriptedModel(turns),
        tools=[flaky],
        autonomy="full",
        observer=FanOutObserver(MetricsObserver(registry), alerts),
    )
    await agent.run("try it")
    await alerts.flush()
    assert [a.rule for a in recorder.alerts] == ["repeated_failures"]
    assert "disk full (attempt 2)" in recorder.alerts[0].message
    assert "sk-live-abcd1234efgh5678" not in recorder.alerts[0].message
    stats = registry.tool_stats("flaky")
    assert stats is not None and stats.failures == 3 and stats.success_rate == 0


async def test_the_same_alert_is_held_back_during_the_cooldown() -> None:
    clock = FakeClock(0.0)
    recorder = Recorder()
    manager = AlertManager([recorder], [], cooldown_s=300, clock=clock.time)
    first = Alert(rule="r", severity="warning", subject="a", message="one")
    assert manager.notify(first)
    assert not manager.notify(Alert(rule="r", severity="warning", subject="a", message="two"))
    assert manager.notify(Alert(rule="r", severity="warning", subject="b", message="three"))
    clock.advance(301)
    assert manager.notify(Alert(rule="r", severity="warning", subject="a", message="four"))
    await manager.flush()
    assert [a.message for a in recorder.alerts] == ["one", "three", "four"]


def test_without_an_event_loop_alerts_are_delivered_before_notify_returns() -> None:
    stream = io.StringIO()
    manager = AlertManager([ConsoleChannel(stream)], [BudgetExhaustion()])
    budget = RunBudget(BudgetLimits(tool_calls=0), label="main")
    hit = budget.check()
    assert hit is not None
    manager.budget_exhausted(hit)
    line = stream.getvalue()
    assert line.startswith("heron alert [warning] budget_exhausted main: heron stopped a run:")
    assert line.endswith("\n") and line.count("\n") == 1


async def test_the_console_channel_masks_credentials() -> None:
    stream = io.StringIO()
    alert = Alert(rule="r", severity="critical", subject="s", message="token=abcdefgh12345678")
    await ConsoleChannel(stream).deliver(alert)
    assert "abcdefgh12345678" not in stream.getvalue()
    assert "[REDACTED]" in stream.getvalue()


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


class WebhookServer:
    def __init__(self, status: int = 204) -> None:
        self.status = status
        self.received: list[Received] = []
        self.arrived = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                outer.received.append(Received(headers=headers, body=body))
                # Recorded before the response goes out, so a client that has its answer can
                # rely on the record being there.
                outer.arrived.set()
                self.send_response(outer.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    def __enter__(self) -> WebhookServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def server() -> Iterator[WebhookServer]:
    with WebhookServer() as running:
        yield running


async def test_the_webhook_receives_a_signed_json_alert(server: WebhookServer) -> None:
    secret = b"shared-secret"
    manager = AlertManager([WebhookChannel(server.url, secret=secret)], [RepeatedFailures(1)])
    manager.tool_call_end(record("deploy", success=False, result="Error: password=hunter2hunter2"))
    await manager.flush()
    assert server.arrived.is_set()
    received = server.received[0]
    now = time.time()
    assert signing.check(secret, received.body, received.headers, now=now) is None
    wrong = signing.check(b"wrong-secret", received.body, received.headers, now=now)
    assert wrong == "signature mismatch"
    payload = json.loads(received.body)
    assert payload["type"] == "heron.alert"
    assert (payload["rule"], payload["subject"]) == ("repeated_failures", "deploy")
    assert "hunter2hunter2" not in payload["message"]
    assert received.headers["content-type"] == "application/json"


async def test_a_webhook_secret_from_an_unset_variable_sends_nothing(
    server: WebhookServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("HERON_TEST_ALERT_SECRET", raising=False)
    channel = WebhookChannel(server.url, secret_env="HERON_TEST_ALERT_SECRET")
    manager = AlertManager([channel], [])
    with caplog.at_level(logging.WARNING, logger="heron.alerts"):
        manager.notify(Alert(rule="r", severity="warning", subject="s", message="m"))
        await manager.flush()
    assert server.received == []
    assert "HERON_TEST_ALERT_SECRET is not set" in caplog.text


async def test_a_webhook_secret_is_read_from_the_environment_at_sending_time(
    server: WebhookServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    channel = WebhookChannel(server.url, secret_env="HERON_TEST_ALERT_SECRET")
    monkeypatch.setenv("HERON_TEST_ALERT_SECRET", "from-env")
    await channel.deliver(Alert(rule="r", severity="warning", subject="s", message="m"))
    received = server.received[0]
    assert signing.check(b"from-env", received.body, received.headers, now=time.time()) is None


async def test_a_failing_webhook_is_logged_and_never_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorder = Recorder()
    with WebhookServer(status=500) as failing:
        manager = AlertManager([WebhookChannel(failing.url), recorder], [])
        with caplog.at_level(logging.WARNING, logger="heron.alerts"):
            manager.notify(Alert(rule="r", severity="critical", subject="s", message="m"))
            await manager.flush()
        assert len(failing.received) == 1
    assert "not delivered by WebhookChannel" in caplog.text and "500" in caplog.text
    assert len(recorder.alerts) == 1  # other channels still got it


def test_a_broken_observer_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def tool_call_start(self, record: ToolCallStartRecord) -> None:
            raise RuntimeError("exporter down")

        def tool_call_end(self, record: ToolCallRecord) -> None:
            raise RuntimeError("exporter down")

    registry = MetricsRegistry()
    fan = FanOutObserver(Broken(), MetricsObserver(registry))
    with caplog.at_level(logging.ERROR, logger="heron.telemetry"):
        fan.tool_call_end(record())
    stats = registry.tool_stats("fetch")
    assert stats is not None and stats.successes == 1
    assert "exporter down" in caplog.text
