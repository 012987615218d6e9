"""Token counting: the documented estimate against real BPE counts, model families, exact
counters from locally installed vocabularies, calibration from reported usage, and what a
message or request costs."""

from __future__ import annotations

import sys
import types

import pytest

from heron.messages import AssistantMessage, ToolCallPart, ToolResultMessage, UserMessage
from heron.models.tokens import (
    MESSAGE_OVERHEAD,
    CalibratedCounter,
    EncodingCounter,
    EstimateCounter,
    TokenCounter,
    count_message,
    count_request,
    counter_for_model,
    exact_counter,
    family_for_model,
)
from heron.tools.definition import ToolSpec

PROSE = (
    "The scheduler wakes the agent when a message arrives, a timer fires or a background job "
    "finishes. Each wake-up becomes one turn: the model reads the new event together with the "
    "recent history, decides whether a tool is needed, and either answers or calls one. Tool "
    "results are appended to the history before the next model call, so nothing is lost if the "
    "process restarts halfway through a turn."
)
CODE = '''def parse_range(text: str) -> tuple[int, int]:
    """Parse "10-20" into (10, 20); a single number is a one-line range."""
    start, _, end = text.partition("-")
    first = int(start.strip())
    last = int(end.strip()) if end else first
    if last < first:
        raise ValueError(f"range {text!r} ends before it starts")
    return first, last
'''
JSON = (
    '{"id":"call_8f2a","name":"read_file","arguments":{"path":"src/app/main.py","start_line":10,'
    '"end_line":80},"status":"ok","duration_ms":12.5,"tags":["fs","read-only"]}'
)
LISTING = """-rw-r--r-- 1 root root   4096 Mar 14 09:12 config.yaml
-rwxr-xr-x 1 root root  18432 Mar 14 09:12 run.sh
drwxr-xr-x 2 root root   4096 Mar 13 17:40 logs
-rw-r--r-- 1 root root 731245 Mar 12 08:03 data.csv
"""
CHINESE = (
    "今天天气很好，我们决定去公园散步。公园里有很多人在跑步、打太极拳和放风筝。"
    "孩子们在草地上玩耍，老人们坐在长椅上聊天。"
)

# Exact counts measured with the o200k_base and cl100k_base vocabularies (bpe-openai 0.1.4).
O200K = {"prose": 79, "code": 95, "json": 53, "listing": 94, "chinese": 51}
CL100K = {"prose": 79, "code": 94, "json": 52, "listing": 94, "chinese": 78}
SAMPLES = {"prose": PROSE, "code": CODE, "json": JSON, "listing": LISTING, "chinese": CHINESE}


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_openai_estimate_is_within_twenty_percent_of_o200k(sample: str) -> None:
    estimate = EstimateCounter("openai").count(SAMPLES[sample])
    assert abs(estimate / O200K[sample] - 1) <= 0.2, (sample, estimate, O200K[sample])


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_legacy_openai_estimate_is_within_twenty_percent_of_cl100k(sample: str) -> None:
    estimate = EstimateCounter("openai-legacy").count(SAMPLES[sample])
    assert abs(estimate / CL100K[sample] - 1) <= 0.2, (sample, estimate, CL100K[sample])


def test_estimate_prices_cjk_per_character_where_chars_over_four_would_undercount() -> None:
    # len/4 would say 14 tokens; the real o200k count is 51.
    assert EstimateCounter("openai").count(CHINESE) >= 45


def test_empty_text_is_zero_tokens_and_any_text_at_least_one() -> None:
    counter = EstimateCounter()
    assert counter.count("") == 0
    assert counter.count(" ") == 1


def test_windows_line_endings_cost_the_same_as_unix_ones() -> None:
    counter = EstimateCounter()
    unix = "first line\nsecond line\n    indented\n"
    assert counter.count(unix.replace("\n", "\r\n")) == counter.count(unix)


def test_anthropic_and_generic_estimates_carry_a_safety_margin() -> None:
    base = EstimateCounter("openai-legacy").count(PROSE)
    assert EstimateCounter("anthropic").count(PROSE) >= round(base * 1.15) - 1
    assert EstimateCounter("generic").count(PROSE) >= round(base * 1.1) - 1
    assert EstimateCounter("anthropic").count(PROSE) > base


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("openai:gpt-4o", "openai"),
        ("openai:gpt-4o-mini", "openai"),
        ("openai:gpt-4.1", "openai"),
        ("openai:gpt-5", "openai"),
        ("openai:o3-mini", "openai"),
        ("openai:gpt-4", "openai-legacy"),
        ("openai:gpt-4-turbo", "openai-legacy"),
        ("openai:gpt-3.5-turbo", "openai-legacy"),
        ("anthropic:claude-sonnet-4-5", "anthropic"),
        ("ollama:llama3.1", "generic"),
        ("openai-compatible:qwen2.5", "generic"),
        ("scripted", "generic"),
        ("openai:gpt-4o | anthropic:claude-haiku-4-5", "openai"),
    ],
)
def test_model_strings_map_to_tokenizer_families(model: str, family: str) -> None:
    assert family_for_model(model) == family


def test_without_a_vocabulary_package_there_is_no_exact_counter_and_no_download(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "bpe_openai", None)  # makes the import fail
    assert exact_counter("o200k_base") is None
    counter = counter_for_model("openai:gpt-4o")
    assert isinstance(counter, EstimateCounter)
    assert counter.name == "estimate:openai"


class _FakeEncoding:
    """Stands in for a bundled vocabulary: one token per whitespace-separated word."""

    def __init__(self, name: str) -> None:
        self.name = name

    def encode(self, text: str) -> list[int]:
        raise AssertionError("special tokens must not be checked: use encode_ordinary")

    def encode_ordinary(self, text: str) -> list[int]:
        return list(range(len(text.split())))


def test_an_installed_vocabulary_gives_exact_counts_for_openai_models(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = types.ModuleType("bpe_openai")
    asked: list[str] = []

    def get_encoding(name: str) -> _FakeEncoding:
        asked.append(name)
        return _FakeEncoding(name)

    fake.get_encoding = get_encoding  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "bpe_openai", fake)
    counter = counter_for_model("openai:gpt-4o")
    assert isinstance(counter, EncodingCounter)
    assert counter.name == "o200k_base"
    assert counter.count("one two <|endoftext|> three") == 4
    assert counter_for_model("openai:gpt-4").name == "cl100k_base"
    assert asked == ["o200k_base", "cl100k_base"]
    # Anthropic's tokenizer is not in any OpenAI vocabulary: still the estimate.
    assert isinstance(counter_for_model("anthropic:claude-opus-4-1"), EstimateCounter)


def test_counters_satisfy_the_protocol() -> None:
    counters: list[TokenCounter] = [
        EstimateCounter(),
        EncodingCounter(_FakeEncoding("x"), name="x"),
        CalibratedCounter(EstimateCounter()),
    ]
    assert all(isinstance(c, TokenCounter) for c in counters)


def test_calibration_adopts_the_first_reported_ratio_then_smooths() -> None:
    counter = CalibratedCounter(EstimateCounter(), smoothing=0.5)
    base = counter.base.count(PROSE)
    counter.observe(1000, 1500)
    assert counter.factor == pytest.approx(1.5)
    assert counter.count(PROSE) == pytest.approx(base * 1.5, abs=1)
    counter.observe(1000, 1000)
    assert counter.factor == pytest.approx(1.25)


def test_calibration_is_bounded_and_ignores_missing_usage() -> None:
    counter = CalibratedCounter(EstimateCounter(), bounds=(0.5, 2.0))
    counter.observe(100, 0)
    counter.observe(0, 100)
    assert counter.observations == 0 and counter.factor == 1.0
    counter.observe(100, 5000)
    assert counter.factor == 2.0
    # A model that needs more tokens per character lowers the char bound derived from it.
    assert counter.chars_per_token == pytest.approx(EstimateCounter().chars_per_token / 2)


def test_tool_calls_count_and_reasoning_does_not() -> None:
    counter = EstimateCounter()
    plain = AssistantMessage(text="Reading the file.")
    with_call = AssistantMessage(
        text="Reading the file.",
        tool_calls=(ToolCallPart(id="c1", name="read_file", arguments={"path": "src/x.py"}),),
    )
    thinking = AssistantMessage(text="Reading the file.", reasoning="long private thoughts " * 50)
    assert count_message(counter, with_call) > count_message(counter, plain)
    assert count_message(counter, thinking) == count_message(counter, plain)
    result = ToolResultMessage(call_id="c1", name="read_file", content=CODE)
    assert count_message(counter, result) > counter.count(CODE)
    assert count_message(counter, UserMessage(content="hi")) == MESSAGE_OVERHEAD + 1


def test_a_request_counts_system_prompt_history_and_tool_definitions() -> None:
    counter = EstimateCounter()
    history = [UserMessage(content=PROSE)]
    spec = ToolSpec(
        name="read_file",
        description="Read a text file from the workspace.",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}},
    )
    bare = count_request(counter, system="", messages=history)
    with_system = count_request(counter, system="You are terse.", messages=history)
    with_tools = count_request(counter, system="You are terse.", messages=history, tools=[spec])
    assert bare < with_system < with_tools
    assert with_tools - with_system >= counter.count("Read a text file from the workspace.")
