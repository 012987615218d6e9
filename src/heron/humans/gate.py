"""`DurableApprover`: the engine's approval gate, answered through durable requests.

The gate hands a prompt-required call to `defer` (`heron.turn.approval.DeferringApprover`):

- a live "always" rule that covers the call (never a high-risk one) approves it at once
  (decided by `rule:<id>`);
- otherwise a request is opened on the desk (or the identical pending one reused) and the call's
  result is a placeholder at once — "awaiting approval R from <approvers>" — so the turn goes
  on and the history stays valid for the provider; the decision, and the tool's result if it
  runs, come back later as events bound to the call id (`heron.humans.outcomes`);
- a request that no approver can be reached for ends at once; the gate then denies by policy
  ("no approver could be reached"), which is not the user's decision.

Only the gate opens requests that gate a call (`gates_call`): a model's own
`request_human_approval` is a different request (another tool, no call to run), so it can never
satisfy the gate for a tool.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from heron._support.vocabulary import Urgency
from heron.humans.approvers import describe
from heron.humans.desk import RequestDesk
from heron.humans.outcomes import awaiting_text
from heron.turn.approval import ApprovalAnswer, ApprovalRequest, Deferred, DeferredCall

__all__ = ["DurableApprover", "rule_approval"]


def rule_approval(
    desk: RequestDesk, session: str, request: ApprovalRequest, arguments: Mapping[str, Any]
) -> ApprovalAnswer | None:
    """A yes by the live "always" rule that covers this call (`rule:<id>`), if one does; never
    for a high-risk call."""
    rule = desk.covering_rule(
        session=session, tool=request.tool, arguments=arguments, high_risk=request.risk == "high"
    )
    if rule is None:
        return None
    return ApprovalAnswer(
        decision="yes", decided_by=f"rule:{rule.id}", reason=f"'always' by {rule.created_by}"
    )


class DurableApprover:
    """A `DeferringApprover` for one session over `desk`."""

    attended = False
    """Nobody is at a terminal now: a call its tool says may run unattended (a low-risk shell
    command in a containing sandbox) runs as with no operator at all; every other call that
    needs approval waits on a request instead of being denied."""

    def __init__(
        self,
        desk: RequestDesk,
        *,
        session: str,
        urgency: Urgency = "normal",
        asker: str | None = None,
    ) -> None:
        self.desk = desk
        self.session = session
        self.urgency: Urgency = urgency
        self.asker = asker
        """Who asks, when not the session's own agent (a sub-agent): named in every request."""

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer | None:
        """Not used: the gate calls `defer` when a front end has it."""
        return None

    async def defer(
        self, request: ApprovalRequest, call: DeferredCall
    ) -> Deferred | ApprovalAnswer | None:
        arguments = dict(call.arguments)
        arguments.pop("approved", None)  # the runtime's marker is not the model's argument
        by_rule = rule_approval(self.desk, self.session, request, arguments)
        if by_rule is not None:
            return by_rule
        opened = await self.desk.open_approval(
            session=self.session,
            call_id=request.call_id,
            tool=call.spec.name,
            arguments=arguments,
            schema=call.spec.parameters,
            urgency="high" if request.risk == "high" else self.urgency,
            risk=request.risk,
            reason=request.reason,
            gates_call=True,
            asker=self.asker,
        )
        if not opened.active:
            return None  # no approver reachable: denied by policy, not by a person
        return Deferred(
            request_id=opened.id, placeholder=awaiting_text(opened, describe(opened.approvers))
        )
