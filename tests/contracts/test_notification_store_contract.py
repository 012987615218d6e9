"""`NotificationStore`: notifications kept oldest first, with their delivery outcomes and
read state."""

from __future__ import annotations

import time

import pytest

from heron.collaboration.notify import NotificationStore
from support.stores import StoreBackend


@pytest.fixture
def store(backend: StoreBackend) -> NotificationStore:
    return backend.notifications()


def test_a_notification_is_recorded_unread_and_undelivered(
    store: NotificationStore, backend: StoreBackend
) -> None:
    before = time.time()
    note_id = store.record("Build finished.", "normal")
    [note] = backend.notifications().notifications()
    assert (note.id, note.text, note.priority, note.delivered, note.read) == (
        note_id,
        "Build finished.",
        "normal",
        {},
        False,
    )
    assert before - 1 <= note.created <= time.time() + 1


def test_ids_are_new_and_the_order_is_oldest_first(store: NotificationStore) -> None:
    ids = [store.record(f"note {n}", "low") for n in range(3)]
    assert len(set(ids)) == 3
    assert [n.id for n in store.notifications()] == ids


def test_delivery_outcomes_replace_what_was_recorded(store: NotificationStore) -> None:
    note_id = store.record("x", "high")
    store.delivered(note_id, {"console": "ok"})
    store.delivered(note_id, {"console": "ok", "webhook": "failed: HTTP 500"})
    [note] = store.notifications()
    assert note.delivered == {"console": "ok", "webhook": "failed: HTTP 500"}


def test_mark_read_marks_once_and_unread_only_filters(
    store: NotificationStore, backend: StoreBackend
) -> None:
    first, second = store.record("a", "normal"), store.record("b", "urgent")
    assert store.mark_read(first) is True
    assert store.mark_read(first) is False
    assert store.mark_read("no-such-note") is False
    assert [n.id for n in backend.notifications().notifications(unread_only=True)] == [second]
    assert [n.read for n in store.notifications()] == [True, False]
