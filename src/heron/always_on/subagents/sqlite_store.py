"""`SqliteSubagentStore`: sub-agent records in heron's state database (table `subagents`)."""

from __future__ import annotations

import builtins
import json
import sqlite3
from pathlib import Path
from typing import Any

from heron._support.state import open_db, sqlite_errors, transaction
from heron._support.vocabulary import TERMINAL_STATUSES, Outcome, Status, advance_status
from heron.always_on.subagents.store import SubagentRecord, Usage

_SCHEMA = """
CREATE TABLE IF NOT EXISTS subagents (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    agent TEXT NOT NULL,
    task TEXT NOT NULL,
    mode TEXT NOT NULL,
    parent TEXT,
    root_session TEXT NOT NULL,
    parent_session TEXT NOT NULL,
    call_id TEXT NOT NULL,
    depth INTEGER NOT NULL,
    status TEXT NOT NULL,
    outcome TEXT,
    result TEXT NOT NULL,
    error TEXT NOT NULL,
    usage TEXT NOT NULL,
    budget TEXT NOT NULL,
    created_at REAL NOT NULL,
    ended_at REAL,
    delivered INTEGER NOT NULL,
    owner INTEGER NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS subagents_root ON subagents (root_session, status);
"""
_COLUMNS = (
    "id, agent, task, mode, parent, root_session, parent_session, call_id, depth, status, "
    "outcome, result, error, usage, budget, created_at, ended_at, delivered, owner"
)
_FINISHED = ", ".join(f"'{s}'" for s in sorted(TERMINAL_STATUSES))


def _record(row: tuple[Any, ...]) -> SubagentRecord:
    (
        id_,
        agent,
        task,
        mode,
        parent,
        root,
        parent_session,
        call_id,
        depth,
        status,
        outcome,
        result,
        error,
        usage,
        budget,
        created,
        ended,
        delivered,
        owner,
    ) = row
    return SubagentRecord(
        id=id_,
        agent=agent,
        task=task,
        mode=mode,
        parent=parent,
        root_session=root,
        parent_session=parent_session,
        call_id=call_id,
        depth=depth,
        status=status,
        outcome=outcome,
        result=result,
        error=error,
        usage=Usage.from_data(json.loads(usage)),
        budget=json.loads(budget),
        created_at=created,
        ended_at=ended,
        delivered=bool(delivered),
        owner=owner,
    )


def _row(r: SubagentRecord) -> tuple[Any, ...]:
    """A record as the values of `_COLUMNS` (the PostgreSQL store's encoding too)."""
    return (
        r.id,
        r.agent,
        r.task,
        r.mode,
        r.parent,
        r.root_session,
        r.parent_session,
        r.call_id,
        r.depth,
        r.status,
        r.outcome,
        r.result,
        r.error,
        json.dumps(r.usage.to_data()),
        json.dumps(dict(r.budget)),
        r.created_at,
        r.ended_at,
        int(r.delivered),
        r.owner,
    )


@sqlite_errors
class SqliteSubagentStore:
    """`SubagentStore` on one SQLite connection (explicit transactions)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        conn.isolation_level = None
        conn.executescript(_SCHEMA)
        self._conn = conn

    @classmethod
    def open_dir(cls, state_dir: Path) -> SqliteSubagentStore:
        """A store on `<state_dir>/heron.db`; close it with `close()`."""
        return cls(open_db(state_dir))

    def close(self) -> None:
        self._conn.close()

    def add(self, record: SubagentRecord) -> None:
        with transaction(self._conn) as conn:
            conn.execute(
                f"INSERT INTO subagents ({_COLUMNS}) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                _row(record),
            )

    def get(self, subagent_id: str) -> SubagentRecord | None:
        row = self._conn.execute(
            f"SELECT {_COLUMNS} FROM subagents WHERE id = ?", (subagent_id,)
        ).fetchone()
        return None if row is None else _record(row)

    def list(
        self, *, root_session: str | None = None, active_only: bool = False
    ) -> builtins.list[SubagentRecord]:
        where, args = [], []
        if root_session is not None:
            where.append("root_session = ?")
            args.append(root_session)
        if active_only:
            where.append(f"status NOT IN ({_FINISHED})")
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM subagents{clause} ORDER BY seq", args
        ).fetchall()
        return [_record(r) for r in rows]

    def advance(self, subagent_id: str, status: Status) -> SubagentRecord | None:
        with transaction(self._conn) as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM subagents WHERE id = ?", (subagent_id,)
            ).fetchone()
            if row is None:
                return None
            record = _record(row)
            if record.finished:
                return record
            advance_status(record.status, status)
            conn.execute("UPDATE subagents SET status = ? WHERE id = ?", (status, subagent_id))
        return self.get(subagent_id)

    def finish(
        self,
        subagent_id: str,
        *,
        status: Status,
        outcome: Outcome | None,
        result: str,
        error: str,
        usage: Usage,
        ended_at: float,
    ) -> tuple[SubagentRecord, bool] | None:
        if status not in TERMINAL_STATUSES:
            raise ValueError(f"{status!r} is not a finished status")
        with transaction(self._conn) as conn:
            cur = conn.execute(
                "UPDATE subagents SET status = ?, outcome = ?, result = ?, error = ?, "
                f"usage = ?, ended_at = ? WHERE id = ? AND status NOT IN ({_FINISHED})",
                (
                    status,
                    outcome,
                    result,
                    error,
                    json.dumps(usage.to_data()),
                    ended_at,
                    subagent_id,
                ),
            )
        record = self.get(subagent_id)
        return None if record is None else (record, cur.rowcount == 1)

    def record_usage(self, subagent_id: str, usage: Usage) -> None:
        with transaction(self._conn) as conn:
            conn.execute(
                f"UPDATE subagents SET usage = ? WHERE id = ? AND status NOT IN ({_FINISHED})",
                (json.dumps(usage.to_data()), subagent_id),
            )

    def claim_delivery(self, subagent_id: str) -> bool:
        with transaction(self._conn) as conn:
            cur = conn.execute(
                "UPDATE subagents SET delivered = 1 WHERE id = ? AND delivered = 0 "
                f"AND status IN ({_FINISHED})",
                (subagent_id,),
            )
        return cur.rowcount == 1

    def request_cancel(self, subagent_id: str) -> bool:
        with transaction(self._conn) as conn:
            cur = conn.execute(
                "UPDATE subagents SET cancel_requested = 1 WHERE id = ? "
                f"AND status NOT IN ({_FINISHED})",
                (subagent_id,),
            )
        return cur.rowcount == 1

    def cancel_requests(self) -> builtins.list[str]:
        rows = self._conn.execute(
            "SELECT id FROM subagents WHERE cancel_requested = 1 "
            f"AND status NOT IN ({_FINISHED}) ORDER BY seq"
        ).fetchall()
        return [r[0] for r in rows]
