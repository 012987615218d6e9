"""OpenTelemetry: GenAI-convention spans for runs, model calls and tool calls (checked with
the SDK's in-memory exporter), the tool I/O policy, metrics instruments, and a clear error
instead of a crash when the optional dependency is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from heron import Agent, ScriptedModel, tool
from heron.models.base import Usage
from heron.telemetry.otel import (
    OtelConfig,
    OtelMetrics,
    OtelTracer,
    TelemetryUnavailable,
    ToolIO,
    build_tracer_provider,
    configure,
)
from heron.turn.observer import ToolCallRecord, ToolCallStartRecord
from support.engine import call, calls_turn

SRC = Path(__file__).resolve().parents[2] / "src"


def tracer(tool_io: ToolIO = "off") -> tuple[OtelTracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    return configure(OtelConfig(tool_io=tool_io), exporters=[exporter]), exporter


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in exporter.get_finished_spans()}


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


@tool(read_only=True)
def lookup(city: str) -> str:
    """Look up the weather.

    Args:
        city: City name.
    """
    return f"sunny in {city}"


@tool()
def explode() -> str:
    """Always fails."""
    raise RuntimeError("boom")


async def test_a_run_with_model_and_tool_calls_produces_nested_genai_spans() -> None:
    otel, exporter = tracer()
    model = ScriptedModel(
        [calls_turn(call("lookup", "c1", city="Oslo"), call("explode", "c2")), {"text": "ok"}]
    )
    agent = Agent(model=model, tools=[lookup, explode], autonomy="full", observer=otel)
    with otel.run(agent="weather", turn_id="t-1", conversation_id="s-9") as run:
        with otel.model_call("openai:gpt-4o", iteration=1) as first:
            first.record_usage(Usage(input_tokens=120, output_tokens=30, cached_tokens=100))
        result = await agent.run("weather?")
        with otel.model_call("openai:gpt-4o", iteration=2) as second:
            second.record_usage(Usage(input_tokens=200, output_tokens=10))
        run.finish(status="final", reason="answer", iterations=2)
    assert result.ok
    spans = exporter.get_finished_spans()
    names = sorted(s.name for s in spans)
    assert names == [
        "chat gpt-4o",
        "chat gpt-4o",
        "execute_tool explode",
        "execute_tool lookup",
        "invoke_agent weather",
    ]
    named = by_name(exporter)
    root = named["invoke_agent weather"]
    assert root.parent is None
    assert attrs(root) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "weather",
        "heron.turn.id": "t-1",
        "gen_ai.conversation.id": "s-9",
        "heron.run.outcome": "answer",
        "heron.run.iterations": 2,
        "gen_ai.usage.input_tokens": 320,
        "gen_ai.usage.output_tokens": 40,
    }
    assert root.context is not None
    for span in spans:
        if span is not root:
            assert span.parent is not None and span.parent.span_id == root.context.span_id

    chat = next(s for s in spans if s.name == "chat gpt-4o")
    assert chat.kind == SpanKind.CLIENT
    assert attrs(chat) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.provider.name": "openai",
        "heron.iteration": 1,
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 30,
        "gen_ai.usage.cache_read.input_tokens": 100,
    }

    ok = attrs(named["execute_tool lookup"])
    assert ok["gen_ai.operation.name"] == "execute_tool"
    assert ok["gen_ai.tool.name"] == "lookup"
    assert ok["gen_ai.tool.call.id"] == "c1"
    assert ok["gen_ai.tool.type"] == "function"
    assert ok["heron.tool.status"] == "ok"
    assert "gen_ai.tool.call.arguments" not in ok and "gen_ai.tool.call.result" not in ok
    assert named["execute_tool lookup"].status.status_code == StatusCode.UNSET

    failed = named["execute_tool explode"]
    assert failed.status.status_code == StatusCode.ERROR
    assert attrs(failed)["error.type"] == "failure"


def start(arguments: str, call_id: str = "c1", tool: str = "http") -> ToolCallStartRecord:
    return ToolCallStartRecord(
        tool=tool, call_id=call_id, arguments=arguments, turn_id="t", owner="builtin"
    )


def finish(start_record: ToolCallStartRecord, result: str, **kw: Any) -> ToolCallRecord:
    fields: dict[str, Any] = {"duration_ms": 5.0, "success": True, "status": "ok"} | kw
    return ToolCallRecord.ending(start_record, result=result, **fields)


SECRET_ARGS = json.dumps({"url": "https://x.test", "api_key": "sk-live-abcd1234efgh5678"})
SECRET_RESULT = "token=QWxh+GRpbjpvcGVu/IHNlc2FtZQ== and " + "x" * 2000


@pytest.mark.parametrize("mode", ["off", "redacted", "full"])
def test_tool_input_and_output_are_recorded_only_as_configured(mode: ToolIO) -> None:
    otel, exporter = tracer(mode)
    record = start(SECRET_ARGS)
    otel.tool_call_start(record)
    otel.tool_call_end(finish(record, SECRET_RESULT))
    span_attrs = attrs(exporter.get_finished_spans()[0])
    arguments = span_attrs.get("gen_ai.tool.call.arguments")
    result = span_attrs.get("gen_ai.tool.call.result")
    if mode == "off":
        assert arguments is None and result is None
        return
    assert isinstance(arguments, str) and isinstance(result, str)
    assert len(result) == 1000
    if mode == "redacted":
        assert "sk-live-abcd1234efgh5678" not in arguments
        assert "QWxh+GRpbjpvcGVu" not in result
    else:
        assert arguments == SECRET_ARGS
        assert result == SECRET_RESULT[:1000]


def test_a_nested_tool_call_is_a_child_of_the_call_that_made_it() -> None:
    otel, exporter = tracer()
    outer = start("{}", call_id="c7", tool="run_python")
    inner = start("{}", call_id="c7.1", tool="read_file")
    otel.tool_call_start(outer)
    otel.tool_call_start(inner)
    otel.tool_call_end(finish(inner, "text"))
    otel.tool_call_end(finish(outer, "done"))
    named = by_name(exporter)
    parent = named["execute_tool run_python"]
    child = named["execute_tool read_file"]
    assert parent.context is not None and child.parent is not None
    assert child.parent.span_id == parent.context.span_id


def test_a_timed_out_tool_call_is_an_error_of_type_timeout() -> None:
    otel, exporter = tracer()
    record = start("{}", tool="slow")
    otel.tool_call_start(record)
    otel.tool_call_end(
        finish(
            record,
            "Error: 'slow' timed out after 5 s and was stopped.",
            success=False,
            status="error",
        )
    )
    span = exporter.get_finished_spans()[0]
    assert span.status.status_code == StatusCode.ERROR
    assert attrs(span)["error.type"] == "timeout"


def test_a_failed_model_call_and_a_failed_run_are_marked_as_errors() -> None:
    otel, exporter = tracer()
    with otel.run(agent="a") as run:
        with pytest.raises(RuntimeError), otel.model_call("anthropic:claude-haiku-4-5"):
            raise RuntimeError("provider down")
        run.finish(status="error", reason="error", iterations=1)
    named = by_name(exporter)
    chat = named["chat claude-haiku-4-5"]
    assert chat.status.status_code == StatusCode.ERROR
    assert attrs(chat)["gen_ai.provider.name"] == "anthropic"
    assert named["invoke_agent a"].status.status_code == StatusCode.ERROR


def test_the_console_exporter_prints_finished_spans_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    otel = configure(OtelConfig(exporter="console"))
    with otel.run(agent="printer"):
        pass
    printed = capsys.readouterr()
    assert '"name": "invoke_agent printer"' in printed.err
    assert printed.out == ""


def test_an_otlp_exporter_without_its_package_is_a_clear_error() -> None:
    with pytest.raises(TelemetryUnavailable, match="opentelemetry-exporter-otlp-proto-http"):
        build_tracer_provider(OtelConfig(exporter="otlp-http"))


def test_metrics_are_recorded_as_genai_and_tool_instruments() -> None:
    reader = InMemoryMetricReader()
    metrics = OtelMetrics(meter_provider=MeterProvider(metric_readers=[reader]))
    metrics.record_model(
        "openai:gpt-4o", outcome="success", duration_s=0.4, input_tokens=100, output_tokens=20
    )
    metrics.record_model("openai:gpt-4o", outcome="timeout", duration_s=30.0)
    metrics.record_tool("lookup", outcome="success", duration_s=0.01)
    metrics.record_tool("lookup", outcome="failure", duration_s=0.02)
    data = reader.get_metrics_data()
    assert data is not None
    points: dict[str, list[Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points[metric.name] = list(metric.data.data_points)
    durations = {
        p.attributes.get("error.type", "none"): p.sum
        for p in points["gen_ai.client.operation.duration"]
    }
    assert durations == {"none": pytest.approx(0.4), "timeout": pytest.approx(30.0)}
    tokens = {p.attributes["gen_ai.token.type"]: p.sum for p in points["gen_ai.client.token.usage"]}
    assert tokens == {"input": 100, "output": 20}
    calls = {p.attributes["heron.outcome"]: p.value for p in points["heron.tool.calls"]}
    assert calls == {"success": 1, "failure": 1}
    assert {p.attributes["gen_ai.tool.name"] for p in points["heron.tool.duration"]} == {"lookup"}


def test_without_opentelemetry_heron_imports_and_only_asking_for_it_fails() -> None:
    script = """
import sys
sys.modules["opentelemetry"] = None  # as if the telemetry extra were not installed
import heron.telemetry.otel as otel
import heron.telemetry.metrics, heron.telemetry.alerts
import heron.turn.budgets, heron.models.context_window
for build in (lambda: otel.OtelTracer(), lambda: otel.OtelMetrics(),
              lambda: otel.configure(otel.OtelConfig())):
    try:
        build()
    except otel.TelemetryUnavailable as exc:
        print("unavailable:", exc)
"""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3
    assert all("pip install 'heron[telemetry]'" in line for line in lines)
