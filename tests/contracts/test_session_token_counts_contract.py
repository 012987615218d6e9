"""Stored token counts (`SessionStore.token_counts`): by position, stored with an append or by
themselves, never changed, read without the messages; and a resumed session's first trim, fed
the stored counts through its writer, sends exactly what a trim that counts everything sends."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

import heron.models.context_window as context_window
from heron.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCallPart,
    ToolResultMessage,
    UserMessage,
)
from heron.models.context_window import HistoryTrimmer, TrimResult
from heron.models.tokens import (
    CalibratedCounter,
    EstimateCounter,
    Family,
    TokenCounter,
    count_request,
)
from heron.sessions.store import ConcurrentWriteError, SessionStore, TokenCounts
from heron.sessions.writer import SessionWriter
from support.stores import StoreBackend

MESSAGES: list[Message] = [UserMessage(content="hi"), AssistantMessage(text="hello there")]
WORDS = (
    "read the module",
    "x = 1\n    return x",
    "SELECT * FROM t WHERE id = 42;",
    "déjà vu, naïve café",
    "日本語のテキスト",
    "12345 67890",
    "ls -la /tmp | grep heron",
    "✓ done 🎉",
)


@pytest.fixture
def store(backend: StoreBackend) -> SessionStore:
    return backend.sessions()


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Message]]:
    """Every message a trimmer counts (the trimmers' one counting function, wrapped)."""
    seen: list[Message] = []
    count = context_window.count_message

    def counting(counter: TokenCounter, message: Message) -> int:
        seen.append(message)
        return count(counter, message)

    monkeypatch.setattr(context_window, "count_message", counting)
    yield seen


def trimmer(budget: int, family: Family = "openai") -> HistoryTrimmer:
    return HistoryTrimmer(CalibratedCounter(EstimateCounter(family)), budget_tokens=budget)


def test_counts_stored_with_an_append_read_back_by_their_counter_only(
    store: SessionStore,
) -> None:
    head = store.append("s", MESSAGES, tokens=TokenCounts(counted_by="k", tokens={0: 3, 1: 7}))
    store.append("t", MESSAGES[:1])
    store.append("s", [UserMessage(content="more")], expected_last_entry=head)
    assert store.token_counts("s", "k") == {0: 3, 1: 7}
    assert store.token_counts("s", "other") == {}
    assert store.token_counts("t", "k") == {}


def test_added_counts_fill_what_is_missing_and_keep_what_is_stored(store: SessionStore) -> None:
    store.append("s", [*MESSAGES, *MESSAGES], tokens=TokenCounts(counted_by="k", tokens={0: 3}))
    store.add_token_counts("s", TokenCounts(counted_by="k", tokens={0: 99, 2: 5}))
    store.add_token_counts("s", TokenCounts(counted_by="j", tokens={1: 4}))
    assert store.token_counts("s", "k") == {0: 3, 2: 5}
    assert store.token_counts("s", "j") == {1: 4}


def test_counts_of_a_refused_append_are_not_stored(store: SessionStore) -> None:
    store.append("s", MESSAGES)
    with pytest.raises(ConcurrentWriteError):
        store.append(
            "s",
            MESSAGES,
            expected_last_entry=0,
            tokens=TokenCounts(counted_by="k", tokens={0: 3, 1: 7}),
        )
    assert store.token_counts("s", "k") == {}


def test_a_writer_stores_the_counts_its_trimmer_made_with_its_next_append(
    store: SessionStore, counted: list[Message]
) -> None:
    writer = SessionWriter.open(store, "s")
    cutter = trimmer(1000)
    writer.count_with(cutter)
    writer.add(MESSAGES[0])
    assert counted == []  # nothing is counted on the way to the store
    cutter.trim(writer.history)  # the model call counts what it sends
    writer.add(MESSAGES[1])
    key = cutter.counted_by
    assert key is not None
    assert store.token_counts("s", key) == {0: cutter.count(MESSAGES[0])}
    cutter.trim(writer.history)
    writer.history.append(AssistantMessage(text="and more"))
    writer.on_append(())
    assert store.token_counts("s", key) == {
        at: cutter.count(m) for at, m in enumerate(writer.history[:2])
    }


def history(rng: random.Random, *, system: bool, pinned: bool) -> list[Message]:
    """Turns of prompts, runtime notes, tool rounds (some of several calls) and answers; a
    leading system message and a result kept in context in the first turn when asked."""

    def text(most: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, most)))

    out: list[Message] = [SystemMessage(content=text(6))] if system else []
    for turn in range(rng.randint(4, 18)):
        out.append(UserMessage(content=text(8)))
        if rng.random() < 0.2:
            out.append(UserMessage(content=f"[event {turn}] {text(3)}", source="runtime"))
        for r in range(rng.randint(0, 3)):
            calls = [
                ToolCallPart(id=f"c{turn}.{r}.{k}", name="read", arguments={"q": text(2)})
                for k in range(rng.randint(1, 3))
            ]
            out.append(AssistantMessage(text=text(3), tool_calls=tuple(calls)))
            keep = pinned and turn == 0 and r == 0
            out += [
                ToolResultMessage(call_id=c.id, name=c.name, content=text(30), keep=keep)
                for c in calls
            ]
        out.append(AssistantMessage(text=text(12)))
    return out


def sent(result: TrimResult) -> tuple[list[str], object, int]:
    return [m.model_dump_json() for m in result.messages], result.report, result.counted_tokens


@pytest.mark.parametrize("seed", range(6))
def test_a_resumed_first_trim_from_stored_counts_sends_what_counting_everything_sends(
    backend: StoreBackend, seed: int, counted: list[Message]
) -> None:
    rng = random.Random(seed)
    messages = history(rng, system=seed % 2 == 0, pinned=seed % 3 != 2)
    # Three stretches: stored without counts (before counts were stored), counted by another
    # counter, counted by this one, in several writes; each ends before a user message, so
    # no call is open when the next writer opens the session.
    starts = [i for i, m in enumerate(messages) if i and isinstance(m, UserMessage)]
    a, b = sorted(rng.sample(starts, 2))
    # (A writer that counts hands counts to what it reads, filling those missing: the last
    # stretch is appended with its counts directly.)
    store = backend.sessions()
    store.append("s", messages[:a])
    writer = SessionWriter.open(store, "s")
    other = trimmer(10_000, "anthropic")
    writer.count_with(other)
    for message in messages[a:b]:
        writer.add(message)
        other.trim(writer.history)
    head, stretch, counting = writer.head, messages[b:], trimmer(10_000)
    assert counting.counted_by is not None
    at = b
    while stretch:
        step = stretch[: rng.randint(1, 4)]
        stretch = stretch[len(step) :]
        counts = {at + i: counting.count(m) for i, m in enumerate(step)}
        tokens = TokenCounts(counted_by=counting.counted_by, tokens=counts)
        head = store.append("s", step, expected_last_entry=head, tokens=tokens)
        at += len(step)
    system = "You are terse."
    total = count_request(EstimateCounter("openai"), system=system, messages=messages)
    trimmed = 0
    for share in (0.25, 0.5, 0.8, 1.5):
        budget = int(total * share)
        reference = trimmer(budget).trim(backend.sessions().load("s"), system=system)
        counted.clear()
        resumed = SessionWriter.open(backend.sessions(), "s")
        cutter = trimmer(budget)
        resumed.count_with(cutter)
        first = cutter.trim(resumed.history, system=system)
        assert sent(first) == sent(reference)
        trimmed += first.report is not None
        live = {id(m) for m in resumed.history}
        recounted = [m for m in counted if id(m) in live]
        # Only what had no count of this counter was counted, once (and stored then).
        assert len(recounted) == (b if share == 0.25 else 0)
    assert trimmed >= 2


def test_a_writer_hands_counts_to_a_history_it_reads_later(
    store: SessionStore, counted: list[Message]
) -> None:
    store.append("s", MESSAGES)
    SessionWriter.open(store, "s").count_with(trimmer(1000))  # counts and stores them
    woken = SessionWriter.wake(store, "s")
    cutter = trimmer(1000)
    woken.count_with(cutter)  # before the history is read: the counts come with the read
    counted.clear()
    cutter.trim(woken.history)
    assert not [m for m in counted if any(m is h for h in woken.history)]
