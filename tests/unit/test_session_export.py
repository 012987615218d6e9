"""Session export (JSON Lines of entries), checked import, and fork."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from heron._support.clock import FakeClock
from heron.messages import (
    AssistantMessage,
    Message,
    ToolCallPart,
    ToolResultMessage,
    UserMessage,
)
from heron.sessions import SessionStore, SqliteSessionStore
from heron.sessions.export import (
    SessionImportError,
    export_lines,
    fork_session,
    import_session,
    parse_export,
)
from support.clock import ticking

CONVERSATION: list[Message] = [
    UserMessage(content="list the files"),
    AssistantMessage(
        text="Looking.",
        tool_calls=(ToolCallPart(id="c1", name="ls", arguments={"path": "."}),),
    ),
    ToolResultMessage(call_id="c1", name="ls", content="a.txt\nb.txt"),
    AssistantMessage(text="Two files — a.txt and b.txt."),
]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SessionStore]:
    sessions = SqliteSessionStore(
        SqliteSessionStore.open(tmp_path).conn, now=ticking(FakeClock(), 1.5)
    )
    yield sessions
    sessions.close()


def exported(store: SessionStore, session: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in export_lines(store.entries(session))]


def lines_of(rows: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(row) + "\n" for row in rows]


def test_an_export_imports_back_with_the_same_messages_and_timestamps(
    store: SessionStore, tmp_path: Path
) -> None:
    store.append("other", [UserMessage(content="ids are shared by all sessions")])
    for message in CONVERSATION:
        store.append("s", [message])
    lines = list(export_lines(store.entries("s")))
    assert all(line.endswith("\n") and "\n" not in line[:-1] for line in lines)

    other_db = SqliteSessionStore.open(tmp_path / "elsewhere")
    try:
        other_db.append("unrelated", [UserMessage(content="taken ids")] * 3)
        written = import_session(other_db, parse_export(lines))
        copied = other_db.entries("s")
    finally:
        other_db.close()

    original = store.entries("s")
    assert (written.session, written.entries) == ("s", 4)
    assert [e.message for e in copied] == [e.message for e in original]
    assert [e.timestamp for e in copied] == [e.timestamp for e in original]
    assert [e.entry_id for e in copied] == list(range(4, 8))  # new ids in the new database
    assert [e.parent_id for e in copied] == [None, 4, 5, 6]


def test_importing_the_same_export_twice_is_refused(store: SessionStore) -> None:
    store.append("s", CONVERSATION)
    parsed = parse_export(export_lines(store.entries("s")))

    with pytest.raises(SessionImportError, match="session 's' already exists"):
        import_session(store, parsed)
    import_session(store, parsed, name="copy")
    with pytest.raises(SessionImportError, match=r"session 'copy' already exists \(4 entries\)"):
        import_session(store, parsed, name="copy")
    assert len(store.entries("copy")) == 4


def test_a_duplicated_entry_id_is_refused_naming_both_lines(store: SessionStore) -> None:
    store.append("s", CONVERSATION[:2])
    rows = exported(store, "s")
    with pytest.raises(SessionImportError, match="line 3: entry id 2 clashes with line 2"):
        parse_export(lines_of([*rows, rows[1]]))


def test_a_broken_parent_chain_is_refused(store: SessionStore) -> None:
    store.append("s", CONVERSATION)
    rows = exported(store, "s")
    del rows[1]
    with pytest.raises(SessionImportError, match="line 2: parent_id 2 does not name the entry"):
        parse_export(lines_of(rows))
    with pytest.raises(SessionImportError, match="line 1: the first entry has parent_id 2"):
        parse_export(lines_of(rows[1:]))


def test_entries_out_of_order_are_refused(store: SessionStore) -> None:
    store.append("s", CONVERSATION[:2])
    rows = exported(store, "s")
    with pytest.raises(SessionImportError, match="line 2: entry id 1 comes after 2"):
        parse_export(lines_of([{**rows[1], "parent_id": None}, {**rows[0], "parent_id": 2}]))


def test_a_file_mixing_sessions_is_refused(store: SessionStore) -> None:
    store.append("s", CONVERSATION[:2])
    rows = exported(store, "s")
    rows[1]["session"] = "t"
    with pytest.raises(SessionImportError, match="line 2: entry of session 't'"):
        parse_export(lines_of(rows))


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"message": {"role": "robot", "content": "x"}}, "line 1: invalid message"),
        ({"message": {"role": "user"}}, r"line 1: invalid message \(user.content: Field required"),
        ({"entry_id": 0}, "line 1: entry_id must be a positive integer"),
        ({"entry_id": True}, "line 1: entry_id must be a positive integer"),
        ({"timestamp": "yesterday"}, "line 1: timestamp must be a number"),
        ({"session": ""}, "line 1: session must be a non-empty string"),
        ({"extra": 1}, "line 1: unknown extra"),
    ],
)
def test_a_malformed_line_is_refused_saying_what_is_wrong(
    store: SessionStore, change: dict[str, Any], problem: str
) -> None:
    store.append("s", CONVERSATION[:1])
    with pytest.raises(SessionImportError, match=problem):
        parse_export(lines_of([{**exported(store, "s")[0], **change}]))


def test_lines_that_are_not_json_objects_and_empty_files_are_refused() -> None:
    with pytest.raises(SessionImportError, match="line 2: not JSON"):
        parse_export(["\n", "{nope\n"])
    with pytest.raises(SessionImportError, match="line 1: not a JSON object"):
        parse_export(["[1, 2]\n"])
    with pytest.raises(SessionImportError, match="line 1: missing entry_id, parent_id"):
        parse_export(['{"session": "s", "timestamp": 1, "message": {}}\n'])
    with pytest.raises(SessionImportError, match="holds no entries"):
        parse_export(["\n"])


def test_a_history_no_provider_would_accept_is_refused(store: SessionStore) -> None:
    store.append("s", [UserMessage(content="hi"), CONVERSATION[2]])
    with pytest.raises(SessionImportError, match="tool result for call 'c1', which was never"):
        parse_export(export_lines(store.entries("s")))


def test_a_session_exported_mid_turn_imports_and_is_left_for_resume_to_repair(
    store: SessionStore,
) -> None:
    store.append("s", CONVERSATION[:2])
    written = import_session(store, parse_export(export_lines(store.entries("s"))), name="t")
    assert written.entries == 2
    assert store.load("t") == CONVERSATION[:2]


def test_a_fork_copies_up_to_an_entry_and_leaves_the_source_alone(store: SessionStore) -> None:
    store.append("s", CONVERSATION)
    source = store.entries("s")

    written = fork_session(store, "s", "t", at=source[1].entry_id)

    assert store.entries("s") == source
    forked = store.entries("t")
    assert [e.message for e in forked] == CONVERSATION[:2]
    assert [e.timestamp for e in forked] == [e.timestamp for e in source[:2]]
    assert (written.first_entry, written.last_entry) == (forked[0].entry_id, forked[1].entry_id)
    fork_session(store, "s", "whole")
    assert store.load("whole") == CONVERSATION


def test_a_fork_refuses_an_unknown_source_entry_or_an_existing_target(store: SessionStore) -> None:
    store.append("s", CONVERSATION)
    store.append("taken", [UserMessage(content="mine")])
    with pytest.raises(SessionImportError, match="no session named 'nope'"):
        fork_session(store, "nope", "t")
    with pytest.raises(SessionImportError, match=r"entry 99 is not in session 's' \(its entries"):
        fork_session(store, "s", "t", at=99)
    with pytest.raises(SessionImportError, match="session 'taken' already exists"):
        fork_session(store, "s", "taken")
    assert store.load("taken") == [UserMessage(content="mine")]
    assert store.load("t") == []
