"""A SQLite store names no back end to its callers: its failures are `StoreError`s."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from heron._support.state import open_db
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.audit.sqlite_store import SqliteApprovalAudit
from heron.errors import HeronError, StoreError
from heron.turn.approval_audit import AuditRecord


def test_a_failing_sync_method_raises_store_error_with_the_sqlite_error_as_cause(
    tmp_path: Path,
) -> None:
    conn = open_db(tmp_path)
    audit = SqliteApprovalAudit(conn)
    conn.close()
    with pytest.raises(StoreError, match=r"SqliteApprovalAudit\.list") as failed:
        audit.list()
    assert isinstance(failed.value.__cause__, sqlite3.Error)
    assert isinstance(failed.value, HeronError)
    with pytest.raises(StoreError):
        audit.record(
            AuditRecord(
                timestamp="2024-03-15T14:30:00Z",
                tool="shell",
                arguments_summary="",
                decision="no",
                decided_by="operator:cli",
                request_id="req-1",
            )
        )


async def test_a_failing_async_method_raises_store_error(tmp_path: Path) -> None:
    bus = SqliteBusStore.open(tmp_path)
    bus.close()
    with pytest.raises(StoreError, match=r"SqliteBusStore\.publish"):
        await bus.publish(
            BusEvent(kind="user.input", source="user", channel="cli", content=EventContent())
        )


def test_errors_of_the_contract_are_not_translated(tmp_path: Path) -> None:
    with closing(open_db(tmp_path)) as conn, pytest.raises(ValueError, match="limit") as refused:
        SqliteApprovalAudit(conn).list(limit=-1)
    assert not isinstance(refused.value, StoreError)
