"""`SubagentStore`: records read back whole; a finished record is never changed again; a
result is claimed for delivery once; cancels requested from another process are seen."""

from __future__ import annotations

import pytest

from heron._support.vocabulary import StatusError
from heron.always_on.subagents.store import SubagentRecord, SubagentStore, Usage
from support.stores import StoreBackend


@pytest.fixture
def store(backend: StoreBackend) -> SubagentStore:
    return backend.subagents()


def _record(subagent_id: str, parent: str | None = None) -> SubagentRecord:
    return SubagentRecord(
        id=subagent_id,
        agent="helper",
        task="look",
        mode="async",
        parent=parent,
        root_session="main",
        parent_session="main" if parent is None else f"main/agent/{parent}",
        call_id=f"c_{subagent_id}",
        depth=1 if parent is None else 2,
        budget={"model_calls": 3},
        created_at=1.0,
        owner=4242,
    )


def _finish(store: SubagentStore, subagent_id: str, status: str = "completed") -> bool:
    ended = store.finish(
        subagent_id,
        status=status,  # type: ignore[arg-type]
        outcome="empty" if status == "completed" else None,
        result="",
        error="",
        usage=Usage(model_calls=2, input_tokens=10),
        ended_at=2.0,
    )
    assert ended is not None
    return ended[1]


def test_a_record_round_trips_through_another_store(
    store: SubagentStore, backend: StoreBackend
) -> None:
    store.add(_record("a"))
    store.add(_record("b", parent="a"))
    again = backend.subagents()
    assert again.get("a") == _record("a")
    assert [r.id for r in again.list(root_session="main")] == ["a", "b"]
    assert again.get("b").session == "main/agent/b"  # type: ignore[union-attr]
    assert again.get("missing") is None


def test_a_finished_record_is_never_downgraded_or_finished_again(store: SubagentStore) -> None:
    store.add(_record("a"))
    assert store.advance("a", "working").status == "working"  # type: ignore[union-attr]
    assert _finish(store, "a", "cancelled") is True
    assert _finish(store, "a", "completed") is False
    assert store.advance("a", "working").status == "cancelled"  # type: ignore[union-attr]
    record = store.get("a")
    assert record is not None and (record.status, record.usage.model_calls) == ("cancelled", 2)
    assert store.list(active_only=True) == []


def test_an_active_record_refuses_an_unknown_status(store: SubagentStore) -> None:
    store.add(_record("a"))
    with pytest.raises(StatusError):
        store.advance("a", "sleeping")  # type: ignore[arg-type]


def test_a_result_is_claimed_for_delivery_once_and_only_when_finished(
    store: SubagentStore, backend: StoreBackend
) -> None:
    store.add(_record("a"))
    assert store.claim_delivery("a") is False  # still running: nothing to deliver
    _finish(store, "a")
    assert store.claim_delivery("a") is True
    assert backend.subagents().claim_delivery("a") is False
    assert store.get("a").delivered is True  # type: ignore[union-attr]


def test_a_cancel_request_is_seen_by_another_store_until_the_record_ends(
    store: SubagentStore, backend: StoreBackend
) -> None:
    store.add(_record("a"))
    store.add(_record("b"))
    assert backend.subagents().request_cancel("b") is True
    assert store.cancel_requests() == ["b"]
    _finish(store, "b", "cancelled")
    assert store.cancel_requests() == []
    assert store.request_cancel("b") is False


def test_usage_is_recorded_while_running_and_frozen_once_finished(
    store: SubagentStore, backend: StoreBackend
) -> None:
    store.add(_record("a"))
    store.record_usage("a", Usage(model_calls=1, output_tokens=7))
    assert backend.subagents().get("a").usage == Usage(model_calls=1, output_tokens=7)  # type: ignore[union-attr]
    _finish(store, "a")
    store.record_usage("a", Usage(model_calls=99))
    assert store.get("a").usage.model_calls == 2  # type: ignore[union-attr]
