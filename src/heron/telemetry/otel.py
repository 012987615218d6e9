"""OpenTelemetry traces and metrics, following the GenAI semantic conventions.

Spans (all with `gen_ai.operation.name`):

* `invoke_agent {agent}` — one run: `gen_ai.agent.name`, `gen_ai.conversation.id`,
  `heron.turn.id`, and at the end `heron.run.outcome`, `heron.run.iterations` and the run's
  summed `gen_ai.usage.input_tokens` / `gen_ai.usage.output_tokens`;
* `chat {model}` (kind CLIENT) — one model call: `gen_ai.provider.name`,
  `gen_ai.request.model`, `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`,
  `gen_ai.usage.cache_read.input_tokens`;
* `execute_tool {tool}` — one executed tool call, from the observer records:
  `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.type`, `heron.tool.status`; failed
  calls get status ERROR and `error.type` (`failure` or `timeout`).

Tool input and output are recorded per `tool_io`: `off` (default, nothing), `redacted`
(`gen_ai.tool.call.arguments` / `.result` passed through `heron.safety.redact.scrub_text`) or
`full`,
both cut to `tool_io_max_chars`. The engine already scrubs and bounds observer records, so
`redacted` is a second pass for records that come from elsewhere.

`OtelTracer` is the tool-call `Observer` plus `run()` and `model_call()` context managers;
`OtelMetrics` is a `MetricsSink` (`gen_ai.client.operation.duration`,
`gen_ai.client.token.usage`, `heron.tool.calls`, `heron.tool.duration`). Nothing here imports
OpenTelemetry until one of them is built; without the `telemetry` extra that raises
`TelemetryUnavailable` with the command that fixes it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from heron.errors import HeronError
from heron.models.base import Usage
from heron.safety.redact import scrub_text
from heron.telemetry.metrics import Outcome, tool_outcome
from heron.turn.observer import ToolCallRecord, ToolCallStartRecord

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, TracerProvider

ToolIO = Literal["off", "redacted", "full"]
ExporterName = Literal["none", "console", "otlp-http", "otlp-grpc"]

INSTALL_HINT = "pip install 'heron[telemetry]'"
_IN_EXTRA = ("opentelemetry-api", "opentelemetry-sdk")
_OTLP_MODULES: dict[str, tuple[str, str]] = {
    "otlp-http": (
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "opentelemetry-exporter-otlp-proto-http",
    ),
    "otlp-grpc": (
        "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
        "opentelemetry-exporter-otlp-proto-grpc",
    ),
}


_CURRENT_RUN: ContextVar[RunSpan | None] = ContextVar("heron_otel_run", default=None)


class TelemetryUnavailable(HeronError, RuntimeError):
    """OpenTelemetry was asked for but the needed package is not installed."""


def _import(module: str, package: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        hint = INSTALL_HINT if package in _IN_EXTRA else f"pip install {package}"
        raise TelemetryUnavailable(
            f"OpenTelemetry was requested but {package} is not installed: {hint}"
        ) from exc


@dataclass(frozen=True, kw_only=True, slots=True)
class OtelConfig:
    """What `configure` builds: the span exporter and the tool I/O policy."""

    exporter: ExporterName = "none"
    """`console` prints finished spans as JSON on standard error; `otlp-http` / `otlp-grpc`
    need the matching `opentelemetry-exporter-otlp-proto-*` package."""
    endpoint: str | None = None
    """OTLP endpoint; None uses the exporter's default and `OTEL_EXPORTER_OTLP_*` variables."""
    service_name: str = "heron"
    tool_io: ToolIO = "off"
    tool_io_max_chars: int = 1000


def build_tracer_provider(
    config: OtelConfig, *, exporters: Sequence[SpanExporter] = ()
) -> SdkTracerProvider:
    """An SDK tracer provider with the configured exporter (batched) and any extra
    `exporters` (exported synchronously, e.g. an in-memory exporter in tests)."""
    sdk_trace = _import("opentelemetry.sdk.trace", "opentelemetry-sdk")
    export = _import("opentelemetry.sdk.trace.export", "opentelemetry-sdk")
    resources = _import("opentelemetry.sdk.resources", "opentelemetry-sdk")
    provider = sdk_trace.TracerProvider(
        resource=resources.Resource.create({"service.name": config.service_name})
    )
    if config.exporter == "console":
        # Standard error: standard output may carry heron's machine-readable event stream.
        console = export.ConsoleSpanExporter(out=sys.stderr)
        provider.add_span_processor(export.SimpleSpanProcessor(console))
    elif config.exporter in _OTLP_MODULES:
        module_name, package = _OTLP_MODULES[config.exporter]
        module = _import(module_name, package)
        kwargs = {"endpoint": config.endpoint} if config.endpoint else {}
        provider.add_span_processor(export.BatchSpanProcessor(module.OTLPSpanExporter(**kwargs)))
    for exporter in exporters:
        provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    return provider  # type: ignore[no-any-return]


def configure(config: OtelConfig, *, exporters: Sequence[SpanExporter] = ()) -> OtelTracer:
    """An `OtelTracer` on a new provider built from `config`."""
    return OtelTracer(
        tracer_provider=build_tracer_provider(config, exporters=exporters),
        tool_io=config.tool_io,
        tool_io_max_chars=config.tool_io_max_chars,
    )


def split_model(model: str) -> tuple[str | None, str]:
    """`openai:gpt-4o` → (`openai`, `gpt-4o`); a fallback chain is named by its first model."""
    first = model.split("|", 1)[0].strip()
    provider, sep, name = first.partition(":")
    return (provider, name) if sep else (None, first)


class RunSpan:
    """The live `invoke_agent` span of one run."""

    def __init__(self, span: Span) -> None:
        self.span = span
        self.input_tokens = 0
        self.output_tokens = 0

    def finish(self, *, status: str, reason: str, iterations: int) -> None:
        """Record how the run ended (`TurnOutcome.status`, `.reason`, `.iterations`)."""
        from opentelemetry.trace import Status, StatusCode

        self.span.set_attribute("heron.run.outcome", reason)
        self.span.set_attribute("heron.run.iterations", iterations)
        if status == "error":
            self.span.set_status(Status(StatusCode.ERROR, reason))
            self.span.set_attribute("error.type", reason)


class ModelCallSpan:
    """The live `chat` span of one model call."""

    def __init__(self, span: Span, run: RunSpan | None) -> None:
        self.span = span
        self._run = run

    def record_usage(self, usage: Usage | None) -> None:
        if usage is None:
            return
        self.span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
        self.span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
        if usage.cached_tokens:
            self.span.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cached_tokens)
        if self._run is not None:
            self._run.input_tokens += usage.input_tokens
            self._run.output_tokens += usage.output_tokens


class OtelTracer:
    """GenAI spans for runs, model calls and tool calls; also the tool-call `Observer`."""

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        tool_io: ToolIO = "off",
        tool_io_max_chars: int = 1000,
    ) -> None:
        trace = _import("opentelemetry.trace", "opentelemetry-api")
        provider = tracer_provider or trace.get_tracer_provider()
        self._tracer = provider.get_tracer("heron")
        self.tool_io = tool_io
        self.tool_io_max_chars = tool_io_max_chars
        self._tool_spans: dict[str, Span] = {}

    @contextmanager
    def run(
        self, *, agent: str, turn_id: str = "", conversation_id: str | None = None
    ) -> Iterator[RunSpan]:
        """Span a run; model and tool calls inside the block become its children."""
        attributes: dict[str, str] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent,
        }
        if turn_id:
            attributes["heron.turn.id"] = turn_id
        if conversation_id:
            attributes["gen_ai.conversation.id"] = conversation_id
        with self._tracer.start_as_current_span(
            f"invoke_agent {agent}", attributes=attributes
        ) as span:
            run = RunSpan(span)
            token = _CURRENT_RUN.set(run)
            try:
                yield run
            finally:
                _CURRENT_RUN.reset(token)
                span.set_attribute("gen_ai.usage.input_tokens", run.input_tokens)
                span.set_attribute("gen_ai.usage.output_tokens", run.output_tokens)

    @contextmanager
    def model_call(self, model: str, *, iteration: int = 0) -> Iterator[ModelCallSpan]:
        """Span one model call (a heron model string such as `anthropic:claude-…`)."""
        from opentelemetry.trace import SpanKind

        provider, name = split_model(model)
        attributes: dict[str, str | int] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": name,
        }
        if provider:
            attributes["gen_ai.provider.name"] = provider
        if iteration:
            attributes["heron.iteration"] = iteration
        with self._tracer.start_as_current_span(
            f"chat {name}", kind=SpanKind.CLIENT, attributes=attributes
        ) as span:
            yield ModelCallSpan(span, _CURRENT_RUN.get())

    # -- Observer -----------------------------------------------------------------------------

    def _io(self, text: str) -> str | None:
        if self.tool_io == "off":
            return None
        if self.tool_io == "redacted":
            text = scrub_text(text)
        return text[: self.tool_io_max_chars]

    def tool_call_start(self, record: ToolCallStartRecord) -> None:
        from opentelemetry import trace

        attributes: dict[str, str] = {**record.otel_attributes(), "gen_ai.tool.type": "function"}
        arguments = self._io(record.arguments)
        if arguments is not None:
            attributes["gen_ai.tool.call.arguments"] = arguments
        # A nested call (`<outer id>.<n>`, made by a tool) belongs under the outer call's span.
        outer = self._tool_spans.get(record.call_id.rpartition(".")[0])
        context = trace.set_span_in_context(outer) if outer is not None else None
        self._tool_spans[record.call_id] = self._tracer.start_span(
            f"execute_tool {record.tool}", context=context, attributes=attributes
        )

    def tool_call_end(self, record: ToolCallRecord) -> None:
        from opentelemetry.trace import Status, StatusCode

        span = self._tool_spans.pop(record.call_id, None)
        if span is None:
            return
        outcome = tool_outcome(record)
        span.set_attribute("heron.tool.status", record.status)
        span.set_attribute("heron.tool.duration_ms", record.duration_ms)
        result = self._io(record.result)
        if result is not None:
            span.set_attribute("gen_ai.tool.call.result", result)
        if outcome in ("failure", "timeout"):
            span.set_attribute("error.type", outcome)
            span.set_status(Status(StatusCode.ERROR, record.status))
        span.end()


class OtelMetrics:
    """A `MetricsSink` recording into OpenTelemetry instruments (GenAI client metrics for
    models, `heron.tool.*` for tools)."""

    def __init__(self, *, meter_provider: MeterProvider | None = None) -> None:
        metrics = _import("opentelemetry.metrics", "opentelemetry-api")
        provider = meter_provider or metrics.get_meter_provider()
        meter = provider.get_meter("heron")
        self._model_duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="Model call duration."
        )
        self._tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Tokens per model call."
        )
        self._tool_calls = meter.create_counter(
            "heron.tool.calls", unit="{call}", description="Executed tool calls."
        )
        self._tool_duration = meter.create_histogram(
            "heron.tool.duration", unit="s", description="Tool call duration."
        )

    def record_tool(self, tool: str, *, outcome: Outcome, duration_s: float) -> None:
        attributes = {"gen_ai.tool.name": tool, "heron.outcome": outcome}
        self._tool_calls.add(1, attributes)
        self._tool_duration.record(duration_s, attributes)

    def record_model(
        self,
        model: str,
        *,
        outcome: Outcome,
        duration_s: float,
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> None:
        provider, name = split_model(model)
        attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": name}
        if provider:
            attributes["gen_ai.provider.name"] = provider
        timed = dict(attributes)
        if outcome != "success":
            timed["error.type"] = outcome
        self._model_duration.record(duration_s, timed)
        for kind, count in (("input", input_tokens), ("output", output_tokens)):
            if count:
                self._tokens.record(count, {**attributes, "gen_ai.token.type": kind})
