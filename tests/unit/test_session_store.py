"""The SQLite session store: an append joins a transaction the bus opened on its connection."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from heron._support.state import transaction
from heron.messages import AssistantMessage, UserMessage
from heron.sessions import SqliteSessionStore
from heron.sessions.store import CorruptEntryError

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


def test_the_cyclic_collector_is_paused_while_a_history_is_read(
    store: SqliteSessionStore,
) -> None:
    store.append("s", [UserMessage(content=f"message {i}") for i in range(3000)])
    reads: dict[str, list[int]] = {"load": [], "entries": []}
    reading: list[int] | None = None

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and reading is not None:
            reading.append(info["generation"])

    gc.callbacks.append(count)
    try:
        reading = reads["load"]
        history = store.load("s")
        reading = reads["entries"]
        entries = store.entries("s")
        reading = None
    finally:
        gc.callbacks.remove(count)
    assert len(history) == len(entries) == 3000
    # Thousands of objects each (one collection per 700 of them unpaused): at most the one
    # collection that runs as the read ends and the collector resumes.
    assert max(map(len, reads.values())) <= 1 and gc.isenabled()


def test_a_failed_read_leaves_the_collector_as_it_was(store: SqliteSessionStore) -> None:
    head = store.append("s", MESSAGES)
    store.conn.execute("UPDATE session_entries SET message = 'x' WHERE entry_id = ?", (head,))
    with pytest.raises(CorruptEntryError):
        store.load("s")
    assert gc.isenabled()
    gc.disable()  # turned off by someone else: a read does not turn it on
    try:
        with pytest.raises(CorruptEntryError):
            store.load("s")
        assert not gc.isenabled()
    finally:
        gc.enable()
