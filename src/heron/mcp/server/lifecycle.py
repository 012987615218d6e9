"""One served call through the engine's own lifecycle (`heron.turn`).

`ServedTools` holds the tools a server serves and the engine parts every call runs through —
hooks, approval, call checks, the observer, the execution audit, receipts, the spill — and
runs each `tools/call` as a one-call batch: `prepare_calls` (before-hooks, availability,
validation, the duplicate and repeat guards, checks, the approval gate), `execute_batch`
(dispatch, timeout, cancellation, observer records, after-hooks, spill) and `collect_results`
(loop detection, bounding, receipt markers). A `Session` is what lives for one MCP session,
the server's "turn".

When nobody can be asked, a prompt-required call is refused by policy (`_ServerApproval`) and
audited as such, instead of waiting for an answer that cannot come.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from heron.audit.executions import ExecutionAuditTrail
from heron.tools.definition import Tool, ToolContext, ToolResult, ToolSpec
from heron.tools.registry import Autonomy, ToolRegistry
from heron.turn.approval import (
    ApprovalManager,
    Approver,
    GateResult,
    NoApprover,
    unavailable_denied,
)
from heron.turn.call_prep import TurnGuards, prepare_calls
from heron.turn.calls import CallOutcome, ParsedCall
from heron.turn.cancel import CancelScope
from heron.turn.context import ResolvedAgentExecution, RuntimeKnobs, TurnState
from heron.turn.dispatch import execute_batch
from heron.turn.events import EventSink
from heron.turn.extensions import CallCheck, OutputSpill
from heron.turn.hooks import ToolHook
from heron.turn.loop_detector import LoopDetector
from heron.turn.observer import Observer
from heron.turn.receipts import ReceiptSigner
from heron.turn.results import collect_results

__all__ = ["NO_CLIENT_WHY", "CallRecord", "ServedTools", "Session"]

NO_CLIENT_WHY = "this MCP server cannot ask an operator"
_call_ids = itertools.count(1)


class _NoModel:
    """The engine's bundle wants a model; a served call never asks one."""

    name = "mcp-server"
    native_tools = True

    def stream(self, request: Any) -> Any:
        raise RuntimeError("an MCP server's calls never call a model")


@dataclass(kw_only=True)
class _ServerApproval(ApprovalManager):
    """The server's approval gate: when nobody can be asked, a prompt-required call is
    refused by policy (recorded as such) instead of waiting for an answer that cannot come."""

    can_ask: bool = True

    async def decide(self, spec: ToolSpec, arguments: dict[str, Any], **kwargs: Any) -> GateResult:
        if self.can_ask:
            return await super().decide(spec, arguments, **kwargs)
        self.record_refusal(
            spec,
            arguments,
            call_id=kwargs["call_id"],
            turn_id=kwargs["turn_id"],
            decided_by="policy",
            reason=NO_CLIENT_WHY,
        )
        return GateResult(
            proceed=False, status="denied", output=unavailable_denied(spec.name, NO_CLIENT_WHY)
        )


class _Recording:
    """A served tool, keeping its raw `ToolResult` (structured data included) per call id."""

    def __init__(self, tool: Tool, results: dict[str, ToolResult]) -> None:
        self.tool = tool
        self._results = results

    @property
    def spec(self) -> ToolSpec:
        return self.tool.spec

    def validate(self, arguments: Any) -> dict[str, Any]:
        return self.tool.validate(arguments)

    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        result = await self.tool.execute(arguments, ctx)
        if isinstance(result, ToolResult):
            self._results[ctx.call_id] = result
        return result


@dataclass(kw_only=True)
class Session:
    """What lives for one MCP session (the server's "turn")."""

    turn_id: str
    guards: TurnGuards = field(default_factory=TurnGuards)
    detector: LoopDetector | None = None
    """The session's loop detector (None when loop detection is off)."""
    allowlist: set[str] = field(default_factory=set)
    """Tools the client answered "always" for."""
    log_level: str | None = None
    """The level set with `logging/setLevel` (None: no log messages)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CallRecord:
    """One served call as the lifecycle ended it."""

    result: ToolResult
    receipt: str | None
    call_id: str
    status: str


class ServedTools:
    """The served tools, scoped by autonomy, and the engine parts their calls run through."""

    def __init__(
        self,
        tools: Sequence[Tool],
        *,
        name: str,
        approval: ApprovalManager,
        human: Approver | None,
        observer: Observer,
        receipts: ReceiptSigner | None,
        spill: OutputSpill | None,
        workspace: Path | None,
        knobs: RuntimeKnobs,
        hooks: tuple[ToolHook, ...],
        checks: tuple[CallCheck, ...],
        audit: ExecutionAuditTrail | None = None,
    ) -> None:
        self.name = name
        self.audit = audit
        self.approval = approval
        self.human = human
        self.observer = observer
        self.receipts = receipts
        self.spill = spill
        self.workspace = workspace
        self.knobs = knobs
        self.hooks = hooks
        self.checks = checks
        autonomy: Autonomy = approval.policy.autonomy
        self._raw: dict[str, ToolResult] = {}
        scoped = ToolRegistry([_Recording(t, self._raw) for t in tools]).scope(autonomy=autonomy)
        self.registry = scoped
        originals = {t.spec.name: t for t in tools}
        self.tools: dict[str, Tool] = {n: originals[n] for n in scoped.names() if n in originals}

    def new_session(self, turn_id: str | None = None) -> Session:
        """A new MCP session, with a loop detector set up as the knobs say."""
        loop = self.knobs.loop_detection
        detector = (
            LoopDetector(
                window=loop.window, max_repeats=loop.max_repeats, ignore_tools=loop.ignore_tools
            )
            if loop.enabled
            else None
        )
        return Session(turn_id=turn_id or f"mcp-{next(_call_ids)}", detector=detector)

    async def run(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        session: Session,
        asker: Approver | None,
        sink: EventSink,
        cancel: CancelScope,
    ) -> CallRecord:
        call_id = f"mcp-{next(_call_ids)}"
        """Run one call to its end; never raises for run outcomes (they are the result)."""
        if name not in self.tools:
            known = ", ".join(sorted(self.tools)) or "none"
            result = ToolResult.fail(f"no tool named {name!r} here; tools: {known}")
            return CallRecord(result=result, receipt=None, call_id=call_id, status="unknown")
        approver = self.human or asker
        approval = _ServerApproval(
            policy=self.approval.policy,
            approver=approver or NoApprover(),
            audit=self.approval.audit,
            session_allowlist=session.allowlist,
            auto_approvals=self.approval.auto_approvals,
            can_ask=approver is not None,
        )
        exec_ = ResolvedAgentExecution(
            model=_NoModel(),
            registry=self.registry,
            approval=approval,
            knobs=self.knobs,
            observer=self.observer,
            hooks=self.hooks,
            receipts=self.receipts,
            checks=self.checks,
            spill=self.spill,
            workspace=self.workspace,
            agent=self.name,
        )
        if self.audit is not None:
            sink = self.audit.watching(sink)  # who approved the call, for its audit row
        state = TurnState(
            history=[], sink=sink, cancel=cancel, turn_id=session.turn_id, channel="mcp"
        )
        parsed = ParsedCall(index=0, call_id=call_id, name=name, arguments=arguments)
        try:
            batch = await prepare_calls(exec_, state, [parsed], session.guards)
            await execute_batch(exec_, state, batch, parallel=False)
            outcome = batch.slots[0]
            assert outcome is not None  # execute_batch fills every slot
            message = collect_results(exec_, state, [parsed], [outcome], session.detector)
            raw = self._raw.get(call_id)
        finally:
            for key in [k for k in self._raw if k == call_id or k.startswith(call_id + ".")]:
                del self._raw[key]
        text = message.messages[0].content
        return CallRecord(
            result=_as_result(outcome, text, raw),
            receipt=outcome.receipt,
            call_id=call_id,
            status=outcome.status,
        )


def _as_result(outcome: CallOutcome, text: str, raw: ToolResult | None) -> ToolResult:
    """The lifecycle's terminal slot as a `ToolResult`: the text the model would see (bounded,
    loop-detector notes, receipt marker), and the tool's own structured data."""
    data = raw.data if raw is not None and outcome.executed else None
    if outcome.success:
        return ToolResult(success=True, output=text, data=data)
    return ToolResult(success=False, output="", error=text, data=data)
