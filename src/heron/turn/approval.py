"""The approval gate: who must say yes before a tool runs, and who said it.

`ApprovalManager.requirement()` decides from autonomy, `always_ask`, `auto_approve`, the
session allow-list ("always" answers), the tool's annotations and, for a tool that judges each
call (`approval_for`, e.g. the shell's parsed command), the call's `CallApproval`: a high-risk
call always goes to an operator, and with no operator (`attended` is false) only a call the tool
marks `unattended` runs. `ApprovalManager.decide()`
asks the configured `Approver` front end (terminal, back-channel, or none) and records every
operator, back-channel and policy decision in the audit log (`heron.turn.approval_audit`).
Approval is pre-execution control; it is not a receipt.

A front end that can keep a request durable (`DeferringApprover`: it has `defer`, e.g.
`heron.humans.gate.DurableApprover` in `heron serve`) is not waited for: the call's result is a
placeholder at once ("awaiting approval R …", status `awaiting_approval`) and its outcome — the
decision, and the tool's result if it runs — arrives later as a new event bound to the call id.
The answers are the one decision vocabulary (`heron._support.vocabulary.DecisionKind`):
`yes`, `no`, `always`, `replace` (the text becomes the result) and `edit` (run with changed
arguments, validated again by the tool).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TextIO

from heron._support.terminal import terminal_safe
from heron._support.vocabulary import DecisionKind
from heron.errors import StoreError
from heron.safety.redact import sanitize_replacement, summarize_args
from heron.safety.secrets import known_secrets
from heron.tools.definition import CallApproval, ToolSpec
from heron.tools.registry import Autonomy
from heron.turn.approval_audit import (
    AuditLog,
    AuditRecord,
    Decision,
    MemoryAuditStore,
    audit_timestamp,
)

Requirement = Literal["not_required", "approved", "prompt"]
AnswerKind = DecisionKind
"""What an operator answers: `yes`, `no`, `always`, `replace` or `edit` (one vocabulary for
every channel, `heron._support.vocabulary`)."""

_request_ids = itertools.count(1)


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalRequest:
    """A call waiting for an approval decision: what a front end shows the operator."""

    request_id: str
    call_id: str
    tool: str
    summary: str
    """Redacted one-line summary of the arguments."""
    turn_id: str
    channel: str | None = None
    reason: str | None = None
    """Why a human is asked when policy alone would not have asked (a check escalated)."""
    risk: str | None = None
    """The call's risk tier, for a tool that judges each call (`CallApproval`)."""
    arguments: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """The validated call's arguments, raw, for a front end that stores the request (an
    "always" rule matches on them); show `summary`, never these."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalAnswer:
    """An operator's answer: `yes`, `no`, `always` (for this tool, this session), `replace` or
    `edit`."""

    decision: AnswerKind
    decided_by: str
    """Who answered, e.g. `operator:cli`, `backchannel:web` or `rule:<id>` (a stored "always")."""
    replacement: str | None = None
    """With `replace`: the text the model sees instead of running the tool."""
    reason: str | None = None
    arguments: Mapping[str, Any] | None = None
    """With `edit`: the arguments the tool runs with (validated again before it runs)."""


class Approver(Protocol):
    """An approval front end. `None` means no operator decision was available.

    A front end with no operator behind it says so with a class attribute `attended = False`
    (`NoApprover`): the gate then runs only what may run unattended. Without the attribute, an
    approver is taken to have an operator."""

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer | None: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class DeferredCall:
    """The exact call a durable front end stores with its request."""

    spec: ToolSpec
    arguments: Mapping[str, Any]
    """The validated call's arguments, as the tool would receive them."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Deferred:
    """The call waits on the durable request `request_id`: `placeholder` is its result now;
    the outcome arrives later as a new event bound to the call id."""

    request_id: str
    placeholder: str


class DeferringApprover(Approver, Protocol):
    """A front end whose requests outlive the turn (and the process): `defer` stores the
    request and returns `Deferred`, or answers at once (an `ApprovalAnswer`, e.g. a stored
    "always" rule), or `None` when no approver can be reached. The gate calls `defer`, never
    `ask`, when a front end has it."""

    async def defer(
        self, request: ApprovalRequest, call: DeferredCall
    ) -> Deferred | ApprovalAnswer | None: ...


class NoApprover:
    """Non-interactive runs without a back-channel: nobody can answer."""

    attended = False

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer | None:
        return None


@dataclass(frozen=True, slots=True)
class GivenApproval:
    """A person's answer already given for one exact call (a durable request answered while
    the turn that asked was over): the gate finds it instead of asking again. It answers only
    the call it was given for."""

    call_id: str
    answer: ApprovalAnswer

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer | None:
        return self.answer if request.call_id == self.call_id else None


def parse_terminal_answer(line: str) -> AnswerKind:
    """`y`/`yes` → yes, `a`/`always` → always, anything else (empty, EOF, typos) → no."""
    word = line.strip().lower()
    if word in ("y", "yes"):
        return "yes"
    if word in ("a", "always"):
        return "always"
    return "no"


class TerminalApprover:
    """Asks the operator at the terminal: yes / no / always. Reads the controlling tty when
    there is one (so piped stdin cannot answer), else stdin."""

    def __init__(
        self,
        *,
        prompt_out: TextIO | None = None,
        read_line: Callable[[], str] | None = None,
        before_prompt: Callable[[], None] | None = None,
        tty_path: str = "/dev/tty",
    ) -> None:
        self._out = prompt_out or sys.stderr
        self._tty_path = tty_path
        self._read_line = read_line
        self._before_prompt = before_prompt
        self._lock = asyncio.Lock()

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer | None:
        async with self._lock:
            if self._before_prompt is not None:
                self._before_prompt()
            why = f"  why you are asked: {request.reason}\n" if request.reason else ""
            risk = f"  risk: {request.risk}\n" if request.risk else ""
            asked = f"? heron wants to run {request.tool}\n  {request.summary}\n{risk}{why}"
            answers = f"  [y]es / [n]o / [a]lways for {request.tool}: "
            self._out.write("\n" + terminal_safe(asked + answers))
            self._out.flush()
            try:
                if self._read_line is not None:
                    line = await asyncio.to_thread(self._read_line)
                else:
                    line = await _read_terminal_line(self._tty_path)
            except OSError:
                return ApprovalAnswer(decision="no", decided_by="operator:cli", reason="tty error")
            return ApprovalAnswer(decision=parse_terminal_answer(line), decided_by="operator:cli")


async def _read_terminal_line(tty_path: str) -> str:
    """One line from the controlling terminal (else stdin), read without a helper thread so a
    cancelled prompt leaves no stale reader behind to swallow the operator's next answer."""
    try:
        fd = os.open(tty_path, os.O_RDONLY | os.O_NOCTTY)
        owned = True
    except OSError:
        fd, owned = sys.stdin.fileno(), False
    loop = asyncio.get_running_loop()
    chunks: list[bytes] = []
    done: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        data = os.read(fd, 4096)
        chunks.append(data)
        if (not data or b"\n" in data) and not done.done():
            done.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await done
    finally:
        loop.remove_reader(fd)
        if owned:
            os.close(fd)
    return b"".join(chunks).decode("utf-8", errors="replace")


class BackChannelApprover:
    """Carries approval requests to an operator elsewhere (web page, chat, tests).

    Requests wait in `pending` until `answer()` is called or the manager's timeout ends them.
    `on_request` is called for every new request (push it to the operator there).
    """

    def __init__(
        self, name: str, *, on_request: Callable[[ApprovalRequest], None] | None = None
    ) -> None:
        self.name = name
        self._on_request = on_request
        self._waiting: dict[str, tuple[ApprovalRequest, asyncio.Future[ApprovalAnswer]]] = {}

    @property
    def pending(self) -> list[ApprovalRequest]:
        return [req for req, _ in self._waiting.values()]

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer | None:
        future: asyncio.Future[ApprovalAnswer] = asyncio.get_running_loop().create_future()
        self._waiting[request.request_id] = (request, future)
        try:
            if self._on_request is not None:
                self._on_request(request)
            return await future
        finally:
            self._waiting.pop(request.request_id, None)

    def answer(
        self,
        request_id: str,
        decision: AnswerKind,
        *,
        replacement: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        operator: str = "operator",
    ) -> bool:
        """Answer a pending request; False when it is unknown or already answered."""
        entry = self._waiting.get(request_id)
        if entry is None or entry[1].done():
            return False
        entry[1].set_result(
            ApprovalAnswer(
                decision=decision,
                decided_by=f"backchannel:{self.name}:{operator}",
                replacement=replacement,
                arguments=arguments,
            )
        )
        return True


@dataclass(frozen=True, kw_only=True, slots=True)
class GateResult:
    """`proceed` with the runtime marker value, or a synthetic result the model sees instead."""

    proceed: bool
    approved: bool = False
    status: Literal["denied", "replaced", "awaiting_approval"] | None = None
    output: str = ""
    arguments: Mapping[str, Any] | None = None
    """With an `edit` answer: the arguments to run with instead of the model's."""
    request_id: str | None = None
    """With `awaiting_approval`: the durable request the call waits on."""


@dataclass(kw_only=True)
class ApprovalPolicy:
    """Who must approve what: autonomy, the `auto_approve` and `always_ask` tool names (`*`
    for all), how long the operator has to answer, and whether automatic approvals are audited
    one by one."""

    autonomy: Autonomy = "supervised"
    auto_approve: Collection[str] = ()
    always_ask: Collection[str] = ()
    timeout_s: float = 300.0
    record_auto_approvals: bool = False


def operator_denied(tool: str) -> str:
    return f"Denied by the operator: '{tool}' was not run."


def unavailable_denied(tool: str, why: str, risk: str | None = None) -> str:
    # Deliberately names no configuration key: the model should not lobby for more power.
    what = f"this {risk}-risk call of '{tool}'" if risk else f"'{tool}'"
    return (
        f"Not run: {what} needs approval and {why}, so heron denied it by policy. "
        "This was not the user's decision."
    )


@dataclass(kw_only=True)
class ApprovalManager:
    """Approval state for one agent session: policy, front end, allow-list and audit."""

    policy: ApprovalPolicy = field(default_factory=ApprovalPolicy)
    approver: Approver = field(default_factory=NoApprover)
    audit: AuditLog = field(default_factory=MemoryAuditStore)
    session_allowlist: set[str] = field(default_factory=set)
    auto_approvals: Counter[str] = field(default_factory=Counter)
    """Automatic approvals by autonomy level or allow-list, counted per tool."""

    @property
    def attended(self) -> bool:
        """Whether an operator can answer (false for `NoApprover`)."""
        return bool(getattr(self.approver, "attended", True))

    def requirement(self, spec: ToolSpec, call: CallApproval | None = None) -> Requirement:
        """`always_ask` wins over everything, full autonomy included; then, for a call the tool
        judged (`call`), its risk: high always asks, and with no operator only an `unattended`
        call runs; then autonomy, the allow-lists and the tool's own annotations."""
        return self._requirement(spec, call)[0]

    def _requirement(
        self, spec: ToolSpec, call: CallApproval | None = None
    ) -> tuple[Requirement, str]:
        policy = self.policy
        name = spec.name
        if "*" in policy.always_ask or name in policy.always_ask:
            return "prompt", "always_ask"
        if call is not None:
            if call.risk == "high":
                return "prompt", "risk:high"
            if not self.attended:
                # Nobody can answer: the tool's own verdict decides, not the allow-lists.
                if call.unattended:
                    return "approved", f"unattended:{call.risk}"
                return "prompt", f"risk:{call.risk}"
        if policy.autonomy == "full":
            return "approved", "autonomy:full"
        explicitly_allowed = name in self.session_allowlist or name in policy.auto_approve
        if spec.annotations.requires_approval and not explicitly_allowed:
            return "prompt", "annotation"
        if policy.autonomy == "read-only":
            return "not_required", "autonomy:read-only"
        if "*" in policy.auto_approve or name in policy.auto_approve:
            return "approved", "auto_approve"
        if name in self.session_allowlist:
            return "approved", "session_allowlist"
        if spec.annotations.read_only:
            return "approved", "annotation:read_only"
        return "prompt", "autonomy:supervised"

    def count_auto(
        self,
        spec: ToolSpec,
        arguments: dict[str, Any],
        *,
        call_id: str,
        turn_id: str,
        call: CallApproval | None = None,
    ) -> None:
        """Count an automatic approval; record it individually when configured, and always for
        a call the tool judged (its risk tier belongs in the trail)."""
        self.auto_approvals[spec.name] += 1
        if self.policy.record_auto_approvals or call is not None:
            self._audit(
                tool=spec.name,
                summary=summarize_args(arguments),
                decision="auto",
                decided_by=self._requirement(spec, call)[1],
                request_id=f"auto-{call_id}",
                turn_id=turn_id,
                reason=(call.note or None) if call is not None else None,
                risk=call.risk if call is not None else None,
            )

    def record_refusal(
        self,
        spec: ToolSpec,
        arguments: dict[str, Any],
        *,
        call_id: str,
        turn_id: str,
        decided_by: str,
        reason: str,
        risk: str | None = None,
    ) -> None:
        """Audit a refusal by policy (a call check), which no operator saw."""
        self._audit(
            tool=spec.name,
            summary=summarize_args(arguments),
            decision="policy_deny",
            decided_by=decided_by,
            request_id=f"check-{call_id}",
            turn_id=turn_id,
            reason=reason,
            risk=risk,
        )

    async def decide(
        self,
        spec: ToolSpec,
        arguments: dict[str, Any],
        *,
        call_id: str,
        turn_id: str,
        channel: str | None,
        reason: str | None = None,
        call: CallApproval | None = None,
        on_request: Callable[[ApprovalRequest], None],
        on_decision: Callable[[ApprovalRequest, str, str], None],
    ) -> GateResult:
        """Ask the front end about a prompt-required call and record the outcome."""
        if reason is None and call is not None and call.note:
            reason = call.note
        request = ApprovalRequest(
            request_id=f"apr-{next(_request_ids)}",
            call_id=call_id,
            tool=spec.name,
            summary=summarize_args(arguments),
            turn_id=turn_id,
            channel=channel,
            reason=reason,
            risk=call.risk if call is not None else None,
            arguments=dict(arguments),
        )
        on_request(request)
        defer = getattr(self.approver, "defer", None)
        answer: ApprovalAnswer | None
        if defer is not None:
            why = "no approver could be reached"
            try:
                deferred = await defer(request, DeferredCall(spec=spec, arguments=arguments))
            except StoreError as exc:
                deferred, why = None, f"the approval request could not be stored ({exc})"
            if isinstance(deferred, Deferred):
                self._record(request, "deferred", "policy", reason=deferred.request_id)
                on_decision(request, "deferred", f"request:{deferred.request_id}")
                return GateResult(
                    proceed=False,
                    status="awaiting_approval",
                    output=deferred.placeholder,
                    request_id=deferred.request_id,
                )
            answer = deferred
        else:
            try:
                answer = await asyncio.wait_for(self.approver.ask(request), self.policy.timeout_s)
                why = "no operator decision was available"
            except TimeoutError:
                answer = None
                why = f"no operator answered within {self.policy.timeout_s:g} s"
        if answer is None:
            decision: Decision = (
                "timeout" if why.startswith("no operator answered") else "unavailable"
            )
            note = f"{why}; {request.reason}" if request.reason else why
            self._record(request, decision, "policy", reason=note)
            on_decision(request, decision, "policy")
            return GateResult(
                proceed=False,
                status="denied",
                output=unavailable_denied(spec.name, why, request.risk),
            )
        self._record(request, answer.decision, answer.decided_by, reason=answer.reason)
        on_decision(request, answer.decision, answer.decided_by)
        if answer.decision == "always":
            self.session_allowlist.add(spec.name)
        if answer.decision in ("yes", "always"):
            return GateResult(proceed=True, approved=True)
        if answer.decision == "edit":
            return GateResult(proceed=True, approved=True, arguments=dict(answer.arguments or {}))
        if answer.decision == "replace":
            # The operator's text enters the data path like a tool's output would.
            text = known_secrets().mask(sanitize_replacement(answer.replacement or ""))
            return GateResult(proceed=False, status="replaced", output=text)
        return GateResult(proceed=False, status="denied", output=operator_denied(spec.name))

    def _record(
        self, request: ApprovalRequest, decision: Decision, decided_by: str, *, reason: str | None
    ) -> None:
        self._audit(
            tool=request.tool,
            summary=request.summary,
            decision=decision,
            decided_by=decided_by,
            request_id=request.request_id,
            turn_id=request.turn_id,
            reason=reason,
            risk=request.risk,
        )

    def _audit(
        self,
        *,
        tool: str,
        summary: str,
        decision: Decision,
        decided_by: str,
        request_id: str,
        turn_id: str,
        reason: str | None = None,
        risk: str | None = None,
    ) -> None:
        self.audit.record(
            AuditRecord(
                timestamp=audit_timestamp(),
                tool=tool,
                arguments_summary=summary,
                decision=decision,
                decided_by=decided_by,
                request_id=request_id,
                turn_id=turn_id,
                reason=reason,
                risk=risk,
            )
        )
