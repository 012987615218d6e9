"""Session histories: append-only entries, exact round trips, refused concurrent writers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from heron.messages import (
    AssistantMessage,
    Message,
    ToolCallPart,
    ToolResultMessage,
    UserMessage,
)
from heron.sessions import ConcurrentWriteError, SessionStore, transaction

CONVERSATION: list[Message] = [
    UserMessage(content="list the files"),
    AssistantMessage(
        text="Looking.",
        reasoning="use ls",
        tool_calls=(ToolCallPart(id="c1", name="ls", arguments={"path": ".", "deep": [1, 2]}),),
    ),
    ToolResultMessage(call_id="c1", name="ls", content="a.txt\nb.txt"),
    UserMessage(content="[pending event 1/1] …", source="runtime"),
    AssistantMessage(text="Two files: a.txt and b.txt — ✓"),
]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SessionStore]:
    sessions = SessionStore.open(tmp_path)
    yield sessions
    sessions.close()


def test_a_history_reads_back_exactly_after_reopening(store: SessionStore, tmp_path: Path) -> None:
    head = store.append("s1", CONVERSATION[:2])
    store.append("s1", CONVERSATION[2:], expected_last_entry=head)
    reopened = SessionStore.open(tmp_path)
    try:
        assert reopened.load("s1") == CONVERSATION
    finally:
        reopened.close()


def test_entries_chain_to_their_parent_in_the_same_session(store: SessionStore) -> None:
    store.append("a", CONVERSATION[:2])
    store.append("b", CONVERSATION[:1])
    store.append("a", CONVERSATION[2:3])
    entries = store.entries("a")
    assert [e.message for e in entries] == CONVERSATION[:3]
    assert entries[0].parent_id is None
    assert [e.parent_id for e in entries[1:]] == [e.entry_id for e in entries[:-1]]
    assert store.head("a") == entries[-1].entry_id
    assert store.head("unknown") == 0 and store.load("unknown") == []


def test_sessions_are_listed_most_recently_written_first(store: SessionStore) -> None:
    store.append("old", CONVERSATION[:1])
    store.append("new", CONVERSATION[:3])
    assert [(i.session, i.entries) for i in store.list_sessions()] == [("new", 3), ("old", 1)]


def test_a_writer_with_a_stale_head_is_refused_and_nothing_is_written(
    store: SessionStore, tmp_path: Path
) -> None:
    other = SessionStore.open(tmp_path)
    try:
        mine = store.append("s", CONVERSATION[:1], expected_last_entry=0)
        theirs_view = other.head("s")
        mine = store.append("s", CONVERSATION[1:3], expected_last_entry=mine)
        with pytest.raises(ConcurrentWriteError) as refused:
            other.append(
                "s", [UserMessage(content="interleaved?")], expected_last_entry=theirs_view
            )
        assert (refused.value.expected, refused.value.actual) == (theirs_view, mine)
        assert store.load("s") == CONVERSATION[:3]
    finally:
        other.close()


def test_expecting_an_empty_session_refuses_one_that_has_entries(store: SessionStore) -> None:
    store.append("s", CONVERSATION[:1])
    with pytest.raises(ConcurrentWriteError):
        store.append("s", CONVERSATION[1:2], expected_last_entry=0)


def test_an_append_inside_a_caller_transaction_rolls_back_with_it(store: SessionStore) -> None:
    with pytest.raises(RuntimeError, match="caller failed"), transaction(store.conn) as conn:
        store.append("s", CONVERSATION[:2], conn_tx=conn)
        raise RuntimeError("caller failed")
    assert store.load("s") == []
    with transaction(store.conn) as conn:
        store.append("s", CONVERSATION[:2], conn_tx=conn)
    assert store.load("s") == CONVERSATION[:2]


def test_load_with_head_reads_one_snapshot(store: SessionStore) -> None:
    head = store.append("s", CONVERSATION)
    assert store.load_with_head("s") == (CONVERSATION, head)
