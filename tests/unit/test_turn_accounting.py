"""The loop's accounting: run budgets, history trimming, metrics and OpenTelemetry spans."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from heron import Agent, ScriptedModel, tool
from heron.messages import AssistantMessage, ToolCallPart, ToolResultMessage, UserMessage
from heron.models.context_window import HistoryTrimmer
from heron.models.tokens import EstimateCounter
from heron.telemetry.metrics import MetricsRegistry
from heron.telemetry.otel import OtelTracer
from heron.turn.budgets import BudgetLimits, RunBudget
from support.engine import Events, call, calls_turn


@tool(read_only=True)
def tick(n: int) -> str:
    """Returns its number.

    Args:
        n: A number.
    """
    return f"tick {n}"


def ticking(count: int) -> list[dict[str, Any]]:
    return [calls_turn(call("tick", f"c{i}", n=i)) for i in range(count)]


async def test_a_tool_call_budget_ends_the_run_with_a_graceful_summary(events: Events) -> None:
    budget = RunBudget(BudgetLimits(tool_calls=2), label="main")
    model = ScriptedModel([*ticking(2), {"text": "summary after the budget"}])
    result = await Agent(model=model, tools=[tick]).run("go", sink=events, run_budget=budget)
    assert (result.outcome.reason, result.text) == ("budget_exhausted", "summary after the budget")
    assert sum(1 for e in events.of("tool_result") if e.status == "ok") == 2
    asked = model.messages_at(-1)[-1]
    assert isinstance(asked, UserMessage) and asked.source == "runtime"
    assert events.of("final")[0].reason == "budget_exhausted"


async def test_nested_runs_draw_from_the_parents_model_call_budget() -> None:
    parent = RunBudget(BudgetLimits(model_calls=2), label="main")
    child = parent.child(label="helper")
    await Agent(model=ScriptedModel([{"text": "a"}])).run("go", run_budget=child)
    await Agent(model=ScriptedModel([{"text": "b"}])).run("go", run_budget=parent)
    capped = await Agent(model=ScriptedModel([{"text": "summary"}])).run("go", run_budget=child)
    assert capped.outcome.reason == "budget_exhausted"


async def test_an_oversize_history_is_sent_trimmed_while_the_stored_one_stays_whole(
    events: Events,
) -> None:
    history: list[Any] = []
    for i in range(40):
        history += [
            UserMessage(content=f"question {i} " + "words " * 60),
            AssistantMessage(
                tool_calls=(ToolCallPart(id=f"old{i}", name="tick", arguments={"n": i}),)
            ),
            ToolResultMessage(call_id=f"old{i}", name="tick", content="result " * 60),
            AssistantMessage(text=f"answer {i}"),
        ]
    trimmer = HistoryTrimmer(EstimateCounter("openai"), budget_tokens=8_000)
    model = ScriptedModel([calls_turn(call("tick", n=1)), {"text": "done"}])
    agent = Agent(model=model, tools=[tick], trimmer=trimmer)
    result = await agent.run("latest question", history=history, sink=events)
    assert result.ok
    assert len(result.history) == 160 + 4  # user, call, result, answer
    sent = model.messages_at(0)
    assert len(sent) < 120 and sent[-1] == UserMessage(content="latest question")
    (trimmed,) = events.of("history_trimmed")
    assert trimmed.dropped_messages > 40 and not trimmed.over_budget


async def test_model_calls_are_measured_and_traced_with_genai_attributes(events: Events) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = OtelTracer(tracer_provider=provider)
    metrics = MetricsRegistry()
    agent = Agent(
        model=ScriptedModel([calls_turn(call("tick", n=1)), {"text": "ok"}]),
        tools=[tick],
        tracer=tracer,
        metrics=metrics,
        observer=tracer,
        name="helper",
    )
    await agent.run("go", sink=events)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    run_span = spans["invoke_agent helper"]
    chats = [
        s for s in exporter.get_finished_spans() if s.attributes["gen_ai.operation.name"] == "chat"
    ]
    assert len(chats) == 2 and all(s.parent.span_id == run_span.context.span_id for s in chats)
    tool_span = next(
        s
        for s in exporter.get_finished_spans()
        if s.attributes["gen_ai.operation.name"] == "execute_tool"
    )
    assert tool_span.attributes["gen_ai.tool.name"] == "tick"
    assert metrics.model_stats("scripted").calls == 2
