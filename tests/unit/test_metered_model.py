"""`MeteredModel`: one record per request, with the usage the stream reported and, given a
counter, the request's input tokens counted locally."""

from __future__ import annotations

from collections.abc import AsyncIterator

from heron import Agent, ScriptedModel
from heron.messages import UserMessage
from heron.models.base import ModelPart, ModelRequest, TextDelta, Usage
from heron.models.metered import MeteredModel, ModelCall
from heron.models.tokens import EstimateCounter, count_request


class Reporting:
    """Answers every request with text and two usage parts (as some providers split them)."""

    name = "reporting"
    native_tools = True

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelPart]:
        yield TextDelta(text="ok")
        yield Usage(input_tokens=10, output_tokens=2)
        yield Usage(input_tokens=5, output_tokens=1, cached_tokens=3)


async def test_each_request_is_recorded_with_the_usage_its_stream_reported() -> None:
    meter = MeteredModel(Reporting())
    result = await Agent(model=meter).run("hi")
    assert result.ok
    (call,) = meter.calls
    assert (call.model, call.turn_id, call.iteration) == ("reporting", result.turn_id, 1)
    assert call.usage == Usage(input_tokens=15, output_tokens=3, cached_tokens=3)
    assert call.counted_tokens is None and meter.counted_tokens == 0
    assert meter.reported_input_tokens == 15
    assert (meter.name, meter.native_tools) == ("reporting", True)


async def test_a_counter_counts_each_request_and_silent_models_report_nothing() -> None:
    counter = EstimateCounter("generic")
    meter = MeteredModel(ScriptedModel([{"text": "done"}]), counter=counter)
    await Agent(model=meter, system_prompt="be brief").run("What is in the harbour?")
    (call,) = meter.calls
    expected = count_request(
        counter, system="be brief", messages=[UserMessage(content="What is in the harbour?")]
    )
    assert call.counted_tokens == meter.counted_tokens == expected
    assert call.usage is None and meter.reported_input_tokens is None


async def test_meters_share_one_account_across_a_model_switch() -> None:
    first = MeteredModel(Reporting())
    await Agent(model=first).run("one")
    second = MeteredModel(ScriptedModel([{"text": "two"}]), first.calls)
    await Agent(model=second).run("two")
    assert [c.model for c in first.calls] == ["reporting", "scripted"]
    assert first.calls is second.calls
    assert isinstance(second.calls[1], ModelCall) and second.calls[1].usage is None
