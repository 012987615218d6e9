"""`EditorApprover`: the engine's approvals for an editor, on the durable request store.

When a call needs an answer, the approver opens the request on the `RequestDesk` of
`heron.humans` — the same store `heron serve` and `heron approvals` use — and, when the editor's
user is one of the request's approvers, asks in the editor too (`session/request_permission`,
with *allow once*, *allow always*, *reject once* and *reject always*). Then it waits for the
first answer from either side:

- the editor's answer is recorded through the desk as `acp:<name>` (a compare-and-set: it wins
  only while the request is still open) and signed like any other decision;
- an answer from another terminal (`heron approvals approve ID`, another channel) is seen by
  polling the store; the editor's request is then left to its late answer, which the desk
  refuses ("already answered by …") and the approver logs.

*allow once* is `yes`, *allow always* is `always` (a stored rule for this tool in this session,
and this session's allow-list), *reject once* is `no`; *reject always* is `no`, and later calls
of that tool in this ACP session are answered `no` at once without asking (heron stores no
"never" rule). A high-risk call is not offered *allow always*: no rule may cover it.

The request ends with the turn: a cancelled prompt cancels it (`cancelled`, "the prompt turn
was cancelled"), the gate's timeout (`[approval] timeout_s`) ends it `timed_out`. The turn that
asked consumes the answer itself, so the request is opened `waited` (stored as reported): no
watcher of a `heron serve` on the same state directory reports its ending into the session,
and `gates_call` stays false — the call runs here, in the waiting turn, never a second time
elsewhere.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from acp import text_block, tool_content
from acp.schema import (
    AllowedOutcome,
    PermissionOption,
    RequestPermissionResponse,
    ToolCallUpdate,
)

from heron._support.vocabulary import HumanDecision
from heron.acp.updates import CallCard
from heron.humans.approvers import describe, may_answer
from heron.humans.desk import RequestDesk, RuleChoice
from heron.humans.gate import rule_approval
from heron.humans.refusals import AlreadyAnswered, InvalidAnswer, NotAnApprover
from heron.humans.store import HumanRequest, Settlement
from heron.safety.redact import scrub_text
from heron.turn.approval import ApprovalAnswer, ApprovalRequest
from heron.turn.cancel import CancelScope

__all__ = ["OPTIONS", "Editor", "EditorApprover", "EditorChannel", "decision_of"]

CHANNEL = "acp"
OPTIONS: dict[str, PermissionOption] = {
    "allow_once": PermissionOption(option_id="allow_once", name="Allow once", kind="allow_once"),
    "allow_always": PermissionOption(
        option_id="allow_always", name="Allow always", kind="allow_always"
    ),
    "reject_once": PermissionOption(
        option_id="reject_once", name="Reject once", kind="reject_once"
    ),
    "reject_always": PermissionOption(
        option_id="reject_always", name="Reject always", kind="reject_always"
    ),
}
"""The options an editor is offered, by id (the id is also the option's kind)."""

_DECISIONS: dict[str, HumanDecision] = {
    "allow_once": HumanDecision.yes(),
    "allow_always": HumanDecision.always(),
    "reject_once": HumanDecision.no(),
    "reject_always": HumanDecision.no(),
}


def decision_of(response: RequestPermissionResponse) -> tuple[HumanDecision, str] | None:
    """The decision an editor's answer makes, with the option chosen; `None` for the
    `cancelled` outcome or an option heron did not offer."""
    outcome = response.outcome
    if not isinstance(outcome, AllowedOutcome):
        return None
    decision = _DECISIONS.get(outcome.option_id)
    return None if decision is None else (decision, outcome.option_id)


class EditorChannel:
    """The `acp` channel of the desk: approvers `acp:<name>` are reached in the editor this
    process serves (the approver asks there itself, with the call's card)."""

    name = CHANNEL

    async def deliver(self, request: HumanRequest) -> str:
        return "ok"


class Editor(Protocol):
    """What the approver needs of the ACP session: the updates sent so far flushed, a note on
    a call, the permission request itself, and the calls the editor has been shown."""

    async def flush(self) -> None: ...

    def note(self, call_id: str, text: str) -> None: ...

    async def request_permission(
        self, tool_call: ToolCallUpdate, options: list[PermissionOption], meta: dict[str, Any]
    ) -> RequestPermissionResponse: ...

    def card(self, call_id: str, tool: str, arguments: Mapping[str, Any]) -> CallCard:
        """The call's card, shown first if the editor has not seen the call yet (a call a
        tool makes through `ToolContext.call_tool`)."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class _Answer:
    """The editor's answer, once it came (`decision` None: it withdrew or failed)."""

    decision: HumanDecision | None
    option: str | None = None


class EditorApprover:
    """An `Approver` for one ACP session (see the module docstring). `name` is the editor
    user's approver name (`acp:<name>`); `client` names the editor, for the decision's
    reason."""

    def __init__(
        self,
        desk: RequestDesk,
        editor: Editor,
        *,
        session: str,
        name: str,
        client: Callable[[], str],
        poll_interval_s: float = 0.25,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.desk = desk
        self.editor = editor
        self.session = session
        self.name = name
        self.client = client
        self.poll_interval_s = poll_interval_s
        self.log = log or _stderr
        self.cancel: CancelScope | None = None
        """The running prompt's scope (set for each prompt turn)."""
        self.rejected: set[str] = set()
        """Tools answered *reject always* in this session."""
        self._late: set[asyncio.Task[None]] = set()

    @property
    def identity(self) -> str:
        return f"{CHANNEL}:{self.name}"

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer | None:
        if request.tool in self.rejected:
            return ApprovalAnswer(
                decision="no",
                decided_by=self.identity,
                reason="'reject always' earlier in this session",
            )
        card = self.editor.card(request.call_id, request.tool, request.arguments)
        arguments = dict(request.arguments)
        arguments.pop("approved", None)  # the runtime's marker is not the model's argument
        by_rule = rule_approval(self.desk, self.session, request, arguments)
        if by_rule is not None:
            return by_rule
        opened = await self.desk.open_approval(
            session=self.session,
            call_id=request.call_id,
            tool=request.tool,
            arguments=arguments,
            schema=None if card.spec is None else card.spec.parameters,
            urgency="high" if request.risk == "high" else "normal",
            risk=request.risk,
            reason=request.reason,
            report=False,
        )
        if opened.gates_call:
            # An identical call already waits on a request of `heron serve`, which runs it
            # when approved; running it here as well could run it twice.
            self.editor.note(request.call_id, f"An identical call waits on {opened.id}.")
            return None
        try:
            ended = opened if not opened.active else await self._wait(opened, request)
        except asyncio.CancelledError:
            self._withdraw(opened)
            raise
        return _answer(ended)

    async def aclose(self, grace_s: float = 0.5) -> None:
        """Stop waiting for late editor answers (one already on its way gets `grace_s`)."""
        late = list(self._late)
        if not late:
            return
        await asyncio.wait(late, timeout=grace_s)
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)

    # -- waiting ---------------------------------------------------------------------------

    async def _wait(self, opened: HumanRequest, request: ApprovalRequest) -> HumanRequest:
        elsewhere = f"heron approvals approve {opened.id}"
        editor: asyncio.Task[_Answer] | None = None
        if may_answer(opened.approvers, CHANNEL, self.name):
            await self.editor.flush()  # the call's card reaches the editor before the question
            editor = asyncio.ensure_future(self._ask_editor(opened, request, elsewhere))
        else:
            self.editor.note(
                request.call_id,
                f"Waiting for approval {opened.id} from {describe(opened.approvers)} "
                f"(`{elsewhere}`); {self.identity} is not one of its approvers.",
            )
        try:
            while True:
                if editor is not None and editor.done():
                    answered = editor.result()
                    editor = None
                    if answered.decision is not None:
                        settled = self._decide(opened, answered)
                        if settled is not None:
                            return settled
                current = self.desk.get(opened.id)  # applies passed deadlines first
                if not current.active:
                    if editor is not None:
                        self._refuse_late(editor, current)
                        editor = None
                    self.editor.note(request.call_id, _ended_note(current))
                    return current
                # Answers from other processes arrive through the store: poll it, and wake
                # at once for the editor's.
                poll = asyncio.ensure_future(asyncio.sleep(self.poll_interval_s))
                try:
                    await asyncio.wait(
                        {poll} if editor is None else {poll, editor},
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    poll.cancel()
        finally:
            if editor is not None:
                editor.cancel()

    async def _ask_editor(
        self, opened: HumanRequest, request: ApprovalRequest, elsewhere: str
    ) -> _Answer:
        card = self.editor.card(request.call_id, request.tool, request.arguments)
        options = [
            option
            for key, option in OPTIONS.items()
            if not (key == "allow_always" and opened.risk == "high")
        ]
        text = f"{opened.question}\nAlso answerable from a terminal: `{elsewhere}`"
        if opened.risk:
            text += f"\nRisk: {opened.risk}"
        tool_call = ToolCallUpdate(
            tool_call_id=request.call_id,
            title=card.title,
            kind=card.kind,
            status="pending",
            content=[tool_content(text_block(scrub_text(text)))],
            locations=card.locations or None,
        )
        meta = {"request": opened.id, "approvers": list(opened.approvers), "answer": elsewhere}
        try:
            response = await self.editor.request_permission(tool_call, options, meta)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the editor failed to answer: others still may
            self.log(f"the editor did not answer {opened.id}: {type(exc).__name__}: {exc}")
            return _Answer(decision=None)
        decided = decision_of(response)
        if decided is None:
            return _Answer(decision=None)
        return _Answer(decision=decided[0], option=decided[1])

    def _decide(self, opened: HumanRequest, answered: _Answer) -> HumanRequest | None:
        """Record the editor's answer; the request as it ended (`None`: refused, wait on)."""
        assert answered.decision is not None
        try:
            settled = self.desk.decide(
                opened.id,
                answered.decision,
                channel=CHANNEL,
                name=self.name,
                reason=f"{answered.option} in {self.client()}",
                rule=RuleChoice() if answered.decision.kind == "always" else None,
            )
        except AlreadyAnswered as exc:
            self.log(f"the editor's answer ({answered.option}) was refused: {exc}")
            return exc.request
        except (NotAnApprover, InvalidAnswer) as exc:
            self.log(f"the editor's answer ({answered.option}) was refused: {exc}")
            self.editor.note(opened.call_ids[0], f"That answer was refused: {exc}")
            return None
        if answered.option == "reject_always":
            self.rejected.add(opened.tool)
        return settled

    def _refuse_late(self, editor: asyncio.Task[_Answer], ended: HumanRequest) -> None:
        """The request ended elsewhere: the editor's answer, when it comes, is refused."""

        async def late() -> None:
            answered = await editor
            if answered.decision is None:
                return
            try:
                self.desk.decide(ended.id, answered.decision, channel=CHANNEL, name=self.name)
            except AlreadyAnswered as exc:
                self.log(f"the editor's answer ({answered.option}) was refused: {exc}")
            except (NotAnApprover, InvalidAnswer) as exc:
                self.log(f"the editor's answer ({answered.option}) was refused: {exc}")

        task = asyncio.ensure_future(late())
        self._late.add(task)
        task.add_done_callback(self._late.discard)

    def _withdraw(self, opened: HumanRequest) -> None:
        """The turn stopped waiting: the request ends with it."""
        if not opened.active:
            return
        try:
            if self.cancel is not None and self.cancel.cancelled:
                self.desk.cancel(opened.id, "the prompt turn was cancelled")
            else:  # the gate's own timeout (or the process is leaving)
                self.desk.store.settle(
                    opened.id,
                    Settlement(
                        status="timed_out",
                        outcome="no_answer",
                        by="policy",
                        at=self.desk.clock.time(),
                        reason="the turn stopped waiting for an answer",
                        is_answer=False,
                    ),
                )
        except Exception as exc:  # the turn is ending anyway; say so, do not mask it
            self.log(f"could not end {opened.id}: {type(exc).__name__}: {exc}")


def _answer(request: HumanRequest) -> ApprovalAnswer | None:
    """The gate's answer from an ended request; `None` when nobody decided (policy)."""
    decision = request.decision
    if request.status != "completed" or decision is None:
        return None
    return ApprovalAnswer(
        decision=decision.kind,
        decided_by=request.answered_by or "policy",
        replacement=decision.text,
        arguments=decision.arguments,
        reason=request.reason,
    )


def _ended_note(request: HumanRequest) -> str:
    if request.answered_by in (None, "policy"):
        return f"Approval {request.id} ended: {request.status} ({request.reason or 'no answer'})."
    return f"Approval {request.id}: {request.outcome} by {request.answered_by}."


def _stderr(text: str) -> None:
    sys.stderr.write(f"heron acp: {text}\n")
    sys.stderr.flush()
