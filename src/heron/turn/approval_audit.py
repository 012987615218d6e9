"""The approval audit as the engine sees it: who decided what about which tool call, and when.

Approval is pre-execution control (`heron.turn.approval`); every decision it makes is one
`AuditRecord` handed to an `AuditLog`. The engine owns this interface and its in-memory default
(`MemoryAuditStore`, for embedders and tests without a state directory); the durable trail,
`heron.audit.sqlite_store.SqliteApprovalAudit`, lives above the engine in `heron.audit` and
is handed in by whoever builds the agent (`heron.config.build`). Receipts are a separate
concern (`heron.turn.receipts`).

`record` is synchronous: the gate records a decision in line, between two awaits, and a
decision is one small local insert.
"""

from __future__ import annotations

import builtins
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal, Protocol, get_args

from heron._support.timefmt import utc_rfc3339

Decision = Literal[
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
"""How an approval request ended.

`yes`/`always`/`no`/`replace`/`edit` are operator answers (`replace` = deny with a replacement
result, `edit` = run with changed arguments); `deferred` = handed to a durable request (its
decision is recorded under the request's id when it arrives);
`timeout` and `unavailable` are denials the runtime made because no operator answered;
`policy_deny` is a configured rule; `auto` is an approval that needed no prompt.
"""

DECISIONS: Final = frozenset(get_args(Decision))
_RFC3339_UTC_RE: Final = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?Z"
)


def audit_timestamp(clock: Callable[[], float] = time.time) -> str:
    """The clock's current time as RFC 3339 UTC with millisecond precision and a `Z` suffix."""
    return utc_rfc3339(clock(), precision="milliseconds")


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditRecord:
    """One approval decision."""

    timestamp: str
    """RFC 3339 UTC with a `Z` suffix, e.g. `2024-03-15T14:30:00.000Z` (see `audit_timestamp`)."""
    tool: str
    arguments_summary: str
    """Already redacted by the caller; the store writes it as given."""
    decision: Decision
    decided_by: str
    """`operator:cli`, `backchannel:<name>`, `policy`, `autonomy:<level>`, ..."""
    request_id: str
    turn_id: str | None = None
    session_id: str | None = None
    reason: str | None = None
    risk: str | None = None
    """The call's risk tier (`low`, `medium`, `high`) for a tool that judges each call (the
    `shell` tool: its parsed command); None for the others."""

    def __post_init__(self) -> None:
        if self.decision not in DECISIONS:
            raise ValueError(f"unknown approval decision: {self.decision!r}")
        if _RFC3339_UTC_RE.fullmatch(self.timestamp) is None:
            raise ValueError(
                f"audit timestamp must be RFC 3339 UTC ending in 'Z': {self.timestamp!r}"
            )


class AuditLog(Protocol):
    """What the approval gate needs from an audit trail; `MemoryAuditStore` and the durable
    `heron.audit.sqlite_store.SqliteApprovalAudit` fit.

    Order is insertion order, not the recorded timestamp, so a clock step cannot reorder the
    trail. A negative `limit` is refused with `ValueError`.
    """

    def record(self, record: AuditRecord) -> None:
        """Append one decision."""
        ...

    def list(self, *, tool: str | None = None, limit: int = 100) -> builtins.list[AuditRecord]:
        """The latest `limit` decisions (optionally for one tool), oldest first."""
        ...


def check_limit(limit: int) -> None:
    """Refuse a negative `limit` (SQL would read it as "no limit" and return everything)."""
    if limit < 0:
        raise ValueError(f"limit must not be negative: {limit}")


class MemoryAuditStore:
    """The same trail kept in process memory, for embedders and tests with no state directory."""

    def __init__(self) -> None:
        self._records: builtins.list[AuditRecord] = []

    def record(self, record: AuditRecord) -> None:
        """Append one decision."""
        self._records.append(record)

    def list(self, *, tool: str | None = None, limit: int = 100) -> builtins.list[AuditRecord]:
        """The latest `limit` decisions (optionally only for `tool`), oldest first."""
        check_limit(limit)
        matching = [r for r in self._records if tool is None or r.tool == tool]
        return matching[-limit:] if limit else []
