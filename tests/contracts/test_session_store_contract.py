"""`SessionStore`: append-only entries, exact round trips, refused concurrent writers, new
sessions written whole."""

from __future__ import annotations

import pytest

from heron.messages import (
    AssistantMessage,
    Message,
    ToolCallPart,
    ToolResultMessage,
    UserMessage,
)
from heron.sessions.postgres_store import PostgresSessionStore
from heron.sessions.sqlite_store import SqliteSessionStore
from heron.sessions.store import (
    ConcurrentWriteError,
    CorruptEntryError,
    SessionExistsError,
    SessionStore,
)
from support.stores import StoreBackend

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
def store(backend: StoreBackend) -> SessionStore:
    return backend.sessions()


def test_a_history_reads_back_exactly_through_another_store(
    store: SessionStore, backend: StoreBackend
) -> None:
    head = store.append("s1", CONVERSATION[:2])
    store.append("s1", CONVERSATION[2:], expected_last_entry=head)
    assert backend.sessions().load("s1") == CONVERSATION


def test_entries_chain_to_their_parent_in_the_same_session(store: SessionStore) -> None:
    store.append("a", CONVERSATION[:2])
    store.append("b", CONVERSATION[:1])
    store.append("a", CONVERSATION[2:3])
    entries = store.entries("a")
    assert [e.message for e in entries] == CONVERSATION[:3]
    assert {e.session for e in entries} == {"a"}
    assert entries[0].parent_id is None
    assert [e.parent_id for e in entries[1:]] == [e.entry_id for e in entries[:-1]]
    assert store.head("a") == entries[-1].entry_id
    assert store.head("unknown") == 0 and store.load("unknown") == []
    assert store.entries("unknown") == []


def test_entry_ids_grow_across_the_whole_store(store: SessionStore) -> None:
    first = store.append("a", CONVERSATION[:1])
    second = store.append("b", CONVERSATION[:1])
    third = store.append("a", CONVERSATION[1:2])
    assert 0 < first < second < third


def test_appending_nothing_keeps_the_head(store: SessionStore) -> None:
    head = store.append("s", CONVERSATION[:1])
    assert store.append("s", [], expected_last_entry=head) == head
    assert store.append("empty", []) == 0


def test_sessions_are_listed_most_recently_written_first(store: SessionStore) -> None:
    store.append("old", CONVERSATION[:1])
    head = store.append("new", CONVERSATION[:3])
    listed = store.list_sessions()
    assert [(i.session, i.entries) for i in listed] == [("new", 3), ("old", 1)]
    assert listed[0].last_entry == head
    assert listed[0].updated >= listed[1].updated > 0


def test_a_writer_with_a_stale_head_is_refused_and_nothing_is_written(
    store: SessionStore, backend: StoreBackend
) -> None:
    other = backend.sessions()
    mine = store.append("s", CONVERSATION[:1], expected_last_entry=0)
    theirs_view = other.head("s")
    mine = store.append("s", CONVERSATION[1:3], expected_last_entry=mine)
    with pytest.raises(ConcurrentWriteError) as refused:
        other.append("s", [UserMessage(content="interleaved?")], expected_last_entry=theirs_view)
    assert (refused.value.session, refused.value.expected, refused.value.actual) == (
        "s",
        theirs_view,
        mine,
    )
    assert store.load("s") == CONVERSATION[:3]


def test_expecting_an_empty_session_refuses_one_that_has_entries(store: SessionStore) -> None:
    store.append("s", CONVERSATION[:1])
    with pytest.raises(ConcurrentWriteError):
        store.append("s", CONVERSATION[1:2], expected_last_entry=0)
    assert store.load("s") == CONVERSATION[:1]


def test_load_with_head_reads_one_snapshot(store: SessionStore) -> None:
    head = store.append("s", CONVERSATION)
    assert store.load_with_head("s") == (CONVERSATION, head)
    assert store.load_with_head("unknown") == ([], 0)


def test_create_writes_a_new_session_with_its_timestamps(store: SessionStore) -> None:
    items = [(1_700_000_000.5 + n, m) for n, m in enumerate(CONVERSATION[:3])]
    first, last = store.create("copy", items)
    entries = store.entries("copy")
    assert [(e.timestamp, e.message) for e in entries] == items
    assert (entries[0].entry_id, entries[-1].entry_id) == (first, last)
    assert [e.parent_id for e in entries] == [None, first, entries[1].entry_id]
    assert store.create("nothing", []) == (0, 0)


def test_create_refuses_a_session_that_has_entries_and_writes_nothing(
    store: SessionStore,
) -> None:
    store.append("taken", CONVERSATION[:2])
    with pytest.raises(SessionExistsError) as refused:
        store.create("taken", [(1.0, UserMessage(content="mixed in?"))])
    assert (refused.value.session, refused.value.entries) == ("taken", 2)
    assert store.load("taken") == CONVERSATION[:2]


def test_load_tail_reads_the_last_round_and_the_head(
    store: SessionStore, backend: StoreBackend
) -> None:
    calls = tuple(ToolCallPart(id=f"c{i}", name="t", arguments={}) for i in range(40))
    results = [ToolResultMessage(call_id=f"c{i}", name="t", content="ok") for i in range(37)]
    head = store.append(
        "s", [*CONVERSATION, UserMessage(content="go"), AssistantMessage(tool_calls=calls)]
    )
    head = store.append("s", results, expected_last_entry=head)
    # The last message that is not a tool result, and every result after it, however many.
    tail, tail_head = backend.sessions().load_tail("s")
    assert tail == [AssistantMessage(tool_calls=calls), *results] and tail_head == head
    # A history ending in a final answer: its tail is that answer.
    store.append("done", CONVERSATION)
    assert store.load_tail("done") == (CONVERSATION[-1:], store.head("done"))
    assert store.load_tail("unknown") == ([], 0)


def test_load_tail_of_a_history_of_results_only_is_the_whole_history(
    store: SessionStore,
) -> None:
    results = [ToolResultMessage(call_id=f"r{i}", name="t", content="ok") for i in range(20)]
    head = store.append("orphans", results)
    assert store.load_tail("orphans") == (results, head)


def _damage(store: SessionStore, entry_id: int, body: str) -> None:
    """Overwrite a stored row from outside, as another program on the database could."""
    sql = "UPDATE session_entries SET message = {p} WHERE entry_id = {p}"
    if isinstance(store, SqliteSessionStore):
        store.conn.execute(sql.format(p="?"), (body, entry_id))
    else:
        assert isinstance(store, PostgresSessionStore)
        with store.pool.connection() as conn:
            conn.execute(sql.format(p="%s"), (body, entry_id))


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ('{"role": "user", "content": ["sk-1"]}', r"user\.content: Input should be a valid string"),
        ('{"role": "user", "content": "cut', r"message: Invalid JSON"),
        ('{"role": "robot", "content": "hi"}', r"message: Input tag 'robot' .* does not match"),
        # Two messages in one row (rows joined into one array would parse as two).
        ('{"role": "user", "content": "a"}, {"role": "system", "content": "b"}', "Invalid JSON"),
    ],
    ids=["wrong type", "cut short", "unknown role", "two messages"],
)
def test_a_stored_entry_that_is_not_one_valid_message_is_refused_by_every_read(
    store: SessionStore, backend: StoreBackend, body: str, reason: str
) -> None:
    head = store.append("s", CONVERSATION)
    _damage(store, head - 1, body)
    reader = backend.sessions()
    expected = rf"stored entry {head - 1} of session 's' is not a valid message \(.*{reason}"
    for read in (reader.load, reader.load_with_head, reader.entries):
        with pytest.raises(CorruptEntryError, match=expected) as refused:
            read("s")
        assert (refused.value.session, refused.value.entry_id) == ("s", head - 1)
        assert "sk-1" not in str(refused.value)  # the stored input is not echoed
    _damage(store, head, body)  # the tail: the last entry
    with pytest.raises(CorruptEntryError, match=f"stored entry {head} "):
        reader.load_tail("s")
