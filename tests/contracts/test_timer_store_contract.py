"""`TimerStore`: timers per session, field updates, what is due and when the next one is."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from heron.always_on.triggers.timers import TimerRecord, TimerStore
from support.stores import StoreBackend


@pytest.fixture
def store(backend: StoreBackend) -> TimerStore:
    return backend.timers()


def timer(
    timer_id: str, next_fire: float | None, *, session: str = "main", **fields: Any
) -> TimerRecord:
    values: dict[str, Any] = {
        "id": timer_id,
        "session": session,
        "call_id": f"call-{timer_id}",
        "message": f"wake up ({timer_id})",
        "kind": "every",
        "every_s": 60.0,
        "cron": None,
        "tz": "Europe/Berlin",
        "misfire": "catch_up",
        "next_fire": next_fire,
        "fires": 0,
        "missed": 0,
        "state": "active" if next_fire is not None else "done",
        "created_at": 10.0,
        "last_fired": None,
    }
    return TimerRecord(**(values | fields))


def test_a_timer_reads_back_whole_through_another_store(
    store: TimerStore, backend: StoreBackend
) -> None:
    cron = timer("tmr-1", 100.0, kind="cron", every_s=None, cron="0 9 * * 1-5", last_fired=40.0)
    store.insert(cron)
    assert backend.timers().get("main", "tmr-1") == cron
    assert store.get("other", "tmr-1") is None
    assert store.get("main", "tmr-2") is None


def test_update_changes_the_named_fields_and_returns_the_stored_timer(store: TimerStore) -> None:
    store.insert(timer("tmr-1", 100.0))
    changed = store.update("tmr-1", next_fire=160.0, fires=1, last_fired=100.0)
    assert changed == dataclasses.replace(
        timer("tmr-1", 100.0), next_fire=160.0, fires=1, last_fired=100.0
    )
    assert store.get("main", "tmr-1") == changed
    done = store.update("tmr-1", state="cancelled", next_fire=None)
    assert (done.state, done.next_fire) == ("cancelled", None)


def test_update_refuses_an_unknown_timer_or_field(store: TimerStore) -> None:
    store.insert(timer("tmr-1", 100.0))
    with pytest.raises(KeyError):
        store.update("tmr-9", fires=1)
    with pytest.raises(ValueError, match="colour"):
        store.update("tmr-1", fires=1, colour="red")
    assert store.get("main", "tmr-1") == timer("tmr-1", 100.0)


def test_timers_are_listed_soonest_first_with_the_finished_last(store: TimerStore) -> None:
    store.insert(timer("late", 300.0))
    store.insert(timer("over", None))
    store.insert(timer("soon", 100.0))
    store.insert(timer("elsewhere", 50.0, session="other"))
    assert [t.id for t in store.timers("main")] == ["soon", "late"]
    assert [t.id for t in store.timers("main", active_only=False)] == ["soon", "late", "over"]
    assert store.timers("nobody") == []


def test_due_active_timers_and_the_next_fire(store: TimerStore) -> None:
    store.insert(timer("b", 200.0))
    store.insert(timer("a", 100.0))
    store.insert(timer("c", 300.0))
    store.insert(timer("cancelled", 50.0, state="cancelled"))
    store.insert(timer("elsewhere", 10.0, session="other"))
    assert [t.id for t in store.due("main", 200.0)] == ["a", "b"]
    assert store.due("main", 99.0) == []
    assert store.next_fire("main") == 100.0
    assert store.count_active("main") == 3
    assert store.next_fire("nobody") is None and store.count_active("nobody") == 0
