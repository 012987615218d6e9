"""The approval audit's record type, its SQLite trail, and the state database it lives in."""

from __future__ import annotations

import sqlite3
import stat
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from heron._support.state import default_state_dir, open_db
from heron.audit.sqlite_store import SqliteApprovalAudit
from heron.turn.approval_audit import AuditRecord, audit_timestamp


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


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    with closing(open_db(tmp_path / "state")) as connection:
        yield connection


def test_database_uses_wal_and_normal_sync_and_foreign_keys(conn: sqlite3.Connection) -> None:
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # synchronous: 0 = OFF, 1 = NORMAL, 2 = FULL
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_database_lives_in_a_private_state_directory(tmp_path: Path) -> None:
    state_dir = tmp_path / "nested" / "state"
    with closing(open_db(state_dir)):
        pass
    assert (state_dir / "heron.db").is_file()
    assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700


def test_store_shares_the_database_with_other_tables(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE other_module (x INTEGER)")
    SqliteApprovalAudit(conn).record(make_record(1))
    SqliteApprovalAudit(conn)  # creating the table again is harmless
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"approval_audit", "other_module"} <= tables
    assert SqliteApprovalAudit(conn).list() == [make_record(1)]


def test_a_record_is_committed_at_once(tmp_path: Path) -> None:
    with closing(open_db(tmp_path)) as writer, closing(open_db(tmp_path)) as reader:
        SqliteApprovalAudit(writer).record(make_record(1))
        assert SqliteApprovalAudit(reader).list() == [make_record(1)]


def test_unknown_decision_is_refused() -> None:
    with pytest.raises(ValueError, match="decision"):
        AuditRecord(
            timestamp="2024-03-15T14:30:00Z",
            tool="shell",
            arguments_summary="",
            decision="maybe",  # type: ignore[arg-type]
            decided_by="operator:cli",
            request_id="req-1",
        )


@pytest.mark.parametrize(
    "timestamp",
    ["2024-03-15T14:30:00+00:00", "2024-03-15 14:30:00Z", "2024-03-15T14:30:00", "yesterday"],
)
def test_timestamp_must_be_rfc3339_utc_with_z(timestamp: str) -> None:
    with pytest.raises(ValueError, match="RFC 3339"):
        AuditRecord(
            timestamp=timestamp,
            tool="shell",
            arguments_summary="",
            decision="no",
            decided_by="operator:cli",
            request_id="req-1",
        )


def test_audit_timestamp_is_utc_with_z() -> None:
    assert audit_timestamp(lambda: 1_710_513_000.25) == "2024-03-15T14:30:00.250Z"


def test_state_dir_prefers_heron_state_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERON_STATE_DIR", "/srv/heron-state")
    monkeypatch.setenv("XDG_STATE_HOME", "/xdg")
    assert default_state_dir() == Path("/srv/heron-state")


def test_state_dir_falls_back_to_xdg_state_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HERON_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", "/xdg")
    assert default_state_dir() == Path("/xdg/heron")


@pytest.mark.parametrize("xdg", [None, "", "relative/state"])
def test_state_dir_defaults_under_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, xdg: str | None
) -> None:
    monkeypatch.delenv("HERON_STATE_DIR", raising=False)
    if xdg is None:
        monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_STATE_HOME", xdg)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_state_dir() == tmp_path / ".local" / "state" / "heron"


def test_the_state_database_is_created_owner_only(tmp_path: Path) -> None:
    import os
    import stat

    from heron._support.state import open_db

    previous = os.umask(0o022)
    try:
        open_db(tmp_path / "state").close()
    finally:
        os.umask(previous)
    mode = stat.S_IMODE((tmp_path / "state" / "heron.db").stat().st_mode)
    assert mode == 0o600
