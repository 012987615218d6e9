"""`request_human_approval` and `request_human_input`: the model asks a person, durably.

The tools are defined over `HumanRequests`, the part of the durable request desk they need;
`DeskRequests` is it over `heron.humans` (requests stored in the state store, answered on any
channel by a configured approver, deadlines in the store). In `heron serve` a call returns at
once with a placeholder — what was asked, its request id, who may answer — and the answer
arrives later as an event bound to the call; under `heron mcp serve collaboration` the call
waits for the answer. A model's own `request_human_approval` never satisfies the engine's
approval gate for a tool: it asks a question, it grants nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from heron._support.vocabulary import Urgency
from heron.humans.approvers import describe
from heron.humans.desk import RequestDesk
from heron.humans.refusals import ended_text
from heron.humans.store import HumanRequest
from heron.tools.definition import Tool, ToolContext, ToolResult
from heron.tools.function_tool import tool

__all__ = ["DeskRequests", "HumanRequests", "asking_tools"]

# JSON values a few levels deep: enough for an answer's schema and a default.
_Scalar = str | int | float | bool | None
_Json1 = _Scalar | list[_Scalar] | dict[str, _Scalar]
_Json2 = _Scalar | list[_Json1] | dict[str, _Json1]
_Json3 = _Scalar | list[_Json2] | dict[str, _Json2]
_Json4 = _Scalar | list[_Json3] | dict[str, _Json3]


class HumanRequests(Protocol):
    """Opens durable requests to a human; each returns the text the model reads at once (the
    placeholder naming the request) and raises `ValueError` for a request it refuses."""

    async def ask_approval(
        self,
        *,
        session: str,
        call_id: str,
        question: str,
        options: Sequence[str],
        urgency: Urgency,
    ) -> ToolResult: ...

    async def ask_input(
        self,
        *,
        session: str,
        call_id: str,
        question: str,
        schema: Mapping[str, Any] | None,
        urgency: Urgency,
        timeout_s: float | None,
        default: Any,
    ) -> ToolResult: ...


# The decorators are made once: each session's closures reuse their definitions.
_REQUEST_HUMAN_APPROVAL = tool(owner="builtin")
_REQUEST_HUMAN_INPUT = tool(owner="builtin")


def asking_tools(requests: HumanRequests, *, session: str) -> list[Tool]:
    """The two tools of `session` over `requests`."""

    @_REQUEST_HUMAN_APPROVAL
    async def request_human_approval(
        ctx: ToolContext,
        question: str,
        options: list[str] | None = None,
        urgency: Urgency = "normal",
    ) -> ToolResult:
        """Ask a configured approver to approve or decline something before you do it — an
        irreversible step the user did not ask for in these words, or a value judgement that
        is theirs to make. You get a placeholder now; the decision arrives later as an event
        for this call. No answer is never a yes.

        Args:
            question: What you want to do and why, in one or two sentences, with what you
                recommend.
            options: The answers to choose from, when it is not a plain yes or no.
            urgency: `low`, `normal`, `high` or `urgent` (urgent reaches several channels).
        """
        try:
            return await requests.ask_approval(
                session=session,
                call_id=ctx.call_id,
                question=question,
                options=options or [],
                urgency=urgency,
            )
        except ValueError as exc:
            return ToolResult.fail(str(exc))

    @_REQUEST_HUMAN_INPUT
    async def request_human_input(
        ctx: ToolContext,
        question: str,
        schema: dict[str, _Json4] | None = None,
        urgency: Urgency = "normal",
        timeout_s: float | None = None,
        default: _Json3 = None,
    ) -> ToolResult:
        """Ask a person for a fact only they have (which account, an amount, a recipient).
        You get a placeholder now; the answer arrives later as an event for this call. Give a
        timeout and a safe default when the work can go on without the answer: when nobody
        answers in time, the default is the answer.

        Args:
            question: The one precise question.
            schema: A JSON Schema the answer must fit, e.g. `{"type": "integer"}`.
            urgency: `low`, `normal`, `high` or `urgent`.
            timeout_s: How long to wait (bounded by the configuration).
            default: The answer to use when nobody answers in time.
        """
        try:
            return await requests.ask_input(
                session=session,
                call_id=ctx.call_id,
                question=question,
                schema=schema,
                urgency=urgency,
                timeout_s=timeout_s,
                default=default,
            )
        except ValueError as exc:
            return ToolResult.fail(str(exc))

    return [request_human_approval, request_human_input]


class DeskRequests:
    """`HumanRequests` over the durable request desk (`heron.humans.desk.RequestDesk`).

    `wait_s=None` (in `heron serve`): the call returns at once with a placeholder, and the
    answer arrives as an event for the call (`heron.humans.outcomes.EndingReporter`). With
    `wait_s` (an MCP client, which has no event to receive): the call waits for the answer, up
    to the request's deadline and at most `wait_s`, polling the store (answers come from other
    processes), and returns it; such a request is opened with `report=False`, so no watcher
    on the same state directory also hands its ending to a session."""

    def __init__(self, desk: RequestDesk, *, wait_s: float | None = None) -> None:
        self.desk = desk
        self.wait_s = wait_s

    async def ask_approval(
        self,
        *,
        session: str,
        call_id: str,
        question: str,
        options: Sequence[str],
        urgency: Urgency,
    ) -> ToolResult:
        request = await self.desk.open_approval(
            session=session,
            call_id=call_id,
            tool="request_human_approval",
            arguments={"question": question, "options": list(options)},
            question=question,
            options=options,
            urgency=urgency,
            report=self.wait_s is None,
        )
        return await self._outcome(request)

    async def ask_input(
        self,
        *,
        session: str,
        call_id: str,
        question: str,
        schema: Mapping[str, Any] | None,
        urgency: Urgency,
        timeout_s: float | None,
        default: Any,
    ) -> ToolResult:
        request = await self.desk.open_question(
            session=session,
            call_id=call_id,
            question=question,
            schema=schema,
            urgency=urgency,
            timeout_s=timeout_s,
            default=default,
            report=self.wait_s is None,
        )
        return await self._outcome(request)

    async def _outcome(self, request: HumanRequest) -> ToolResult:
        if self.wait_s is not None and request.active:
            clock = self.desk.clock
            until = clock.time() + self.wait_s
            if request.deadline is not None:
                until = min(until, request.deadline + 1.0)
            while request.active and clock.time() < until:
                await clock.sleep(0.25)
                request = self.desk.get(request.id)
        if request.active:
            who = describe(request.approvers)
            data = {"request": request.id, "status": request.status, "approvers": who}
            return ToolResult.ok(
                f"[asked: request {request.id} waits for {who}. The answer arrives as a new "
                "event for this call; go on with what does not depend on it.]",
                data=data,
            )
        return _ended(request)


def _ended(request: HumanRequest) -> ToolResult:
    data = {
        "request": request.id,
        "status": request.status,
        "outcome": request.outcome,
        "answered_by": request.answered_by,
        "answer": request.answer,
    }
    reason = f" Reason: {request.reason}" if request.reason else ""
    if request.outcome in ("answered", "defaulted"):
        how = (
            "No answer in time; the default applies"
            if request.outcome == "defaulted"
            else (f"Answer from {request.answered_by}")
        )
        return ToolResult.ok(f"{how}: {json.dumps(request.answer)}", data=data)
    if request.outcome == "approved":
        return ToolResult.ok(f"Approved by {request.answered_by}.{reason}", data=data)
    if request.outcome == "denied":
        return ToolResult.ok(f"Declined by {request.answered_by}.{reason}", data=data)
    return ToolResult.fail(f"No answer: {ended_text(request)}. This was not the user's decision.")
