"""`ExecutionStore`: a row per executed call, completed when it ends, `lost` when its process
died first, queried by tool, session and start time."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from heron.audit.executions import Execution, ExecutionStore
from support.stores import StoreBackend


@pytest.fixture
def store(backend: StoreBackend) -> ExecutionStore:
    return backend.executions()


def started(
    call_id: str, *, tool: str = "look", session: str | None = "s1", at: float = 100.0
) -> Execution:
    return Execution(
        started=at,
        ended=None,
        tool=tool,
        call_id=call_id,
        session=session,
        turn_id="turn-1",
        agent="gardener",
        parent_agent="head gardener",
        channel="cli",
        operator="alice",
        approved_by="operator:cli",
        owner="user",
        why="Checking the garden.",
        arguments='{"place": "garden"}',
        status="running",
        success=None,
        duration_ms=None,
        result=None,
    )


def test_a_row_is_running_until_its_call_ends(store: ExecutionStore, backend: StoreBackend) -> None:
    row = store.start(started("k1"))
    assert backend.executions().query() == [started("k1")]
    store.end(row, ended=100.25, status="ok", success=True, duration_ms=250.0, result="a tree")
    assert backend.executions().query() == [
        dataclasses.replace(
            started("k1"),
            ended=100.25,
            status="ok",
            success=True,
            duration_ms=250.0,
            result="a tree",
        )
    ]


def test_a_failed_call_ends_unsuccessful(store: ExecutionStore) -> None:
    row = store.start(started("k1"))
    store.end(row, ended=101.0, status="error", success=False, duration_ms=None, result=None)
    [done] = store.query()
    assert (done.status, done.success, done.duration_ms, done.result) == (
        "error",
        False,
        None,
        None,
    )


def test_rows_are_told_apart_by_the_id_start_returns(store: ExecutionStore) -> None:
    first = store.start(started("k1"))
    second = store.start(started("k1"))  # the same call id in another turn
    assert first != second
    store.end(second, ended=2.0, status="ok", success=True, duration_ms=1.0, result="")
    assert [r.status for r in store.query()] == ["running", "ok"]


def test_mark_lost_touches_only_running_rows_of_that_session_and_those_calls(
    store: ExecutionStore,
) -> None:
    done = store.start(started("k1"))
    store.end(done, ended=1.0, status="ok", success=True, duration_ms=1.0, result="")
    store.start(started("k2"))
    store.start(started("k3"))
    store.start(started("k2", session="s2"))
    assert store.mark_lost("s1", ["k1", "k2", "k9"]) == 1
    assert [(r.session, r.call_id, r.status, r.success) for r in store.query()] == [
        ("s1", "k1", "ok", True),
        ("s1", "k2", "lost", False),
        ("s1", "k3", "running", None),
        ("s2", "k2", "running", None),
    ]
    assert store.mark_lost("s1", []) == 0


def test_queries_filter_by_tool_session_and_start_time_and_keep_the_latest(
    store: ExecutionStore,
) -> None:
    for number, (session, name, at) in enumerate(
        [("a", "look", 100.0), ("a", "cut", 200.0), ("b", "look", 300.0), ("a", "look", 400.0)]
    ):
        row = store.start(started(f"c{number}", tool=name, session=session, at=at))
        store.end(row, ended=at + 1, status="ok", success=True, duration_ms=1.0, result="")

    def calls(**filters: Any) -> list[tuple[str | None, str, float]]:
        return [(r.session, r.tool, r.started) for r in store.query(**filters)]

    assert calls(tool="look") == [("a", "look", 100.0), ("b", "look", 300.0), ("a", "look", 400.0)]
    assert calls(session="a", tool="look") == [("a", "look", 100.0), ("a", "look", 400.0)]
    assert calls(since=250.0) == [("b", "look", 300.0), ("a", "look", 400.0)]
    assert calls(since=300.0, tool="look") == [("b", "look", 300.0), ("a", "look", 400.0)]
    assert calls(limit=1) == [("a", "look", 400.0)]
    assert calls(limit=0) == []
    assert store.query(session="nobody") == []
    with pytest.raises(ValueError, match="limit must not be negative"):
        store.query(limit=-1)
