"""`RequestDesk`: where requests to a human are opened, delivered, answered and expired.

Every front end goes through the desk — the engine's approval gate and the model's own
`request_human_*` tools open requests; `heron approvals` (and later mail replies, the web
console, ACP) answer them — so the rules hold on every channel:

- A request goes only to approvers who can be reached: configured identities whose channel is
  open here. With none, the request ends at once as `no_answer: no approver reachable`
  instead of waiting for nobody; so does one whose every delivery failed.
- Urgency picks channels: `high` and `urgent` go to every reachable channel at once, `low` and
  `normal` to the first.
- An answer is checked against the approvers the request was opened with, validated (an edit
  against the tool's schema, a question's answer against its schema and options:
  `heron.humans.refusals`), signed (`heron.humans.signing`) and then settled by the store's
  compare-and-set: the first valid answer wins, a later one is refused with who answered first
  and when (`AlreadyAnswered`).
- Every use first applies passed deadlines (`expire`), so an answer that arrives after the
  deadline finds the request ended: silence never approves.
- A model-supplied timeout or default for a question is clamped by `[approvals.questions]`.
- Nobody answered within a step's `after_s` (`[[approvals.escalation]]`): the step's approvers
  are added to the request — those asked first may still answer — and it is delivered to them
  on every one of their channels (`escalate`, run with `expire` by the serving process).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from heron._support.clock import Clock, RealClock
from heron._support.timefmt import utc_rfc3339
from heron._support.vocabulary import ACTIVE_STATUSES, HumanDecision, Urgency
from heron.humans.approvers import Approvers, describe, may_answer
from heron.humans.config import ApprovalsConfig, clamp_seconds
from heron.humans.refusals import (
    AlreadyAnswered,
    InvalidAnswer,
    NotAnApprover,
    UnknownRequest,
    check_value,
    checked_edit,
)
from heron.humans.rules import command_of, command_words, parse_prefix, rule_covers
from heron.humans.sealing import seal, sealing_key_of
from heron.humans.signing import DecisionSigner
from heron.humans.store import (
    AlwaysRule,
    HumanRequest,
    OnTimeout,
    RequestStore,
    RuleScope,
    Settlement,
    argument_digest,
    escalation_step,
)
from heron.safety.redact import sanitize_replacement, scrub_text, scrub_value, summarize_args

__all__ = ["Channel", "RequestDesk", "RuleChoice"]

NO_APPROVER = "no approver reachable"


class Channel(Protocol):
    """A way to reach approvers (`console`, `mail`, …); its `name` is the channel part of the
    identities it reaches."""

    name: str

    async def deliver(self, request: HumanRequest) -> str:
        """Put the request in front of its approvers on this channel: `ok`, or
        `failed: <why>`. May raise; the desk records that as a failure."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class RuleChoice:
    """How far an "always" answer reaches (see `heron.humans.store.RuleScope`)."""

    scope: RuleScope = "session"
    prefix: str | None = None
    """For `command`: the command prefix, e.g. `git push`."""
    ttl_s: float | None = None
    """How long the rule lasts; unset: `[approvals] rule_ttl_s`."""


class RequestDesk:
    """See the module docstring. `approval_timeout_s` is `[approval] timeout_s`."""

    def __init__(
        self,
        store: RequestStore,
        *,
        signer: DecisionSigner,
        approvers: Approvers | None = None,
        channels: Sequence[Channel] = (),
        config: ApprovalsConfig | None = None,
        approval_timeout_s: float = 300.0,
        clock: Clock | None = None,
    ) -> None:
        self.store = store
        self.signer = signer
        self.config = config or ApprovalsConfig()
        self.approvers = approvers or Approvers.from_config(self.config.approvers)
        self.channels = {c.name: c for c in channels}
        self.approval_timeout_s = approval_timeout_s
        self.clock: Clock = clock or RealClock()

    # -- opening ----------------------------------------------------------------------------

    async def open_approval(
        self,
        *,
        session: str,
        call_id: str,
        tool: str,
        arguments: Mapping[str, Any],
        question: str | None = None,
        schema: Mapping[str, Any] | None = None,
        options: Sequence[str] = (),
        urgency: Urgency = "normal",
        risk: str | None = None,
        reason: str | None = None,
        gates_call: bool = False,
        report: bool = True,
        asker: str | None = None,
    ) -> HumanRequest:
        """Open (or reuse) an approval for one call and deliver it. The result may already be
        ended (`no_answer: no approver reachable`). `gates_call`: the engine's gate asks, and a
        yes runs the call (`heron.humans.outcomes`). `report=False`: the asker waits for the
        answer and reads it itself (the editor's approver, an MCP client's wait), so no
        watcher reports its ending to a session (it is stored as reported). `asker`: who asks
        when it is not the session's own agent (a sub-agent); the question starts with it."""
        summary = summarize_args(arguments)
        text = question or f"May heron run {tool}({summary})?"
        if asker:
            text = f"{asker} asks: {text}"
        if reason:
            text += f" Why you are asked: {reason}"
        return await self._open(
            kind="approval",
            prefix="apr",
            session=session,
            call_id=call_id,
            tool=tool,
            arguments=arguments,
            question=text,
            schema=schema,
            options=tuple(options),
            urgency=urgency,
            risk=risk,
            deadline_s=self.approval_timeout_s,
            on_timeout="no_answer",
            gates_call=gates_call,
            reported=not report,
        )

    async def open_question(
        self,
        *,
        session: str,
        call_id: str,
        question: str,
        tool: str = "request_human_input",
        arguments: Mapping[str, Any] | None = None,
        schema: Mapping[str, Any] | None = None,
        options: Sequence[str] = (),
        urgency: Urgency = "normal",
        timeout_s: float | None = None,
        default: Any = None,
        risk: str | None = None,
        report: bool = True,
    ) -> HumanRequest:
        """Open (or reuse) a question. The model's `timeout_s` and `default` are clamped by
        `[approvals.questions]`; a default that does not fit the schema or options raises
        `InvalidAnswer`. `report=False`: the asker reads the ending itself (`get`), no
        session is told of it. A schema sealed to a key (`heron.humans.sealing`) has its
        answers sealed before they are stored; one bound to a value (`heron.humans.binding`)
        takes only answers that carry it. `risk="high"`: a channel that cannot prove who
        answers (mail without a trusted verdict) may not answer it."""
        q = self.config.questions
        timeout = clamp_seconds(timeout_s, default=q.timeout_s, maximum=q.max_timeout_s)
        if not q.model_defaults:
            default = None
        if default is not None:
            check_value(default, schema=schema, options=options, what="the default")
        return await self._open(
            kind="question",
            prefix="ask",
            session=session,
            call_id=call_id,
            tool=tool,
            arguments=dict(arguments if arguments is not None else {"question": question}),
            question=question,
            schema=schema,
            options=tuple(options),
            urgency=urgency,
            risk=risk,
            deadline_s=timeout,
            on_timeout=q.on_timeout,
            default=default,
            remind_every_s=(q.remind_every_s or timeout) if q.on_timeout == "wait" else None,
            reported=not report,
        )

    async def _open(
        self,
        *,
        kind: Any,
        prefix: str,
        session: str,
        call_id: str,
        tool: str,
        arguments: Mapping[str, Any],
        deadline_s: float,
        on_timeout: OnTimeout,
        **fields: Any,
    ) -> HumanRequest:
        self.expire()
        now = self.clock.time()
        reachable = self.approvers.reachable(self.channels)
        request = HumanRequest(
            id=f"{prefix}-{uuid.uuid4().hex[:10]}",
            kind=kind,
            session=session,
            call_ids=(call_id,),
            tool=tool,
            arguments=dict(arguments),
            display_arguments=scrub_value(dict(arguments)),
            digest=argument_digest(arguments),
            approvers=reachable,
            created_at=now,
            deadline=now + deadline_s,
            on_timeout=on_timeout,
            **fields,
        )
        stored = self.store.open(request)
        if stored.id != request.id or not stored.active:
            return stored  # the same question is already out: do not ask twice
        if not reachable:
            return self._end(stored, NO_APPROVER)
        outcomes = [await self._deliver(stored, name) for name in self._route(stored)]
        if not any(o == "ok" for o in outcomes):
            return self._end(stored, f"{NO_APPROVER} (delivery failed: {'; '.join(outcomes)})")
        return self._get(stored.id)

    def _route(self, request: HumanRequest) -> list[str]:
        names = list(dict.fromkeys(i.partition(":")[0] for i in request.approvers))
        return names if request.urgency in ("high", "urgent") else names[:1]

    async def _deliver(self, request: HumanRequest, name: str) -> str:
        try:
            outcome = await self.channels[name].deliver(request)
        except Exception as exc:  # a channel's failure is this delivery's outcome, not ours
            outcome = f"failed: {type(exc).__name__}: {scrub_text(str(exc))}"
        self.store.deliver(request.id, name, outcome)
        return outcome

    def _end(self, request: HumanRequest, reason: str) -> HumanRequest:
        settled = self.store.settle(
            request.id,
            Settlement(
                status="failed",
                outcome="no_answer",
                by="policy",
                at=self.clock.time(),
                reason=reason,
                is_answer=False,
            ),
        )
        return settled.request

    # -- answering --------------------------------------------------------------------------

    def get(self, request_id: str) -> HumanRequest:
        """The request after applying passed deadlines; `UnknownRequest` if there is none."""
        self.expire()
        return self._get(request_id)

    def decide(
        self,
        request_id: str,
        decision: HumanDecision,
        *,
        channel: str,
        name: str,
        reason: str | None = None,
        rule: RuleChoice | None = None,
    ) -> HumanRequest:
        """Answer an approval. Raises `UnknownRequest`, `AlreadyAnswered`, `NotAnApprover` or
        `InvalidAnswer`; returns the settled request (and stores the rule of an `always`)."""
        request = self._answerable(request_id, channel=channel, name=name)
        if request.kind != "approval":
            raise InvalidAnswer(f"{request.id} is a question: answer it with a value")
        if decision.kind == "replace":
            decision = HumanDecision.replace(sanitize_replacement(decision.text or ""))
        if decision.kind == "edit":
            decision = HumanDecision.edit(checked_edit(request, decision.arguments or {}))
        new_rule = self._rule(request, rule or RuleChoice()) if decision.kind == "always" else None
        settled = self._settle(request, decision.to_data(), channel, name, reason, decision)
        if new_rule is not None:
            # After the decision: a crash in between loses the rule (asks again), never the
            # decision.
            self.store.add_rule(dataclasses.replace(new_rule, created_by=settled.answered_by or ""))
        return settled

    def answer(
        self,
        request_id: str,
        value: Any,
        *,
        channel: str,
        name: str,
        reason: str | None = None,
    ) -> HumanRequest:
        """Answer a question with a value (checked against its schema and options)."""
        request = self._answerable(request_id, channel=channel, name=name)
        self._fitting(request, value)
        sealed_to = sealing_key_of(request.schema)
        if sealed_to is not None:
            value = seal(str(value), sealed_to, request_id=request.id)
        return self._settle(request, {"answer": value}, channel, name, reason, None, value)

    def check_answer(self, request_id: str, value: Any) -> HumanRequest:
        """Raise what `answer` would refuse `value` for (`UnknownRequest`, `InvalidAnswer`),
        without answering: a channel that spends something on an answer (a mail reply's
        single-use token) checks first, so a refused answer loses nothing."""
        request = self.get(request_id)
        self._fitting(request, value)
        return request

    def _fitting(self, request: HumanRequest, value: Any) -> None:
        if request.kind != "question":
            raise InvalidAnswer(f"{request.id} is an approval: approve, deny, replace or edit it")
        check_value(value, schema=request.schema, options=request.options, what="the answer")

    def cancel(self, request_id: str, reason: str) -> HumanRequest:
        """End an active request as cancelled (its run went away); a no-op on ended ones."""
        request = self._get(request_id)
        return self.store.settle(
            request.id,
            Settlement(
                status="cancelled",
                outcome="no_answer",
                by="policy",
                at=self.clock.time(),
                reason=reason,
                is_answer=False,
            ),
        ).request

    def withdraw(self, session: str, reason: str) -> list[HumanRequest]:
        """Cancel every active request of `session`, whose asker is gone for good (a
        sub-agent that ended or was lost): nobody is asked about a call that cannot run."""
        active = self.store.list(statuses=ACTIVE_STATUSES, session=session)
        return [self.cancel(request.id, reason) for request in active]

    async def escalate(self) -> list[HumanRequest]:
        """Take every escalation step that has fallen due; returns the requests it widened."""
        steps = self.config.escalation
        if not steps:
            return []
        now = self.clock.time()
        widened: list[HumanRequest] = []
        for request in self.store.list(statuses=ACTIVE_STATUSES, limit=1_000_000):
            taken = escalation_step(request)
            if taken >= len(steps) or now < request.created_at + steps[taken].after_s:
                continue
            group = Approvers.from_config(steps[taken].approvers).reachable(self.channels)
            changed = self.store.escalate(request.id, taken + 1, group)
            if changed is None:
                continue  # ended, or another process took this step
            # Only the new group hears of it here; the first one was asked already.
            shown = dataclasses.replace(changed, approvers=group)
            for name in dict.fromkeys(i.partition(":")[0] for i in group):
                await self._deliver(shown, name)
            widened.append(self._get(request.id))
        return widened

    def expire(self) -> list[HumanRequest]:
        """Apply every passed deadline now; returns what changed."""
        return self.store.expire(self.clock.time())

    def _get(self, request_id: str) -> HumanRequest:
        request = self.store.get(request_id)
        if request is None:
            raise UnknownRequest(f"no request {request_id!r}")
        return request

    def _answerable(self, request_id: str, *, channel: str, name: str) -> HumanRequest:
        request = self.get(request_id)
        if not request.active:
            raise AlreadyAnswered(request)
        if not may_answer(request.approvers, channel, name):
            raise NotAnApprover(
                f"{channel}:{name} may not answer {request.id}; its approvers are "
                f"{describe(request.approvers)}"
            )
        return request

    def _rule(self, request: HumanRequest, choice: RuleChoice) -> AlwaysRule:
        if request.risk == "high":
            raise InvalidAnswer(
                f"{request.id} is a high-risk call: no 'always' rule can cover it; approve "
                "this call alone"
            )
        prefix = None
        if choice.scope == "command":
            if choice.prefix is None:
                raise InvalidAnswer("an 'always' for commands needs the command prefix")
            try:
                prefix = parse_prefix(choice.prefix)
            except ValueError as exc:
                raise InvalidAnswer(str(exc)) from exc
            command = command_of(request.arguments)
            words = None if command is None else command_words(command)
            if words is None or words[: len(prefix)] != prefix:
                raise InvalidAnswer(
                    f"{choice.prefix!r} is not a prefix of this call's plain command"
                )
        elif choice.prefix is not None:
            raise InvalidAnswer("a command prefix needs the 'command' scope")
        ttl = clamp_seconds(
            choice.ttl_s, default=self.config.rule_ttl_s, maximum=self.config.rule_max_ttl_s
        )
        now = self.clock.time()
        return AlwaysRule(
            id=f"rule-{uuid.uuid4().hex[:8]}",
            tool=request.tool,
            scope=choice.scope,
            session=None if choice.scope == "tool" else request.session,
            command_prefix=prefix,
            created_at=now,
            expires_at=now + ttl,
            created_by="",  # the approver, once the decision is settled
            request_id=request.id,
        )

    def _settle(
        self,
        request: HumanRequest,
        payload: Mapping[str, Any],
        channel: str,
        name: str,
        reason: str | None,
        decision: HumanDecision | None,
        answer: Any = None,
    ) -> HumanRequest:
        epoch_ms = int(self.clock.time() * 1000)
        by = f"{channel}:{name}"
        signature = self.signer.sign(
            request_id=request.id,
            arguments=request.arguments,
            decision=payload,
            approver=by,
            epoch_ms=epoch_ms,
        )
        result = self.store.settle(
            request.id,
            Settlement(
                status="completed",
                outcome="answered" if decision is None else decision.outcome,
                by=by,
                at=epoch_ms / 1000,
                reason=reason,
                decision=decision,
                answer=answer,
                signature=signature,
            ),
        )
        if result.settled:
            return result.request
        if result.late:
            self.expire()
        raise AlreadyAnswered(self._get(request.id))

    # -- rules ------------------------------------------------------------------------------

    def covering_rule(
        self,
        *,
        session: str,
        tool: str,
        arguments: Mapping[str, Any],
        high_risk: bool = False,
    ) -> AlwaysRule | None:
        """The live rule that approves this call, if any (never for a high-risk call)."""
        if high_risk:
            return None
        now = self.clock.time()
        for rule in self.store.rules(now=now, tool=tool):
            if rule_covers(
                rule, session=session, tool=tool, arguments=arguments, now=now, high_risk=False
            ):
                return rule
        return None

    def revoke_rule(self, rule_id: str) -> bool:
        return self.store.revoke_rule(rule_id, self.clock.time())

    # -- feedback data ----------------------------------------------------------------------

    def export(
        self, *, since: float | None = None, exact: bool = False
    ) -> Iterator[dict[str, Any]]:
        """One JSON-ready record per ended request (oldest first): the request, its arguments
        (redacted unless `exact`), decision, reason, approver and latency."""
        for r in self.store.list(since=since, limit=1_000_000):
            if r.active:
                continue
            latency = None if r.answered_at is None else round(r.answered_at - r.created_at, 3)
            yield {
                "id": r.id,
                "kind": r.kind,
                "session": r.session,
                "tool": r.tool,
                "question": r.question,
                "arguments": dict(r.arguments if exact else r.display_arguments),
                "urgency": r.urgency,
                "risk": r.risk,
                "status": r.status,
                "outcome": r.outcome,
                "decision": None if r.decision is None else r.decision.to_data(),
                "answer": r.answer,
                "reason": r.reason,
                "approver": r.answered_by,
                "created_at": utc_rfc3339(r.created_at, precision="milliseconds"),
                "answered_at": None
                if r.answered_at is None
                else utc_rfc3339(r.answered_at, precision="milliseconds"),
                "latency_s": latency,
                "signature": r.signature,
            }
