"""`AuditLog` (the engine's approval audit): every decision kept in insertion order, newest
last, by tool, within a limit. The in-memory default and every durable back end pass it."""

from __future__ import annotations

import pytest

from heron.turn.approval_audit import DECISIONS, AuditLog, AuditRecord, MemoryAuditStore
from support.stores import StoreBackend


def make_record(n: int, *, tool: str = "shell", **extra: str | None) -> AuditRecord:
    return AuditRecord(
        timestamp=f"2024-03-15T14:30:{n:02d}.000Z",
        tool=tool,
        arguments_summary=f"command: echo {n}",
        decision="yes",
        decided_by="operator:cli",
        request_id=f"req-{n}",
        **extra,
    )


@pytest.fixture(params=["memory", "durable"])
def store(request: pytest.FixtureRequest, backend: StoreBackend) -> AuditLog:
    return MemoryAuditStore() if request.param == "memory" else backend.approval_audit()


def test_records_are_durable_and_read_back_whole_through_another_store(
    backend: StoreBackend,
) -> None:
    full = make_record(1, turn_id="turn-1", session_id="sess-1", reason="operator typed y")
    store = backend.approval_audit()
    store.record(full)
    store.record(make_record(2))
    assert backend.approval_audit().list() == [full, make_record(2)]


def test_every_decision_kind_round_trips(store: AuditLog) -> None:
    decisions = [
        "yes",
        "always",
        "no",
        "replace",
        "edit",
        "timeout",
        "unavailable",
        "policy_deny",
        "auto",
        "deferred",
    ]
    assert set(decisions) == DECISIONS
    for n, decision in enumerate(decisions):
        store.record(
            AuditRecord(
                timestamp=f"2024-03-15T14:30:{n:02d}Z",
                tool="file_write",
                arguments_summary="path: a.txt",
                decision=decision,  # type: ignore[arg-type]
                decided_by="policy",
                request_id=f"req-{n}",
            )
        )
    assert [r.decision for r in store.list()] == decisions


def test_list_returns_newest_last(store: AuditLog) -> None:
    for n in (3, 1, 2):
        store.record(make_record(n))
    # Insertion order wins over timestamps, which a clock step could put out of order.
    assert [r.request_id for r in store.list()] == ["req-3", "req-1", "req-2"]


def test_limit_keeps_the_most_recent_records(store: AuditLog) -> None:
    for n in range(5):
        store.record(make_record(n))
    assert [r.request_id for r in store.list(limit=2)] == ["req-3", "req-4"]
    assert store.list(limit=0) == []
    assert len(store.list(limit=50)) == 5


def test_default_limit_is_one_hundred(store: AuditLog) -> None:
    for n in range(105):
        store.record(make_record(n % 60))
    assert len(store.list()) == 100


def test_tool_filter_selects_one_tool(store: AuditLog) -> None:
    store.record(make_record(1, tool="shell"))
    store.record(make_record(2, tool="file_write"))
    store.record(make_record(3, tool="shell"))
    store.record(make_record(4, tool="file_write"))
    assert [r.request_id for r in store.list(tool="shell")] == ["req-1", "req-3"]
    assert [r.request_id for r in store.list(tool="file_write", limit=1)] == ["req-4"]
    assert store.list(tool="web_fetch") == []


def test_negative_limit_is_refused(store: AuditLog) -> None:
    store.record(make_record(1))
    with pytest.raises(ValueError, match="limit"):
        store.list(limit=-1)
