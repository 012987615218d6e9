"""`heron audit`: query the execution audit trail (`heron.audit.executions`), or with
`--approvals` the approval audit (`heron.turn.approval_audit`), both read from the SQLite
stores of the state directory (`heron.audit.sqlite_store`) or from the shared store `--store`
names (`heron.audit.postgres_store`: every worker's calls).

One line per executed tool call (or approval decision), oldest first; `--json` prints one JSON
object per line.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from heron.cli import common
from heron.cli.common import UsageError
from heron.cli.flag_values import row_limit

if TYPE_CHECKING:
    from heron.audit.executions import Execution, ExecutionStore
    from heron.turn.approval_audit import AuditLog, AuditRecord


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `audit` to the `heron` parser."""
    audit = sub.add_parser(
        "audit",
        help="executed tool calls: who, in what context, why, what happened",
        description="List executed tool calls from the execution audit trail, oldest first; "
        "with --approvals, the approval decisions instead.",
    )
    audit.add_argument(
        "--approvals",
        action="store_true",
        help="list approval decisions (who allowed or refused which call) instead",
    )
    audit.add_argument("--tool", help="only calls of this tool")
    audit.add_argument("--session", help="only calls made in this session (not with --approvals)")
    audit.add_argument(
        "--since",
        metavar="WHEN",
        help="only calls started since WHEN: a span back from now (15m, 2h, 3d, 1w) or an "
        "ISO date/time (2024-05-01, 2024-05-01T14:30, …Z for UTC); not with --approvals",
    )
    audit.add_argument("--limit", type=row_limit, default=50, metavar="N", help="the last N calls")
    audit.add_argument("--json", action="store_true", help="one JSON object per line")
    common.add_config_flags(audit)
    common.add_store_flag(audit)
    audit.set_defaults(handler=cmd_audit)


@contextmanager
def _trails(args: argparse.Namespace) -> Iterator[tuple[AuditLog, ExecutionStore]]:
    """Both trails of the store `--store` names, else of the state directory."""
    pool = common.shared_pool(args)
    if pool is not None:
        from heron.audit.postgres_store import PostgresApprovalAudit, PostgresExecutionStore

        try:
            yield PostgresApprovalAudit(pool), PostgresExecutionStore(pool)
        finally:
            pool.close()
        return
    from heron._support.state import open_db
    from heron.audit.sqlite_store import SqliteApprovalAudit, SqliteExecutionStore

    conn = open_db(common.state_dir(args))
    try:
        yield SqliteApprovalAudit(conn), SqliteExecutionStore(conn)
    finally:
        conn.close()


def cmd_audit(args: argparse.Namespace) -> int:
    import json

    if args.approvals:
        if args.session is not None or args.since is not None:
            raise UsageError("--approvals takes --tool and --limit, not --session or --since")
        with _trails(args) as (approvals, _):
            decisions = approvals.list(tool=args.tool, limit=args.limit)
        for decision in decisions:
            record = approval_json(decision)
            text = json.dumps(record, ensure_ascii=False) if args.json else format_approval(record)
            common.out(text)
        return 0
    try:
        since = common.parse_since(args.since) if args.since is not None else None
    except ValueError as exc:
        raise UsageError(f"--since: {exc}") from exc
    with _trails(args) as (_, executions):
        rows = executions.query(tool=args.tool, session=args.session, since=since, limit=args.limit)
    for row in rows:
        line = json.dumps(row.to_json(), ensure_ascii=False) if args.json else format_row(row)
        common.out(line)
    return 0


def format_row(row: Execution) -> str:
    """Two lines for people: what ran and how it ended, then who and why."""
    started = row.to_json()["started"]
    took = f"{row.duration_ms:.0f} ms" if row.duration_ms is not None else "-"
    who = " ".join(
        part
        for part in (
            f"agent={row.agent}" if row.agent else "",
            f"channel={row.channel}" if row.channel else "",
            f"operator={row.operator}" if row.operator else "",
            f"approved_by={row.approved_by}" if row.approved_by else "",
            f"risk={row.risk}" if row.risk else "",
        )
        if part
    )
    why = " ".join((row.why or "(no text before the call)").split())
    if len(why) > 120:
        why = why[:119] + "…"
    return (
        f"{started}  {row.tool:20} {row.status:12} {took:>8}  session={row.session or '-'} "
        f"turn={row.turn_id} call={row.call_id}\n    {who or '-'}  why: {why}"
    )


def approval_json(record: AuditRecord) -> dict[str, str | None]:
    """One approval decision as a JSON-ready dict."""
    return {
        "timestamp": record.timestamp,
        "tool": record.tool,
        "decision": record.decision,
        "decided_by": record.decided_by,
        "request_id": record.request_id,
        "turn_id": record.turn_id,
        "session_id": record.session_id,
        "arguments": record.arguments_summary,
        "reason": record.reason,
        "risk": record.risk,
    }


def format_approval(record: dict[str, str | None]) -> str:
    """One line for people: when, which tool, the decision, who made it, and why."""
    reason = f"  reason: {' '.join((record['reason'] or '').split())}" if record["reason"] else ""
    risk = f"  risk: {record['risk']}" if record.get("risk") else ""
    return (
        f"{record['timestamp']}  {record['tool']:20} {record['decision']:12} "
        f"by {record['decided_by']}  {record['arguments']}{risk}{reason}"
    )
