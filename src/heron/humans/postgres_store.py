"""`PostgresRequestStore`: human requests and "always" rules in the shared PostgreSQL database
(tables `human_requests`, `approval_rules`), stored in the same row encoding as the SQLite
store (`heron.humans.sqlite_store`: JSON text columns, integer flags).

Two workers answering the same request at once cannot both win: `settle` is one conditional
`UPDATE` (the row lock makes the second see the first's answer); `open` holds a
transaction-scoped advisory lock on the request's identity (kind, session, tool, digest), so
two identical requests opened at once become one.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import Any

import psycopg

from heron._support.postgres import Pool, pg_errors, run
from heron._support.vocabulary import ACTIVE_STATUSES, Status
from heron.humans.sqlite_store import (
    _COLUMNS,
    _RULE_COLUMNS,
    _apply_deadline,
    _dump,
    _request,
    _row,
    _rule,
    _rule_row,
)
from heron.humans.store import AlwaysRule, HumanRequest, Settlement, SettleResult
from heron.turn.approval_audit import check_limit

_ACTIVE = sorted(ACTIVE_STATUSES)
_MARKS = ", ".join(["%s"] * len(_COLUMNS.split(", ")))

Conn = psycopg.Connection[Any]


@pg_errors
class PostgresRequestStore:
    """`RequestStore` on a PostgreSQL pool (thread-safe)."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def close(self) -> None:
        self._pool.close()

    # -- requests ---------------------------------------------------------------------------

    def open(self, request: HumanRequest) -> HumanRequest:
        def work(conn: Conn) -> HumanRequest:
            identity = _dump([request.kind, request.session, request.tool, request.digest])
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (identity,))
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM human_requests WHERE kind = %s AND session = %s"
                " AND tool = %s AND digest = %s AND status = ANY(%s)"
                " ORDER BY created_at, seq LIMIT 1",
                (request.kind, request.session, request.tool, request.digest, _ACTIVE),
            ).fetchone()
            if row is None:
                conn.execute(
                    f"INSERT INTO human_requests ({_COLUMNS}) VALUES ({_MARKS})", _row(request)
                )
                return request
            existing = _request(row)
            if request.call_id in existing.call_ids:
                return existing
            existing = replace(existing, call_ids=(*existing.call_ids, request.call_id))
            conn.execute(
                "UPDATE human_requests SET call_ids = %s WHERE id = %s",
                (_dump(list(existing.call_ids)), existing.id),
            )
            return existing

        return run(self._pool, work)

    def get(self, request_id: str) -> HumanRequest | None:
        with self._pool.connection() as conn:
            return _get(conn, request_id)

    def list(
        self,
        *,
        statuses: Collection[Status] | None = None,
        session: str | None = None,
        since: float | None = None,
        limit: int = 100,
    ) -> builtins.list[HumanRequest]:
        check_limit(limit)
        with self._pool.connection() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM human_requests"
                " WHERE (%(st)s::text[] IS NULL OR status = ANY(%(st)s))"
                " AND (%(s)s::text IS NULL OR session = %(s)s)"
                " AND (%(since)s::float8 IS NULL OR created_at >= %(since)s)"
                " ORDER BY created_at DESC, seq DESC LIMIT %(n)s",
                {
                    "st": None if statuses is None else list(statuses),
                    "s": session,
                    "since": since,
                    "n": limit,
                },
            ).fetchall()
        return [_request(row) for row in reversed(rows)]

    def settle(self, request_id: str, settlement: Settlement) -> SettleResult:
        s = settlement

        def work(conn: Conn) -> SettleResult:
            cursor = conn.execute(
                "UPDATE human_requests SET status = %s, outcome = %s, decision = %s,"
                " answer = %s, answered_by = %s, answered_at = %s, reason = %s, signature = %s"
                " WHERE id = %s AND status = ANY(%s)"
                " AND (NOT %s OR deadline IS NULL OR deadline > %s)",
                (
                    s.status,
                    s.outcome,
                    None if s.decision is None else _dump(s.decision.to_data()),
                    _dump(s.answer),
                    s.by,
                    s.at,
                    s.reason,
                    s.signature,
                    request_id,
                    _ACTIVE,
                    s.is_answer,
                    s.at,
                ),
            )
            request = _get(conn, request_id)
            if request is None:
                raise KeyError(request_id)
            return SettleResult(settled=cursor.rowcount == 1, request=request)

        return run(self._pool, work)

    def expire(self, now: float) -> builtins.list[HumanRequest]:
        def work(conn: Conn) -> builtins.list[str]:
            due = conn.execute(
                "SELECT id, kind, on_timeout, default_value, remind_every_s, deadline"
                " FROM human_requests WHERE status = ANY(%s)"
                " AND deadline IS NOT NULL AND deadline <= %s ORDER BY deadline, seq FOR UPDATE",
                (_ACTIVE, now),
            ).fetchall()
            for request_id, kind, on_timeout, default, remind_every_s, deadline in due:
                _apply_deadline(
                    conn,
                    request_id,
                    kind,
                    on_timeout,
                    default,
                    remind_every_s,
                    deadline,
                    now,
                    marker="%s",
                )
            return [r[0] for r in due]

        changed = run(self._pool, work)
        return [r for r in map(self.get, changed) if r is not None]

    def deliver(self, request_id: str, channel: str, outcome: str) -> None:
        def work(conn: Conn) -> None:
            row = conn.execute(
                "SELECT deliveries, status FROM human_requests WHERE id = %s FOR UPDATE",
                (request_id,),
            ).fetchone()
            if row is None:
                raise KeyError(request_id)
            deliveries = {**json.loads(row[0]), channel: outcome}
            status = "input_required" if row[1] == "queued" and outcome == "ok" else row[1]
            conn.execute(
                "UPDATE human_requests SET deliveries = %s, status = %s WHERE id = %s",
                (_dump(deliveries), status, request_id),
            )

        run(self._pool, work)

    def escalate(self, request_id: str, step: int, approvers: Sequence[str]) -> HumanRequest | None:
        def work(conn: Conn) -> bool:
            row = conn.execute(
                "SELECT approvers, deliveries FROM human_requests WHERE id = %s"
                " AND status = ANY(%s) FOR UPDATE",
                (request_id, _ACTIVE),
            ).fetchone()
            if row is None:
                return False
            deliveries = json.loads(row[1])
            key = f"escalation:{step}"
            if key in deliveries:
                return False
            widened = list(dict.fromkeys([*json.loads(row[0]), *approvers]))
            conn.execute(
                "UPDATE human_requests SET approvers = %s, deliveries = %s WHERE id = %s",
                (_dump(widened), _dump({**deliveries, key: "opened"}), request_id),
            )
            return True

        return self.get(request_id) if run(self._pool, work) else None

    def open_call_ids(self, session: str) -> set[str]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT call_ids FROM human_requests WHERE session = %s AND status = ANY(%s)",
                (session, _ACTIVE),
            ).fetchall()
        return {call_id for (call_ids,) in rows for call_id in json.loads(call_ids)}

    def unreported(self, *, session: str | None = None) -> builtins.list[HumanRequest]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM human_requests WHERE status <> ALL(%(a)s)"
                " AND reported = 0 AND (%(s)s::text IS NULL OR session = %(s)s)"
                " ORDER BY answered_at, seq",
                {"a": _ACTIVE, "s": session},
            ).fetchall()
        return [_request(row) for row in rows]

    def mark_reported(self, request_id: str) -> bool:
        with self._pool.connection() as conn:
            cursor = conn.execute(
                "UPDATE human_requests SET reported = 1"
                " WHERE id = %s AND reported = 0 AND status <> ALL(%s)",
                (request_id, _ACTIVE),
            )
        return cursor.rowcount == 1

    def next_deadline(self) -> float | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT MIN(deadline) FROM human_requests WHERE status = ANY(%s)", (_ACTIVE,)
            ).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    # -- rules ------------------------------------------------------------------------------

    def add_rule(self, rule: AlwaysRule) -> None:
        with self._pool.connection() as conn:
            conn.execute(
                f"INSERT INTO approval_rules ({_RULE_COLUMNS}) VALUES ({', '.join(['%s'] * 10)})",
                _rule_row(rule),
            )

    def rules(
        self, *, now: float | None = None, tool: str | None = None
    ) -> builtins.list[AlwaysRule]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                f"SELECT {_RULE_COLUMNS} FROM approval_rules"
                " WHERE (%(now)s::float8 IS NULL OR (revoked_at IS NULL AND expires_at > %(now)s))"
                " AND (%(tool)s::text IS NULL OR tool = %(tool)s) ORDER BY created_at, seq",
                {"now": now, "tool": tool},
            ).fetchall()
        return [_rule(row) for row in rows]

    def revoke_rule(self, rule_id: str, at: float) -> bool:
        with self._pool.connection() as conn:
            cursor = conn.execute(
                "UPDATE approval_rules SET revoked_at = %s WHERE id = %s AND revoked_at IS NULL",
                (at, rule_id),
            )
        return cursor.rowcount == 1


def _get(conn: Conn, request_id: str) -> HumanRequest | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM human_requests WHERE id = %s", (request_id,)
    ).fetchone()
    return None if row is None else _request(row)
