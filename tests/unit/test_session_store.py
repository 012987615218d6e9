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
from heron.sessions.store import CorruptEntryError, reading_history

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


def test_full_collections_are_held_off_while_a_history_is_read(
    store: SqliteSessionStore,
) -> None:
    store.append("s", [UserMessage(content=f"message {i}") for i in range(3000)])
    before = gc.get_threshold()
    reads: dict[str, list[tuple[int, int]]] = {"load": [], "entries": []}
    reading: list[tuple[int, int]] | None = None

    def seen(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and reading is not None:
            reading.append((info["generation"], gc.get_threshold()[2]))

    gc.callbacks.append(seen)
    try:
        reading = reads["load"]
        history = store.load("s")
        reading = reads["entries"]
        entries = store.entries("s")
        reading = None
    finally:
        gc.callbacks.remove(seen)
    assert len(history) == len(entries) == 3000
    for collections in reads.values():
        assert collections  # the young generations are still collected, in small steps
        assert all(generation < 2 and held > before[2] for generation, held in collections)
    assert gc.get_threshold() == before


def test_the_collector_thresholds_come_back_as_they_were_after_any_read(
    store: SqliteSessionStore,
) -> None:
    head = store.append("s", MESSAGES)
    store.conn.execute("UPDATE session_entries SET message = 'x' WHERE entry_id = ?", (head,))
    before = gc.get_threshold()
    gc.set_threshold(500, 5, 7)  # someone else's tuning is kept
    try:
        with pytest.raises(CorruptEntryError):
            store.load("s")
        assert gc.get_threshold() == (500, 5, 7)
        with reading_history():  # readers overlapping: the last one out restores
            with reading_history():
                pass
            assert gc.get_threshold()[:2] == (500, 5) and gc.get_threshold()[2] > 7
        assert gc.get_threshold() == (500, 5, 7)
    finally:
        gc.set_threshold(*before)
