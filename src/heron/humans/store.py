"""`RequestStore`: durable requests to a human (`HumanRequest`) and the "always" rules their
answers leave behind (`AlwaysRule`), the interface every back end implements.

A request is a row, not a future in one process's memory: any process on the state directory
can list it, answer it or expire it, and it outlives the process that opened it. Three things
are the store's job, so that they hold across processes:

- **The first valid answer wins.** `settle` is a compare-and-set: it changes a request only
  while it is still active (and, for an answer, before its deadline); every later attempt gets
  the settled request back unchanged, which names who answered and when.
- **The deadline lives here.** `expire(now)` ends every active request whose deadline has
  passed, as one query on a clock — no process has to stay alive holding a timer. An approval
  always ends `timed_out` / `no_answer`: silence never approves, whatever the configuration.
  A question ends as its `on_timeout` says (`default`, `halt`) or, with `wait`, stays open with
  its deadline moved on and one more reminder counted.
- **An identical pending request is reused.** `open` returns the active request of the same
  kind, session, tool and argument digest when there is one (with the new call id added to it)
  instead of asking the same thing twice.

The embedded implementation is `heron.humans.sqlite_store.SqliteRequestStore`; the methods are
synchronous (one short local transaction each) and a back-end failure raises
`heron.errors.StoreError`.
"""

from __future__ import annotations

import builtins
import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from heron._support.canonical import canonical_json
from heron._support.vocabulary import (
    ACTIVE_STATUSES,
    HumanDecision,
    Outcome,
    Status,
    Urgency,
)

__all__ = [
    "AlwaysRule",
    "DeadlinePassed",
    "HumanRequest",
    "OnTimeout",
    "RequestKind",
    "RequestStore",
    "RuleScope",
    "SettleResult",
    "Settlement",
    "argument_digest",
    "deadline_passed",
    "escalation_step",
]

RequestKind = Literal["approval", "question"]
"""`approval`: may this tool call run (the engine's gate, or the model's own
`request_human_approval`); `question`: a value the agent needs (`request_human_input`)."""

OnTimeout = Literal["no_answer", "default", "wait", "halt"]
"""What the deadline does: `no_answer` (every approval), or for a question: answer with its
default, keep waiting and remind, or halt the run."""

RuleScope = Literal["session", "tool", "command"]
"""What an "always" covers: this tool in this session, this tool in every session, or this
(shell) tool's commands that begin with a parsed prefix, in this session."""


def argument_digest(arguments: Mapping[str, Any]) -> str:
    """The SHA-256 of the canonical JSON of `arguments`, as hex: what makes two requests
    identical."""
    return hashlib.sha256(canonical_json(arguments).encode("utf-8")).hexdigest()


@dataclass(frozen=True, kw_only=True, slots=True)
class HumanRequest:
    """One approval or question, as stored."""

    id: str
    kind: RequestKind
    session: str
    call_ids: tuple[str, ...]
    """The tool calls waiting on this request: the first opened it, later identical calls
    were attached to it instead of asking again."""
    tool: str
    """The tool whose call is to be approved; for a question, the asking tool's name."""
    arguments: Mapping[str, Any] = field(hash=False)
    """The exact arguments of the call, as signed and as the tool would receive them."""
    display_arguments: Mapping[str, Any] = field(hash=False)
    """A redacted copy of `arguments`, for showing to people."""
    digest: str
    """`argument_digest(arguments)`."""
    question: str
    """What the person is asked, in one or a few sentences."""
    options: tuple[str, ...] = ()
    """For a question: the answers to choose from, when the asker named them."""
    schema: Mapping[str, Any] | None = field(default=None, hash=False)
    """For an approval: the tool's input schema (an edit is validated against it); for a
    question: the JSON Schema of the answer. `None` when unknown."""
    urgency: Urgency = "normal"
    risk: str | None = None
    """The call's risk level when the tool judged one (`low`, `medium`, `high`); an "always"
    answer never becomes a rule for a `high` call."""
    approvers: tuple[str, ...]
    """Who may answer, as `channel:identity` (`console:alice`, `mail:ops@example.com`;
    `console:*` is whoever can run `heron approvals` on the state directory)."""
    created_at: float
    deadline: float | None = None
    on_timeout: OnTimeout = "no_answer"
    default: Any = field(default=None, hash=False)
    """For a question: the answer `on_timeout = "default"` gives."""
    remind_every_s: float | None = None
    """For a question that keeps waiting: how far each reminder moves the deadline."""
    reminders: int = 0
    status: Status = "queued"
    outcome: Outcome | None = None
    decision: HumanDecision | None = None
    answer: Any = field(default=None, hash=False)
    """For a question: the value given (or the default used)."""
    answered_by: str | None = None
    """`channel:identity` of the approver; `policy` when the runtime ended the request."""
    answered_at: float | None = None
    reason: str | None = None
    signature: str | None = None
    """`heron-decision-…` over the request id, the exact arguments, the decision, the approver
    and the time (`heron.humans.signing`); `None` when no person decided."""
    deliveries: Mapping[str, str] = field(default_factory=dict, hash=False)
    """Channel → `ok` or `failed: <why>`."""
    gates_call: bool = False
    """The engine's approval gate opened it: the call `call_id` waits on it, and a decision
    that runs the tool (`yes`, `always`, `edit`) runs it (`heron.humans.outcomes`)."""
    reported: bool = False
    """Its ending has been handed back to the session that asked (exactly once)."""

    @property
    def call_id(self) -> str:
        """The call that opened the request."""
        return self.call_ids[0]

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    def to_data(self, *, exact: bool = False) -> dict[str, Any]:
        """The request as JSON (`heron approvals … --json`, the gateway): the redacted copy
        of the arguments unless `exact`."""
        return {
            "id": self.id,
            "kind": self.kind,
            "status": self.status,
            "outcome": self.outcome,
            "session": self.session,
            "call_ids": list(self.call_ids),
            "tool": self.tool,
            "arguments": dict(self.arguments if exact else self.display_arguments),
            "question": self.question,
            "options": list(self.options),
            "urgency": self.urgency,
            "risk": self.risk,
            "approvers": list(self.approvers),
            "created_at": self.created_at,
            "deadline": self.deadline,
            "decision": None if self.decision is None else self.decision.to_data(),
            "answer": self.answer,
            "answered_by": self.answered_by,
            "answered_at": self.answered_at,
            "reason": self.reason,
            "signature": self.signature,
            "deliveries": dict(self.deliveries),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Settlement:
    """How a request ends: an answer (`answer=True`: only before the deadline) or an end the
    runtime made (cancelled, no approver reachable)."""

    status: Status
    outcome: Outcome
    by: str
    at: float
    reason: str | None = None
    decision: HumanDecision | None = None
    answer: Any = field(default=None, hash=False)
    signature: str | None = None
    is_answer: bool = True
    """An answer settles only before the deadline; the runtime's own ends ignore it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SettleResult:
    """`settled`: this settlement won. Else `request` is the request as it already was (its
    `answered_by` and `answered_at` say who was first), or still active with its deadline
    passed (`late`)."""

    settled: bool
    request: HumanRequest

    @property
    def late(self) -> bool:
        return not self.settled and self.request.active


@dataclass(frozen=True, kw_only=True, slots=True)
class AlwaysRule:
    """A stored "always": this tool (within `session`, or everywhere when `None`; only
    commands beginning with `command_prefix` when set) is approved without asking until
    `expires_at`, unless revoked."""

    id: str
    tool: str
    scope: RuleScope
    session: str | None
    command_prefix: tuple[str, ...] | None = None
    created_at: float
    expires_at: float
    created_by: str
    request_id: str | None = None
    revoked_at: float | None = None

    def live(self, now: float) -> bool:
        return self.revoked_at is None and now < self.expires_at


class RequestStore(Protocol):
    """Durable human requests and "always" rules; see the module docstring."""

    def open(self, request: HumanRequest) -> HumanRequest:
        """Store a new request, or return the active one of the same kind, session, tool and
        digest with `request.call_id` added to its calls (then `request.id` is not stored)."""
        ...

    def get(self, request_id: str) -> HumanRequest | None:
        """The request, or `None` when there is no such request."""
        ...

    def list(
        self,
        *,
        statuses: Collection[Status] | None = None,
        session: str | None = None,
        since: float | None = None,
        limit: int = 100,
    ) -> builtins.list[HumanRequest]:
        """Requests (optionally only with these statuses, of one session, created at or after
        `since`), the latest `limit`, oldest first. A negative `limit` raises `ValueError`."""
        ...

    def settle(self, request_id: str, settlement: Settlement) -> SettleResult:
        """End an active request (compare-and-set; see `SettleResult`); `KeyError` for an
        unknown id. An answer at or after the deadline does not settle."""
        ...

    def expire(self, now: float) -> builtins.list[HumanRequest]:
        """Apply every passed deadline (see the module docstring); returns each request it
        changed as it now is (ended, or reminded and still waiting), oldest first."""
        ...

    def deliver(self, request_id: str, channel: str, outcome: str) -> None:
        """Record a delivery outcome for one channel; the first `ok` moves a `queued` request
        to `input_required`."""
        ...

    def escalate(self, request_id: str, step: int, approvers: Sequence[str]) -> HumanRequest | None:
        """Add `approvers` (escalation step `step`, from 1) to an active request's approvers,
        once per step (compare-and-set): the request as it now is, or `None` when it has ended
        or reached that step already. The step is recorded in its deliveries as
        `escalation:<step>` (see `escalation_step`)."""
        ...

    def open_call_ids(self, session: str) -> set[str]:
        """The call ids of the session's active requests."""
        ...

    def unreported(self, *, session: str | None = None) -> builtins.list[HumanRequest]:
        """Ended requests (of one session) whose ending is not reported yet, oldest first."""
        ...

    def mark_reported(self, request_id: str) -> bool:
        """Mark an ended request's ending reported; `False` when it is active, unknown or
        already reported."""
        ...

    def next_deadline(self) -> float | None:
        """The earliest deadline of an active request, if any: when `expire` next has work."""
        ...

    def add_rule(self, rule: AlwaysRule) -> None:
        """Store a new rule (its id must be new)."""
        ...

    def rules(
        self, *, now: float | None = None, tool: str | None = None
    ) -> builtins.list[AlwaysRule]:
        """Rules, oldest first; with `now`, only the live ones; with `tool`, only its rules."""
        ...

    def revoke_rule(self, rule_id: str, at: float) -> bool:
        """Revoke a rule; `False` when unknown or already revoked."""
        ...


def escalation_step(request: HumanRequest) -> int:
    """How many escalation steps a request has taken (0: none)."""
    return sum(1 for key in request.deliveries if key.startswith("escalation:"))


@dataclass(frozen=True, slots=True)
class DeadlinePassed:
    """What a passed deadline does to one request (`deadline_passed`): either a new deadline
    (`remind_until`: a question that keeps waiting) or its ending as `outcome` with `answer`
    (the question's default, else none)."""

    remind_until: float | None = None
    outcome: Outcome = "no_answer"
    answer: Any = None


def deadline_passed(
    *,
    kind: RequestKind,
    on_timeout: OnTimeout,
    default: Any,
    remind_every_s: float | None,
    deadline: float,
    now: float,
) -> DeadlinePassed:
    """The one rule every store applies at a deadline. Silence never approves: an approval's
    timeout is `no_answer`, always; a question answers with its default (`on_timeout =
    "default"`) or keeps waiting by whole reminder intervals past `now` (`"wait"`)."""
    if kind == "question" and on_timeout == "wait" and remind_every_s:
        steps = int((now - deadline) // remind_every_s) + 1
        return DeadlinePassed(remind_until=deadline + steps * remind_every_s)
    if kind == "question" and on_timeout == "default" and default is not None:
        return DeadlinePassed(outcome="defaulted", answer=default)
    return DeadlinePassed()
