"""Call metrics per tool and per model: rate, success rate, latency histogram, timeouts.

`MetricsRegistry` keeps them in process (no dependency) and renders the Prometheus text
exposition format (`render_prometheus()`, for a `/metrics` endpoint). Give it
`mirror=heron.telemetry.otel.OtelMetrics(...)` to record the same numbers as OpenTelemetry
instruments. `MetricsObserver` feeds tool calls from the engine's observer records; model calls
are recorded by the engine with `record_model`.

Exposed series (`outcome` is `success`, `failure`, `timeout` or `interrupted`):

* `heron_tool_calls_total{tool, outcome}`, `heron_tool_call_duration_seconds{tool}` (histogram)
* `heron_model_calls_total{model, outcome}`, `heron_model_call_duration_seconds{model}`,
  `heron_model_tokens_total{model, type}` (`type` is `input` or `output`)

Rates and success rates are what PromQL computes from the counters; in process,
`CallStats.per_minute` and `CallStats.success_rate` give them directly.
"""

from __future__ import annotations

import bisect
import math
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from heron.turn.observer import ToolCallRecord, ToolCallStartRecord

Outcome = Literal["success", "failure", "timeout", "interrupted"]
OUTCOMES: tuple[Outcome, ...] = ("success", "failure", "timeout", "interrupted")

DEFAULT_BUCKETS_S: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip


def tool_outcome(record: ToolCallRecord) -> Outcome:
    """Classify a terminal observer record.

    A timeout is `status == "timeout"`, or the engine's timeout error text (the engine reports
    timeouts as `error` results whose output starts "Error: '<tool>' timed out after").
    """
    if record.success:
        return "success"
    if record.status == "interrupted":
        return "interrupted"
    if record.status == "timeout" or record.result.startswith(
        f"Error: '{record.tool}' timed out after"
    ):
        return "timeout"
    return "failure"


class MetricsSink(Protocol):
    """Anything that records call metrics (the registry, the OpenTelemetry bridge)."""

    def record_tool(self, tool: str, *, outcome: Outcome, duration_s: float) -> None: ...

    def record_model(
        self,
        model: str,
        *,
        outcome: Outcome,
        duration_s: float,
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> None: ...


class Histogram:
    """Cumulative-bucket latency histogram in seconds."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: Sequence[float] = DEFAULT_BUCKETS_S) -> None:
        self.bounds = tuple(sorted(bounds))
        self.counts = [0] * (len(self.bounds) + 1)  # the last slot is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> Iterator[tuple[float, int]]:
        """(upper bound, observations at or below it), ending with (inf, count)."""
        running = 0
        for bound, n in zip((*self.bounds, math.inf), self.counts, strict=True):
            running += n
            yield bound, running

    def quantile(self, q: float) -> float | None:
        """Upper bound of the bucket holding quantile `q` (None when empty)."""
        if not self.count:
            return None
        target = q * self.count
        for bound, running in self.cumulative():
            if running >= target:
                return bound
        return math.inf


@dataclass(frozen=True, kw_only=True, slots=True)
class CallStats:
    """A snapshot for one tool or model."""

    calls: int
    successes: int
    failures: int
    timeouts: int
    interrupted: int
    per_minute: float
    """Calls per minute over the registry's rate window."""
    mean_latency_s: float | None
    p95_latency_s: float | None
    """Upper bound of the histogram bucket holding the 95th percentile."""

    @property
    def success_rate(self) -> float | None:
        """Successes over finished calls (interrupted ones excluded); None before any."""
        finished = self.calls - self.interrupted
        return self.successes / finished if finished else None


class _Series:
    __slots__ = ("input_tokens", "latency", "outcomes", "output_tokens", "recent")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.outcomes: dict[Outcome, int] = dict.fromkeys(OUTCOMES, 0)
        self.latency = Histogram(bounds)
        self.recent: deque[float] = deque()
        self.input_tokens = 0
        self.output_tokens = 0


class MetricsRegistry:
    """In-process metrics for tools and models. Single-threaded use (the event loop)."""

    def __init__(
        self,
        *,
        buckets: Sequence[float] = DEFAULT_BUCKETS_S,
        rate_window_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        mirror: MetricsSink | None = None,
    ) -> None:
        self._buckets = tuple(buckets)
        self._window = rate_window_s
        self._clock = clock
        self._mirror = mirror
        self._tools: dict[str, _Series] = {}
        self._models: dict[str, _Series] = {}

    def record_tool(self, tool: str, *, outcome: Outcome, duration_s: float) -> None:
        self._record(self._tools, tool, outcome, duration_s)
        if self._mirror is not None:
            self._mirror.record_tool(tool, outcome=outcome, duration_s=duration_s)

    def record_model(
        self,
        model: str,
        *,
        outcome: Outcome,
        duration_s: float,
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> None:
        series = self._record(self._models, model, outcome, duration_s)
        series.input_tokens += input_tokens
        series.output_tokens += output_tokens
        if self._mirror is not None:
            self._mirror.record_model(
                model,
                outcome=outcome,
                duration_s=duration_s,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
            )

    def _record(
        self, table: dict[str, _Series], name: str, outcome: Outcome, duration_s: float
    ) -> _Series:
        series = table.get(name)
        if series is None:
            series = table[name] = _Series(self._buckets)
        series.outcomes[outcome] += 1
        series.latency.observe(duration_s)
        series.recent.append(self._clock())
        self._expire(series)
        return series

    def _expire(self, series: _Series) -> None:
        horizon = self._clock() - self._window
        while series.recent and series.recent[0] < horizon:
            series.recent.popleft()

    def tool_names(self) -> list[str]:
        return sorted(self._tools)

    def model_names(self) -> list[str]:
        return sorted(self._models)

    def tool_stats(self, tool: str) -> CallStats | None:
        return self._stats(self._tools.get(tool))

    def model_stats(self, model: str) -> CallStats | None:
        return self._stats(self._models.get(model))

    def _stats(self, series: _Series | None) -> CallStats | None:
        if series is None:
            return None
        self._expire(series)
        o = series.outcomes
        h = series.latency
        return CallStats(
            calls=h.count,
            successes=o["success"],
            failures=o["failure"],
            timeouts=o["timeout"],
            interrupted=o["interrupted"],
            per_minute=len(series.recent) * 60.0 / self._window,
            mean_latency_s=h.sum / h.count if h.count else None,
            p95_latency_s=h.quantile(0.95),
        )

    # -- Prometheus text exposition ---------------------------------------------------------

    def render_prometheus(self) -> str:
        """All series in the Prometheus text exposition format (version 0.0.4)."""
        out: list[str] = []
        for kind, table in (("tool", self._tools), ("model", self._models)):
            names = sorted(table)
            out += [
                f"# HELP heron_{kind}_calls_total {kind.title()} calls, by outcome.",
                f"# TYPE heron_{kind}_calls_total counter",
            ]
            for name in names:
                for outcome, n in table[name].outcomes.items():
                    labels = _labels({kind: name, "outcome": outcome})
                    out.append(f"heron_{kind}_calls_total{labels} {n}")
            metric = f"heron_{kind}_call_duration_seconds"
            out += [
                f"# HELP {metric} {kind.title()} call latency in seconds.",
                f"# TYPE {metric} histogram",
            ]
            for name in names:
                h = table[name].latency
                for bound, running in h.cumulative():
                    labels = _labels({kind: name, "le": _number(bound)})
                    out.append(f"{metric}_bucket{labels} {running}")
                out.append(f"{metric}_sum{_labels({kind: name})} {_number(h.sum)}")
                out.append(f"{metric}_count{_labels({kind: name})} {h.count}")
        out += [
            "# HELP heron_model_tokens_total Tokens reported by the provider.",
            "# TYPE heron_model_tokens_total counter",
        ]
        for name in sorted(self._models):
            series = self._models[name]
            for kind, n in (("input", series.input_tokens), ("output", series.output_tokens)):
                out.append(f"heron_model_tokens_total{_labels({'model': name, 'type': kind})} {n}")
        return "\n".join(out) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf"
    return repr(float(value))


class MetricsObserver:
    """An `Observer` that records every executed tool call into a metrics sink."""

    def __init__(self, sink: MetricsSink) -> None:
        self.sink = sink

    def tool_call_start(self, record: ToolCallStartRecord) -> None:
        pass

    def tool_call_end(self, record: ToolCallRecord) -> None:
        self.sink.record_tool(
            record.tool, outcome=tool_outcome(record), duration_s=record.duration_ms / 1000
        )
