"""The ending of a request, handed back to the session that asked — exactly once.

While a gated call waits, its place in the history holds a placeholder result ("awaiting
approval R …"). When the request ends, `EndingReporter.report` turns it into one `RequestEnding`
— what the model reads next, as a new event bound to the call id — and hands it to `publish`
(the bus, in `heron serve`); only then is the request marked reported. For a decision that
runs the tool (`yes`, `always`, `edit`) the reporter runs it first, under an idempotency record
keyed by the request id (`heron.safety.idempotency.IdempotencyStore`):

- a crash after the tool ran but before the ending was published republishes the recorded
  result (the bus keeps one event per idempotency key, `approval:<request id>`), and the tool
  does not run again;
- a crash while the tool ran leaves the record `running`: the tool is not run again (unless it
  is annotated idempotent) and the model is told the outcome is unknown (`lost`).

Silence is reported as silence: a timed-out approval says "no answer in N s", never "denied".
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from heron._support.clock import Clock
from heron._support.timefmt import utc_rfc3339
from heron._support.vocabulary import Status
from heron.agent import Agent
from heron.humans.store import HumanRequest, RequestStore
from heron.safety.idempotency import IdempotencyStore
from heron.safety.redact import summarize_args
from heron.tools.definition import ToolResult
from heron.turn.approval import ApprovalAnswer
from heron.turn.approval_audit import AuditLog, AuditRecord, Decision, audit_timestamp
from heron.turn.events import EventSink, discard

__all__ = [
    "EndingReporter",
    "RequestEnding",
    "SessionAgent",
    "awaiting_text",
    "no_answer_text",
]

IDEMPOTENCY_TOOL = "approval"
"""The ledger's tool name for executions after an approval (the key is the request id)."""


def awaiting_text(request: HumanRequest, approvers: str) -> str:
    """The placeholder result of a call waiting on `request`."""
    return (
        f"[awaiting approval {request.id} from {approvers}: '{request.tool}' has not run. "
        "The outcome (the decision, and the tool's result if it runs) arrives as a new event "
        "for this call; do not call it again meanwhile.]"
    )


def no_answer_text(request: HumanRequest) -> str:
    """What the model reads when nobody answered in time: never "denied by the user"."""
    waited = (
        ""
        if request.deadline is None
        else f" in {max(request.deadline - request.created_at, 0):g} s"
    )
    return (
        f"Not run: '{request.tool}' needed approval and there was no answer{waited} "
        f"(request {request.id}). This was not the user's decision."
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestEnding:
    """What the session is told about an ended request."""

    request: HumanRequest
    kind: Literal["tool.result", "approval.answer"]
    """`tool.result` when the call got a result (it ran, or its result was replaced);
    `approval.answer` for a refusal, no answer or a question's answer."""
    text: str
    success: bool
    status: Status
    """`completed`, or `lost` when the tool's run was cut off and may have taken effect."""
    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def idempotency_key(self) -> str:
        return f"approval:{self.request.id}"


Publish = Callable[[RequestEnding], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class SessionAgent:
    """The agent of a request's session, and where that session's turn events go."""

    agent: Agent
    sink: EventSink = discard


FindSession = Callable[[HumanRequest], SessionAgent | Awaitable[SessionAgent | None] | None]
Claims = Callable[[HumanRequest], Awaitable[bool]]


class EndingReporter:
    """Reports ended requests (see the module docstring). `sessions(request)` finds the
    request's session (`None`: gone; it may be a coroutine: `heron serve` wakes the session
    first), whose agent runs an approved call through the engine's lifecycle
    (`Agent.run_approved_call`); `max_output_chars` bounds what the model reads of a result; `audit`
    receives each gated call's decision. `claims(request)`: whether this process reports the
    request — on a store shared by several workers, only the one that holds its session does
    (the call runs in that session's agent); the others leave it alone."""

    def __init__(
        self,
        store: RequestStore,
        *,
        sessions: FindSession,
        idempotency: IdempotencyStore,
        publish: Publish,
        max_output_chars: int = 50_000,
        audit: AuditLog | None = None,
        claims: Claims | None = None,
    ) -> None:
        self.store = store
        self.claims = claims
        self.sessions = sessions
        self.idempotency = idempotency
        self.publish = publish
        self.max_output_chars = max_output_chars
        self.audit = audit

    async def report(self, *, session: str | None = None) -> list[RequestEnding]:
        """Hand every ended, unreported request (of `session`) to `publish`, oldest first."""
        done: list[RequestEnding] = []
        for request in self.store.unreported(session=session):
            if self.claims is not None and not await self.claims(request):
                continue
            ending = await self.ending(request)
            await self.publish(ending)
            if self.store.mark_reported(request.id):
                self._record(request)
            done.append(ending)
        return done

    async def watch(
        self,
        *,
        expire: Callable[[], object | Awaitable[object]],
        clock: Clock,
        interval_s: float = 0.5,
        session: str | None = None,
    ) -> None:
        """Until cancelled: apply passed deadlines (`expire`, e.g. `RequestDesk.expire`; a
        coroutine function is awaited, so it may also escalate) and report what ended, every
        `interval_s` seconds of `clock` — sooner when a deadline falls due. Answers come from
        other processes through the store, so this polls it: one indexed query per interval,
        whatever the number of pending requests."""
        while True:
            tended = expire()
            if inspect.isawaitable(tended):
                await tended
            await self.report(session=session)
            now = clock.time()
            deadline = self.store.next_deadline()
            wake = now + interval_s if deadline is None else min(now + interval_s, deadline)
            await clock.sleep_until(max(wake, now))

    def _record(self, request: HumanRequest) -> None:
        """The decision of a gated call in the approval trail, under the request's id."""
        if self.audit is None or not request.gates_call:
            return
        decision: Decision
        if request.decision is not None:
            decision = request.decision.kind
        else:
            decision = "timeout" if request.status == "timed_out" else "unavailable"
        self.audit.record(
            AuditRecord(
                timestamp=audit_timestamp(),
                tool=request.tool,
                arguments_summary=summarize_args(request.display_arguments),
                decision=decision,
                decided_by=request.answered_by or "policy",
                request_id=request.id,
                session_id=request.session,
                reason=request.reason,
                risk=request.risk,
            )
        )

    async def ending(self, request: HumanRequest) -> RequestEnding:
        """The ending of one ended request, running the tool when the decision says so."""
        decision = request.decision
        who = f"{request.answered_by} at {_when(request.answered_at)}"
        base: dict[str, Any] = {
            "tool": request.tool,
            "request": request.id,
            "outcome": request.outcome,
            "answered_by": request.answered_by,
        }
        if len(request.call_ids) > 1:
            base["calls"] = list(request.call_ids)  # identical calls that waited on it too
        if request.kind == "question":
            return self._question(request, base)
        if decision is None:
            text = (
                no_answer_text(request)
                if request.status == "timed_out"
                else f"Not run: '{request.tool}' needed approval and {request.reason or 'nobody'} "
                f"answered (request {request.id}). This was not the user's decision."
            )
            return RequestEnding(
                request=request,
                kind="approval.answer",
                text=text,
                success=False,
                status="completed",
                data=base,
            )
        reason = f" Reason: {request.reason}" if request.reason else ""
        if decision.kind == "no":
            text = f"Denied by the operator ({who}): '{request.tool}' was not run.{reason}"
            return RequestEnding(
                request=request,
                kind="approval.answer",
                text=text,
                success=False,
                status="completed",
                data=base,
            )
        if decision.kind == "replace":
            return RequestEnding(
                request=request,
                kind="tool.result",
                text=decision.text or "",
                success=True,
                status="completed",
                data={**base, "replaced": True},
            )
        if not request.gates_call:  # the model's own request_human_approval: just the answer
            return RequestEnding(
                request=request,
                kind="approval.answer",
                success=True,
                status="completed",
                text=f"Approved by {who}.{reason}",
                data=base,
            )
        arguments = dict(decision.arguments or request.arguments)
        result, status = await self._run(request, arguments)
        edited = (
            f" with edited arguments ({summarize_args(arguments)})"
            if decision.kind == "edit"
            else ""
        )
        head = f"[approval {request.id}: approved by {who}{edited}]"
        output = _bounded(result.output or result.error or "", self.max_output_chars)
        return RequestEnding(
            request=request,
            kind="tool.result",
            text=f"{head}\n{output}".rstrip(),
            success=result.success,
            status=status,
            data={**base, "success": result.success},
        )

    def _question(self, request: HumanRequest, base: dict[str, Any]) -> RequestEnding:
        if request.outcome == "answered":
            text = f"Answer from {request.answered_by}: {_value(request.answer)}"
        elif request.outcome == "defaulted":
            text = f"No answer in time; the default applies: {_value(request.answer)}"
        else:
            text = no_answer_text(request).replace("needed approval", "asked a question")
        return RequestEnding(
            request=request,
            kind="approval.answer",
            text=text,
            success=request.outcome in ("answered", "defaulted"),
            status="completed",
            data=base,
        )

    async def _run(
        self, request: HumanRequest, arguments: dict[str, Any]
    ) -> tuple[ToolResult, Status]:
        decision = request.decision
        assert decision is not None  # only a decision that runs the tool gets here
        answer = ApprovalAnswer(
            decision="edit" if decision.kind == "edit" else "yes",
            decided_by=f"{request.answered_by} (request {request.id})",
            reason=request.reason,
            arguments=decision.arguments if decision.kind == "edit" else None,
        )
        finding = self.sessions(request)
        session = await finding if inspect.isawaitable(finding) else finding
        tool = None if session is None else session.agent.registry.get(request.tool)
        if session is None or tool is None:
            return ToolResult.fail(f"'{request.tool}' is no longer available; it did not run"), (
                "completed"
            )
        if tool.spec.annotations.idempotent:
            # Safe to run again after a crash mid-run: forget a record left `running`.
            found = self.idempotency.lookup(IDEMPOTENCY_TOOL, request.id, arguments)
            if found is not None and _unknown(found):
                self.idempotency.ledger.release(IDEMPOTENCY_TOOL, request.id)

        async def action() -> ToolResult:
            outcome = await session.agent.run_approved_call(
                request.call_id, request.tool, request.arguments, answer=answer, sink=session.sink
            )
            shown = outcome.visible or outcome.output
            data = {"receipt": outcome.receipt} if outcome.receipt is not None else None
            if outcome.success:
                return ToolResult.ok(shown, data=data)
            return ToolResult.fail(shown, data=data)

        result = await self.idempotency.run_once(IDEMPOTENCY_TOOL, request.id, arguments, action)
        return result, "lost" if _unknown(result) else "completed"


def _unknown(result: ToolResult) -> bool:
    return isinstance(result.data, dict) and result.data.get("error") == "outcome_unknown"


def _when(epoch: float | None) -> str:
    return "?" if epoch is None else utc_rfc3339(epoch)


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _bounded(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[… {len(text) - limit} more characters not shown]"
