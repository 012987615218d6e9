"""The SQLite session store: an append joins a transaction the bus opened on its connection."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from heron._support.state import transaction
from heron.messages import AssistantMessage, UserMessage
from heron.sessions import SqliteSessionStore

MESSAGES = [UserMessage(content="hi"), AssistantMessage(text="hello")]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteSessionStore]:
    sessions = SqliteSessionStore.open(tmp_path)
    yield sessions
    sessions.close()


def test_an_append_inside_a_caller_transaction_rolls_back_with_it(
    store: SqliteSessionStore,
) -> None:
    with pytest.raises(RuntimeError, match="caller failed"), transaction(store.conn) as conn:
        store.append_in(conn, "s", MESSAGES)
        raise RuntimeError("caller failed")
    assert store.load("s") == []
    with transaction(store.conn) as conn:
        store.append_in(conn, "s", MESSAGES)
    assert store.load("s") == MESSAGES


def test_a_history_reads_back_after_reopening_the_database(
    store: SqliteSessionStore, tmp_path: Path
) -> None:
    store.append("s", MESSAGES)
    reopened = SqliteSessionStore.open(tmp_path)
    try:
        assert reopened.load("s") == MESSAGES
    finally:
        reopened.close()
