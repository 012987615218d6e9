"""Stored token counts beyond the store contract: what names a counter's counts, a store of
the schema before counts were stored (SQLite and PostgreSQL), and the front ends that write
through a counting writer (a command-line session, the event loop)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psycopg

from heron import Agent, ScriptedModel
from heron._support.postgres import apply_migrations
from heron.always_on.bus.loop import EventDrivenAgent
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.messages import AssistantMessage, Message, UserMessage
from heron.models.context_window import HistoryTrimmer
from heron.models.tokens import (
    PROFILES,
    CalibratedCounter,
    EncodingCounter,
    EstimateCounter,
    count_message,
    counter_key,
)
from heron.sessions.postgres_store import PostgresSessionStore
from heron.sessions.session import CliSession
from heron.sessions.sqlite_store import SqliteSessionStore
from heron.sessions.store import SessionStore, TokenCounts
from heron.sessions.writer import SessionWriter
from heron.turn.cancel import CancelScope
from support.postgres import postgres_server, postgres_url

__all__ = ["postgres_server", "postgres_url"]  # fixtures, found by pytest here

HISTORY: list[Message] = [
    UserMessage(content="what is in the repository?"),
    AssistantMessage(text="A README and a Makefile, nothing else."),
    UserMessage(content="and in the README?"),
    AssistantMessage(text="One line: the project's name."),
]


class Letters:
    def encode_ordinary(self, text: str) -> list[int]:
        return [ord(c) for c in text]


class Words:
    """A counter of the embedder's own: heron cannot tell what its counts depend on."""

    name = "words"
    chars_per_token = 4.0

    def count(self, text: str) -> int:
        return len(text.split())


def letters_counter() -> EncodingCounter:
    return EncodingCounter(Letters(), name="letters")


def trimmer() -> HistoryTrimmer:
    return HistoryTrimmer(CalibratedCounter(EstimateCounter("openai")), budget_tokens=10_000)


def test_a_counter_key_names_the_counter_its_profile_and_the_counting_rules() -> None:
    openai = counter_key(EstimateCounter("openai"))
    assert openai is not None and openai.startswith("estimate:openai/")
    assert openai == counter_key(EstimateCounter("openai"))  # stable across instances
    assert counter_key(EstimateCounter("anthropic")) != openai
    custom = EstimateCounter("openai", profile=PROFILES["anthropic"])
    assert counter_key(custom) not in (openai, None)  # the same name, other weights
    assert counter_key(letters_counter()) == "encoding:letters/r1"


def test_counters_whose_counts_cannot_be_vouched_for_have_no_key() -> None:
    class Tweaked(EstimateCounter):
        def count(self, text: str) -> int:
            return 2 * super().count(text)

    assert counter_key(CalibratedCounter(EstimateCounter("openai"))) is None
    assert counter_key(Words()) is None
    assert counter_key(Tweaked("openai")) is None
    assert HistoryTrimmer(Tweaked("openai"), budget_tokens=100).counted_by is None
    # The trimmer names its uncorrected counter's counts: those are what it caches.
    assert trimmer().counted_by == counter_key(EstimateCounter("openai"))


def test_a_writer_with_a_trimmer_that_has_no_key_stores_no_counts(tmp_path: Path) -> None:
    store = SqliteSessionStore.open(tmp_path)
    try:
        writer = SessionWriter.open(store, "s")
        writer.count_with(trimmer())
        words = HistoryTrimmer(Words(), budget_tokens=100)
        writer.count_with(words)  # counts no longer stored
        for message in HISTORY:
            writer.add(message)
            words.trim(writer.history)
        assert store.conn.execute("SELECT COUNT(*) FROM session_entry_tokens").fetchone() == (0,)
    finally:
        store.close()


def assert_counts_filled_by_the_first_resume(open_store: Callable[[], SessionStore]) -> None:
    """A history stored without counts: the first resume that counts stores every count, and
    a resume reads what is stored instead of counting (a count planted for another counter is
    what that counter's trimmer gets)."""
    opened: list[SessionStore] = []

    def store() -> SessionStore:
        opened.append(open_store())
        return opened[-1]

    try:
        first = trimmer()
        key = first.counted_by
        assert key is not None
        assert store().token_counts("s", key) == {}
        SessionWriter.open(store(), "s").count_with(first)
        estimate = EstimateCounter("openai")
        expected = {at: count_message(estimate, m) for at, m in enumerate(HISTORY)}
        assert store().token_counts("s", key) == expected
        letters = HistoryTrimmer(letters_counter(), budget_tokens=100)
        assert letters.counted_by is not None
        planted = TokenCounts(counted_by=letters.counted_by, tokens={0: 12345})
        store().add_token_counts("s", planted)
        resumed = SessionWriter.open(store(), "s")
        resumed.count_with(letters)
        assert letters.count(resumed.history[0]) == 12345
        assert letters.count(resumed.history[1]) == count_message(letters_counter(), HISTORY[1])
    finally:
        for each in opened:
            each.close()


def test_a_sqlite_database_of_the_schema_before_counts_gets_them_on_the_first_resume(
    tmp_path: Path,
) -> None:
    old = SqliteSessionStore.open(tmp_path)
    old.append("s", HISTORY)
    old.conn.execute("DROP TABLE session_entry_tokens")  # the database as it was before
    old.close()
    assert_counts_filled_by_the_first_resume(lambda: SqliteSessionStore.open(tmp_path))


def test_a_postgres_database_migrated_from_before_counts_gets_them_on_the_first_resume(
    postgres_url: str,
) -> None:
    old = PostgresSessionStore.open(postgres_url)
    old.append("s", HISTORY)  # what version 9 writes as well: entries and heads
    old.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP TABLE session_entry_tokens")
        conn.execute("DELETE FROM schema_migrations WHERE version = 10")
        assert [m.version for m in apply_migrations(conn)] == [10]
    assert_counts_filled_by_the_first_resume(lambda: PostgresSessionStore.open(postgres_url))


def assert_counted_but_the_last(store: SessionStore, session: str) -> None:
    """Every entry's count is stored but the last one's: no trim has seen the final answer."""
    key = trimmer().counted_by
    assert key is not None
    history = store.load(session)
    estimate = EstimateCounter("openai")
    counts = {at: count_message(estimate, m) for at, m in enumerate(history[:-1])}
    assert store.token_counts(session, key) == counts


async def test_command_line_turns_store_the_counts_their_model_calls_made(tmp_path: Path) -> None:
    session = CliSession.open(tmp_path, "s")
    agent = Agent(model=ScriptedModel([{"text": "hello"}, {"text": "bye"}]), trimmer=trimmer())
    try:
        for prompt in ("hi", "see you"):
            outcome = await session.run_turn(
                agent, prompt, sink=lambda _: None, cancel=CancelScope(), channel="test"
            )
            assert outcome.status == "final"
        assert len(session.history) == 4
        assert_counted_but_the_last(session.store, "s")
    finally:
        session.close()


async def test_the_event_loop_stores_the_counts_its_model_calls_made(tmp_path: Path) -> None:
    bus = SqliteBusStore.open(tmp_path)
    model = ScriptedModel([{"text": "one"}, {"text": "two"}])
    agent = EventDrivenAgent(Agent(model=model, trimmer=trimmer()), bus, bus.sessions, session="m")
    try:
        for text in ("first", "second"):
            event = BusEvent(
                kind="user.input", source="user", channel="cli", content=EventContent(text=text)
            )
            assert await agent.publish(event.model_copy(update={"session": "m"}))
            await agent.run_until_idle()
        assert len(bus.sessions.load("m")) == 4
        assert_counted_but_the_last(bus.sessions, "m")
    finally:
        bus.close()
