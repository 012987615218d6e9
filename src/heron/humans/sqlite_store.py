"""`SqliteRequestStore`: human requests and "always" rules in heron's SQLite database (tables
`human_requests`, `approval_rules`).

Every check-then-write is one `BEGIN IMMEDIATE` transaction, so two processes answering the
same request at the same moment serialise on SQLite's write lock and exactly one of them wins.
"""

from __future__ import annotations

import builtins
import json
import sqlite3
from collections.abc import Collection, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from heron._support.state import open_db, sqlite_errors, transaction
from heron._support.vocabulary import ACTIVE_STATUSES, HumanDecision, Status
from heron.humans.store import (
    AlwaysRule,
    HumanRequest,
    Settlement,
    SettleResult,
    deadline_passed,
)
from heron.turn.approval_audit import check_limit

_SCHEMA = """
CREATE TABLE IF NOT EXISTS human_requests (
    id                TEXT PRIMARY KEY,
    kind              TEXT NOT NULL,
    session           TEXT NOT NULL,
    call_ids          TEXT NOT NULL,
    tool              TEXT NOT NULL,
    arguments         TEXT NOT NULL,
    display_arguments TEXT NOT NULL,
    digest            TEXT NOT NULL,
    question          TEXT NOT NULL,
    options           TEXT NOT NULL,
    schema            TEXT,
    urgency           TEXT NOT NULL,
    risk              TEXT,
    approvers         TEXT NOT NULL,
    created_at        REAL NOT NULL,
    deadline          REAL,
    on_timeout        TEXT NOT NULL,
    default_value     TEXT,
    remind_every_s    REAL,
    reminders         INTEGER NOT NULL DEFAULT 0,
    status            TEXT NOT NULL,
    outcome           TEXT,
    decision          TEXT,
    answer            TEXT,
    answered_by       TEXT,
    answered_at       REAL,
    reason            TEXT,
    signature         TEXT,
    deliveries        TEXT NOT NULL DEFAULT '{}',
    gates_call        INTEGER NOT NULL DEFAULT 0,
    reported          INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS human_requests_active
    ON human_requests (status, deadline);
CREATE INDEX IF NOT EXISTS human_requests_identical
    ON human_requests (session, tool, digest);
CREATE INDEX IF NOT EXISTS human_requests_unreported
    ON human_requests (reported, session);
CREATE TABLE IF NOT EXISTS approval_rules (
    id             TEXT PRIMARY KEY,
    tool           TEXT NOT NULL,
    scope          TEXT NOT NULL,
    session        TEXT,
    command_prefix TEXT,
    created_at     REAL NOT NULL,
    expires_at     REAL NOT NULL,
    created_by     TEXT NOT NULL,
    request_id     TEXT,
    revoked_at     REAL
);
"""

_COLUMNS = (
    "id, kind, session, call_ids, tool, arguments, display_arguments, digest, question, "
    "options, schema, urgency, risk, approvers, created_at, deadline, on_timeout, "
    "default_value, remind_every_s, reminders, status, outcome, decision, answer, "
    "answered_by, answered_at, reason, signature, deliveries, gates_call, reported"
)
_RULE_COLUMNS = (
    "id, tool, scope, session, command_prefix, created_at, expires_at, created_by, "
    "request_id, revoked_at"
)
_ACTIVE = ", ".join(f"'{s}'" for s in sorted(ACTIVE_STATUSES))


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _load_optional(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _apply_deadline(
    conn: Any,
    request_id: str,
    kind: Any,
    on_timeout: Any,
    default: str | None,
    remind_every_s: float | None,
    deadline: float,
    now: float,
    *,
    marker: str = "?",
) -> None:
    """Write what `deadline_passed` says for one due request (`marker`: the driver's
    parameter marker, `?` or `%s`)."""
    passed = deadline_passed(
        kind=kind,
        on_timeout=on_timeout,
        default=_load_optional(default),
        remind_every_s=remind_every_s,
        deadline=deadline,
        now=now,
    )
    if passed.remind_until is not None:
        conn.execute(
            f"UPDATE human_requests SET deadline = {marker}, reminders = reminders + 1"
            f" WHERE id = {marker}",
            (passed.remind_until, request_id),
        )
        return
    m = marker
    conn.execute(
        f"UPDATE human_requests SET status = 'timed_out', outcome = {m}, answer = {m},"
        f" answered_by = 'policy', answered_at = {m}, reason = {m} WHERE id = {m}",
        (
            passed.outcome,
            _dump(passed.answer),
            deadline,
            "no answer before the deadline",
            request_id,
        ),
    )


def _row(request: HumanRequest) -> tuple[Any, ...]:
    r = request
    return (
        r.id,
        r.kind,
        r.session,
        _dump(list(r.call_ids)),
        r.tool,
        _dump(dict(r.arguments)),
        _dump(dict(r.display_arguments)),
        r.digest,
        r.question,
        _dump(list(r.options)),
        None if r.schema is None else _dump(dict(r.schema)),
        r.urgency,
        r.risk,
        _dump(list(r.approvers)),
        r.created_at,
        r.deadline,
        r.on_timeout,
        _dump(r.default),
        r.remind_every_s,
        r.reminders,
        r.status,
        r.outcome,
        None if r.decision is None else _dump(r.decision.to_data()),
        _dump(r.answer),
        r.answered_by,
        r.answered_at,
        r.reason,
        r.signature,
        _dump(dict(r.deliveries)),
        int(r.gates_call),
        int(r.reported),
    )


def _request(row: tuple[Any, ...]) -> HumanRequest:
    (
        id_,
        kind,
        session,
        call_ids,
        tool,
        arguments,
        display,
        digest,
        question,
        options,
        schema,
        urgency,
        risk,
        approvers,
        created_at,
        deadline,
        on_timeout,
        default,
        remind_every_s,
        reminders,
        status,
        outcome,
        decision,
        answer,
        answered_by,
        answered_at,
        reason,
        signature,
        deliveries,
        gates_call,
        reported,
    ) = row
    return HumanRequest(
        id=id_,
        kind=kind,
        session=session,
        call_ids=tuple(json.loads(call_ids)),
        tool=tool,
        arguments=json.loads(arguments),
        display_arguments=json.loads(display),
        digest=digest,
        question=question,
        options=tuple(json.loads(options)),
        schema=_load_optional(schema),
        urgency=urgency,
        risk=risk,
        approvers=tuple(json.loads(approvers)),
        created_at=created_at,
        deadline=deadline,
        on_timeout=on_timeout,
        default=_load_optional(default),
        remind_every_s=remind_every_s,
        reminders=reminders,
        status=status,
        outcome=outcome,
        decision=None if decision is None else HumanDecision.from_data(json.loads(decision)),
        answer=_load_optional(answer),
        answered_by=answered_by,
        answered_at=answered_at,
        reason=reason,
        signature=signature,
        deliveries=json.loads(deliveries),
        gates_call=bool(gates_call),
        reported=bool(reported),
    )


def _rule(row: tuple[Any, ...]) -> AlwaysRule:
    id_, tool, scope, session, prefix, created_at, expires_at, by, request_id, revoked = row
    return AlwaysRule(
        id=id_,
        tool=tool,
        scope=scope,
        session=session,
        command_prefix=None if prefix is None else tuple(json.loads(prefix)),
        created_at=created_at,
        expires_at=expires_at,
        created_by=by,
        request_id=request_id,
        revoked_at=revoked,
    )


def _rule_row(rule: AlwaysRule) -> tuple[Any, ...]:
    """The columns of `_RULE_COLUMNS`, in order (`_rule` reads them back)."""
    prefix = None if rule.command_prefix is None else _dump(list(rule.command_prefix))
    return (
        rule.id,
        rule.tool,
        rule.scope,
        rule.session,
        prefix,
        rule.created_at,
        rule.expires_at,
        rule.created_by,
        rule.request_id,
        rule.revoked_at,
    )


@sqlite_errors
class SqliteRequestStore:
    """`RequestStore` on one SQLite connection (explicit transactions)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        conn.isolation_level = None
        conn.executescript(_SCHEMA)
        self._conn = conn

    @classmethod
    def open_dir(cls, state_dir: Path) -> SqliteRequestStore:
        """A store on `<state_dir>/heron.db`; close it with `close()`."""
        return cls(open_db(state_dir))

    def close(self) -> None:
        self._conn.close()

    # -- requests ---------------------------------------------------------------------------

    def open(self, request: HumanRequest) -> HumanRequest:
        with transaction(self._conn) as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM human_requests WHERE kind = ? AND session = ?"
                f" AND tool = ? AND digest = ? AND status IN ({_ACTIVE})"
                " ORDER BY created_at, rowid LIMIT 1",
                (request.kind, request.session, request.tool, request.digest),
            ).fetchone()
            if row is None:
                marks = ", ".join("?" * len(_row(request)))
                conn.execute(
                    f"INSERT INTO human_requests ({_COLUMNS}) VALUES ({marks})", _row(request)
                )
                return request
            existing = _request(row)
            if request.call_id in existing.call_ids:
                return existing
            existing = replace(existing, call_ids=(*existing.call_ids, request.call_id))
            conn.execute(
                "UPDATE human_requests SET call_ids = ? WHERE id = ?",
                (_dump(list(existing.call_ids)), existing.id),
            )
            return existing

    def get(self, request_id: str) -> HumanRequest | None:
        row = self._conn.execute(
            f"SELECT {_COLUMNS} FROM human_requests WHERE id = ?", (request_id,)
        ).fetchone()
        return None if row is None else _request(row)

    def list(
        self,
        *,
        statuses: Collection[Status] | None = None,
        session: str | None = None,
        since: float | None = None,
        limit: int = 100,
    ) -> builtins.list[HumanRequest]:
        check_limit(limit)
        where: builtins.list[str] = []
        params: builtins.list[Any] = []
        if statuses is not None:
            where.append(f"status IN ({', '.join('?' * len(statuses))})")
            params.extend(statuses)
        if session is not None:
            where.append("session = ?")
            params.append(session)
        if since is not None:
            where.append("created_at >= ?")
            params.append(since)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM human_requests{clause}"
            " ORDER BY created_at DESC, rowid DESC LIMIT ?",
            [*params, limit],
        ).fetchall()
        return [_request(row) for row in reversed(rows)]

    def settle(self, request_id: str, settlement: Settlement) -> SettleResult:
        s = settlement
        on_time = " AND (deadline IS NULL OR deadline > ?)" if s.is_answer else ""
        params: builtins.list[Any] = [
            s.status,
            s.outcome,
            None if s.decision is None else _dump(s.decision.to_data()),
            _dump(s.answer),
            s.by,
            s.at,
            s.reason,
            s.signature,
            request_id,
        ]
        if s.is_answer:
            params.append(s.at)
        with transaction(self._conn) as conn:
            cursor = conn.execute(
                "UPDATE human_requests SET status = ?, outcome = ?, decision = ?, answer = ?,"
                " answered_by = ?, answered_at = ?, reason = ?, signature = ?"
                f" WHERE id = ? AND status IN ({_ACTIVE}){on_time}",
                params,
            )
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM human_requests WHERE id = ?", (request_id,)
            ).fetchone()
        if row is None:
            raise KeyError(request_id)
        return SettleResult(settled=cursor.rowcount == 1, request=_request(row))

    def expire(self, now: float) -> builtins.list[HumanRequest]:
        changed: builtins.list[str] = []
        with transaction(self._conn) as conn:
            due = conn.execute(
                "SELECT id, kind, on_timeout, default_value, remind_every_s, deadline"
                f" FROM human_requests WHERE status IN ({_ACTIVE})"
                " AND deadline IS NOT NULL AND deadline <= ? ORDER BY deadline, rowid",
                (now,),
            ).fetchall()
            for request_id, kind, on_timeout, default, remind_every_s, deadline in due:
                changed.append(request_id)
                _apply_deadline(
                    conn, request_id, kind, on_timeout, default, remind_every_s, deadline, now
                )
        return [r for r in map(self.get, changed) if r is not None]

    def deliver(self, request_id: str, channel: str, outcome: str) -> None:
        with transaction(self._conn) as conn:
            row = conn.execute(
                "SELECT deliveries, status FROM human_requests WHERE id = ?", (request_id,)
            ).fetchone()
            if row is None:
                raise KeyError(request_id)
            deliveries = {**json.loads(row[0]), channel: outcome}
            status = "input_required" if row[1] == "queued" and outcome == "ok" else row[1]
            conn.execute(
                "UPDATE human_requests SET deliveries = ?, status = ? WHERE id = ?",
                (_dump(deliveries), status, request_id),
            )

    def escalate(self, request_id: str, step: int, approvers: Sequence[str]) -> HumanRequest | None:
        with transaction(self._conn) as conn:
            row = conn.execute(
                f"SELECT approvers, deliveries FROM human_requests WHERE id = ?"
                f" AND status IN ({_ACTIVE})",
                (request_id,),
            ).fetchone()
            if row is None:
                return None
            deliveries = json.loads(row[1])
            key = f"escalation:{step}"
            if key in deliveries:
                return None
            widened = list(dict.fromkeys([*json.loads(row[0]), *approvers]))
            conn.execute(
                "UPDATE human_requests SET approvers = ?, deliveries = ? WHERE id = ?",
                (_dump(widened), _dump({**deliveries, key: "opened"}), request_id),
            )
        return self.get(request_id)

    def open_call_ids(self, session: str) -> set[str]:
        rows = self._conn.execute(
            f"SELECT call_ids FROM human_requests WHERE session = ? AND status IN ({_ACTIVE})",
            (session,),
        ).fetchall()
        return {call_id for (call_ids,) in rows for call_id in json.loads(call_ids)}

    def unreported(self, *, session: str | None = None) -> builtins.list[HumanRequest]:
        where = f"status NOT IN ({_ACTIVE}) AND reported = 0"
        params: builtins.list[Any] = []
        if session is not None:
            where += " AND session = ?"
            params.append(session)
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM human_requests WHERE {where} ORDER BY answered_at, rowid",
            params,
        ).fetchall()
        return [_request(row) for row in rows]

    def mark_reported(self, request_id: str) -> bool:
        with transaction(self._conn) as conn:
            cursor = conn.execute(
                "UPDATE human_requests SET reported = 1"
                f" WHERE id = ? AND reported = 0 AND status NOT IN ({_ACTIVE})",
                (request_id,),
            )
        return cursor.rowcount == 1

    def next_deadline(self) -> float | None:
        row = self._conn.execute(
            f"SELECT MIN(deadline) FROM human_requests WHERE status IN ({_ACTIVE})"
        ).fetchone()
        return None if row is None else row[0]

    # -- rules ------------------------------------------------------------------------------

    def add_rule(self, rule: AlwaysRule) -> None:
        with transaction(self._conn) as conn:
            conn.execute(
                f"INSERT INTO approval_rules ({_RULE_COLUMNS}) VALUES ({', '.join('?' * 10)})",
                _rule_row(rule),
            )

    def rules(
        self, *, now: float | None = None, tool: str | None = None
    ) -> builtins.list[AlwaysRule]:
        where: builtins.list[str] = []
        params: builtins.list[Any] = []
        if now is not None:
            where.append("revoked_at IS NULL AND expires_at > ?")
            params.append(now)
        if tool is not None:
            where.append("tool = ?")
            params.append(tool)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = self._conn.execute(
            f"SELECT {_RULE_COLUMNS} FROM approval_rules{clause} ORDER BY created_at, rowid",
            params,
        ).fetchall()
        return [_rule(row) for row in rows]

    def revoke_rule(self, rule_id: str, at: float) -> bool:
        with transaction(self._conn) as conn:
            cursor = conn.execute(
                "UPDATE approval_rules SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                (at, rule_id),
            )
        return cursor.rowcount == 1
