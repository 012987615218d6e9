"""History trimming: calls stay with their results, the system prompt, the current request
and the newest round survive, older turns go whole and oldest first, and the trim is reported.
Every trimmed history must pass the provider rules (`HistoryChecker`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from heron.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCallPart,
    ToolResultMessage,
    UserMessage,
)
from heron.models.context_window import (
    TRIM_NOTE,
    HistoryTrimmer,
    TrimReport,
    default_result_limit,
)
from heron.models.history_rules import HistoryChecker
from heron.models.tokens import (
    MESSAGE_OVERHEAD,
    REQUEST_OVERHEAD,
    CalibratedCounter,
    EstimateCounter,
    count_message,
    count_request,
)
from heron.tools.definition import ToolSpec
from heron.turn.events import HistoryTrimmedEvent


class WordCounter:
    """One token per word, and a log of every text counted."""

    name = "words"
    chars_per_token = 4.0

    def __init__(self) -> None:
        self.seen: list[str] = []

    def count(self, text: str) -> int:
        self.seen.append(text)
        return len(text.split())


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def round_(call_id: str, *, result_words: int = 20, calls: int = 1) -> list[Message]:
    """An assistant message with `calls` tool calls and their results."""
    ids = [f"{call_id}-{i}" for i in range(calls)]
    message = AssistantMessage(
        text="checking",
        tool_calls=tuple(ToolCallPart(id=i, name="probe", arguments={"n": 1}) for i in ids),
    )
    results = [
        ToolResultMessage(call_id=i, name="probe", content=words(result_words, i)) for i in ids
    ]
    return [message, *results]


def turn(n: int, *, rounds: int = 1, result_words: int = 20) -> list[Message]:
    messages: list[Message] = [UserMessage(content=f"question {n} " + words(10))]
    for r in range(rounds):
        messages += round_(f"t{n}r{r}", result_words=result_words, calls=1 + r % 2)
    messages.append(AssistantMessage(text=f"answer {n} " + words(10)))
    return messages


def conversation(turns: int, **kwargs: int) -> list[Message]:
    history: list[Message] = []
    for n in range(turns):
        history += turn(n, **kwargs)
    return history


def valid(messages: Sequence[Message]) -> None:
    HistoryChecker().check(messages)


def total(counter: WordCounter, messages: Sequence[Message]) -> int:
    return sum(count_message(counter, m) for m in messages)


def test_a_history_within_budget_is_returned_whole_without_a_report() -> None:
    history = conversation(3)
    counter = WordCounter()
    budget = REQUEST_OVERHEAD + total(counter, history)
    result = HistoryTrimmer(counter, budget_tokens=budget).trim(history)
    assert result.messages == history
    assert result.report is None
    assert result.counted_tokens == budget


def test_older_turns_are_dropped_whole_and_reported() -> None:
    counter = WordCounter()
    history = conversation(6, rounds=2)
    budget = total(counter, history) // 2
    result = HistoryTrimmer(counter, budget_tokens=budget).trim(history)
    report = result.report
    assert report is not None
    kept = result.messages
    valid(kept)
    note, rest = kept[0], kept[1:]
    assert isinstance(note, UserMessage) and note.source == "runtime"
    assert note.content == TRIM_NOTE.format(
        messages=report.dropped_messages, tokens=report.dropped_tokens
    )
    # What remains is a suffix of the history made of whole turns.
    assert rest == history[len(history) - len(rest) :]
    assert isinstance(rest[0], UserMessage) and rest[0].content.startswith("question")
    dropped = history[: len(history) - len(rest)]
    assert report.dropped_messages == len(dropped)
    assert report.dropped_tokens == total(counter, dropped)
    assert report.kept_messages == len(kept)
    assert report.kept_tokens == total(counter, kept) <= budget
    assert not report.over_budget
    event = HistoryTrimmedEvent(turn_id="t1", **report.event_fields())
    assert event.type == "history_trimmed"
    assert event.dropped_messages == len(dropped)
    assert event.model_dump(exclude={"type", "turn_id"}) == report.event_fields()


def test_the_trim_report_has_exactly_the_fields_of_the_history_trimmed_event() -> None:
    event_fields = set(HistoryTrimmedEvent.model_fields) - {"type", "turn_id"}
    assert event_fields == {f.name for f in dataclasses.fields(TrimReport)}


@pytest.mark.parametrize("budget", range(150, 1200, 37))
def test_no_budget_ever_separates_a_call_from_its_results(budget: int) -> None:
    counter = WordCounter()
    history = [SystemMessage(content="be brief"), *conversation(5, rounds=3)]
    result = HistoryTrimmer(counter, budget_tokens=budget).trim(history)
    valid(result.messages)
    assert result.messages[0] == history[0]
    assert history[-1] in result.messages
    kept_calls = {
        c.id for m in result.messages if isinstance(m, AssistantMessage) for c in m.tool_calls
    }
    kept_results = {m.call_id for m in result.messages if isinstance(m, ToolResultMessage)}
    assert kept_calls == kept_results


def test_a_long_current_turn_loses_its_oldest_rounds_but_keeps_its_request_and_newest_round() -> (
    None
):
    counter = WordCounter()
    old = turn(0)
    request = UserMessage(content="current question " + words(5))
    rounds = [m for r in range(8) for m in round_(f"cur{r}", result_words=40)]
    history = [*old, request, *rounds]
    newest = rounds[-2:]
    budget = total(counter, [request, *rounds]) // 2
    result = HistoryTrimmer(counter, budget_tokens=budget).trim(history)
    valid(result.messages)
    assert request in result.messages
    assert result.messages[-2:] == newest
    assert not any(m in result.messages for m in old)
    assert rounds[0] not in result.messages
    assert result.report is not None and not result.report.over_budget


def test_when_the_protected_messages_alone_exceed_the_budget_it_says_so() -> None:
    counter = WordCounter()
    request = UserMessage(content=words(300))
    history = [*turn(0), request, *round_("last", result_words=300)]
    result = HistoryTrimmer(counter, budget_tokens=200).trim(history)
    valid(result.messages)
    assert result.report is not None and result.report.over_budget
    assert request in result.messages
    assert result.messages[-2:] == history[-2:]


def test_a_budget_that_nothing_can_meet_keeps_everything_and_reports_over_budget() -> None:
    counter = WordCounter()
    history: list[Message] = [UserMessage(content=words(500))]
    result = HistoryTrimmer(counter, budget_tokens=10).trim(history)
    assert result.messages == history
    assert result.report is not None
    assert result.report.over_budget and result.report.dropped_messages == 0


def test_the_system_prompt_and_tool_definitions_take_budget_from_the_history() -> None:
    counter = WordCounter()
    history = conversation(4)
    budget = REQUEST_OVERHEAD + total(counter, history)
    trimmer = HistoryTrimmer(counter, budget_tokens=budget)
    assert trimmer.trim(history).report is None
    assert trimmer.trim(history, system=words(50)).report is not None
    spec = ToolSpec(name="probe", description=words(80), parameters={"type": "object"})
    assert trimmer.trim(history, tools=[spec]).report is not None
    assert trimmer.trim(history, reserve_tokens=30).report is not None


def test_the_counted_size_of_a_trimmed_request_is_what_calibration_needs() -> None:
    counter = WordCounter()
    history = conversation(6, rounds=2)
    spec = ToolSpec(name="probe", description=words(30), parameters={"type": "object"})
    result = HistoryTrimmer(counter, budget_tokens=400).trim(
        history, system=words(20), tools=[spec]
    )
    assert result.report is not None
    expected = count_request(counter, system=words(20), messages=result.messages, tools=[spec])
    assert result.counted_tokens == expected <= 400


def test_a_calibrated_counter_that_learned_a_model_needs_more_tokens_trims_more() -> None:
    counter = CalibratedCounter(WordCounter())
    history = conversation(8, rounds=2)
    trimmer = HistoryTrimmer(counter, budget_tokens=600)
    before = trimmer.trim(history)
    counter.observe(before.counted_tokens, before.counted_tokens * 2)
    after = trimmer.trim(history)
    assert before.report is not None and after.report is not None
    assert after.report.dropped_messages > before.report.dropped_messages
    assert after.report.kept_tokens <= 600
    valid(after.messages)


def test_without_the_note_the_history_starts_at_a_kept_turn() -> None:
    counter = WordCounter()
    history = conversation(5)
    result = HistoryTrimmer(counter, budget_tokens=150, note=False).trim(history)
    valid(result.messages)
    first = result.messages[0]
    assert isinstance(first, UserMessage) and first.source == "user"
    assert not any(TRIM_NOTE[:20] in getattr(m, "content", "") for m in result.messages)


def test_counts_are_cached_so_a_growing_history_is_only_counted_once() -> None:
    counter = WordCounter()
    history = conversation(4)
    trimmer = HistoryTrimmer(counter, budget_tokens=10_000)
    trimmer.trim(history)
    counter.seen.clear()
    history += turn(9)
    trimmer.trim(history)
    recounted = [text for text in counter.seen if "question 0" in text or "answer 0" in text]
    assert recounted == []
    assert any("question 9" in text for text in counter.seen)


def test_trimming_with_the_real_estimate_keeps_the_provider_rules() -> None:
    counter = EstimateCounter()
    history = conversation(12, rounds=3, result_words=120)
    result = HistoryTrimmer(counter, budget_tokens=3_000).trim(history, reserve_tokens=500)
    valid(result.messages)
    assert result.report is not None
    assert result.report.kept_tokens <= 2_500
    assert result.report.dropped_tokens + result.report.kept_tokens >= total_estimate(history)


def total_estimate(history: Sequence[Message]) -> int:
    return sum(count_message(EstimateCounter(), m) for m in history)


def test_the_result_limit_is_a_fraction_of_the_context_window_in_characters() -> None:
    counter = EstimateCounter("openai")
    assert default_result_limit(128_000, counter) == int(128_000 * 0.25 * 3.0)
    assert default_result_limit(128_000, counter, fraction=0.1) == int(128_000 * 0.1 * 3.0)
    assert default_result_limit(8_000, counter) < default_result_limit(200_000, counter)
    # A counter whose family needs more tokens per character gets a tighter bound.
    assert default_result_limit(128_000, EstimateCounter("anthropic")) < default_result_limit(
        128_000, counter
    )


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.5])
def test_a_result_fraction_outside_zero_to_one_is_refused(fraction: float) -> None:
    with pytest.raises(ValueError, match="fraction"):
        default_result_limit(128_000, EstimateCounter(), fraction=fraction)


def test_message_overhead_is_part_of_every_count() -> None:
    counter = WordCounter()
    assert count_message(counter, UserMessage(content="a b c")) == MESSAGE_OVERHEAD + 3
