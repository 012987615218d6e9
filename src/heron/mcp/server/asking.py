"""Asking the connected MCP client to approve a call, the way the negotiated protocol does it.

heron's approval gate asks an `Approver`. When heron serves its tools over MCP, the person who
can answer is behind the client, so the approver asks the client:

- protocol 2026-07-28 and later: the `tools/call` answers `input_required` with a form
  elicitation and an opaque `request_state`; the client asks its user and retries the call with
  the answer. heron keeps the call's lifecycle waiting in between (`Rounds`): the state names
  one pending question, is sealed by the SDK's `RequestStateBoundary` (encrypted, bound to the
  method, tool, arguments, audience and authenticated principal, expiring) and is single-use —
  a replayed or expired state answers nothing;
- older protocols: an `elicitation/create` request in the middle of the call;
- a client that declared no form elicitation cannot be asked: the call is denied by policy.

The answer is `yes`, `no` or `always` (this tool for the rest of the MCP session); a declined
form is a `no`, a cancelled one no answer at all (never an approval).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp_types.version import is_version_at_least

from heron.turn.approval import ApprovalAnswer, ApprovalRequest, Approver

__all__ = [
    "APPROVAL_KEY",
    "APPROVAL_SCHEMA",
    "ElicitingApprover",
    "Exchange",
    "ExchangeApprover",
    "Rounds",
    "answer_from",
    "approval_message",
    "client_can_be_asked",
    "uses_input_required",
]

INPUT_REQUIRED_VERSION = "2026-07-28"
APPROVAL_KEY = "heron_approval"
"""The key of heron's question in `input_requests` / `input_responses`."""

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {
            "type": "string",
            "title": "Run this tool call?",
            "description": (
                "yes: run it once; always: run this tool without asking again in this session; "
                "no: do not run it"
            ),
            "enum": ["yes", "no", "always"],
        }
    },
    "required": ["decision"],
}


def uses_input_required(ctx: ServerRequestContext[Any]) -> bool:
    """Whether this request's protocol asks through `input_required` rounds."""
    return is_version_at_least(ctx.protocol_version, INPUT_REQUIRED_VERSION)


def client_can_be_asked(ctx: ServerRequestContext[Any]) -> bool:
    """Whether the client declared form elicitation (a bare `elicitation: {}` counts) and,
    on older protocols, this request can carry a server-to-client request."""
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None or (elicitation.form is None and elicitation.url is not None):
        return False
    return uses_input_required(ctx) or ctx.session.can_send_request


def approval_message(request: ApprovalRequest) -> str:
    why = f"\nWhy you are asked: {request.reason}" if request.reason else ""
    return f"heron wants to run {request.tool}\n{request.summary}{why}"


def answer_from(result: types.ElicitResult | None, decided_by: str) -> ApprovalAnswer | None:
    """An approval answer from the client's elicitation result: accept with a decision,
    decline (= no), cancel or anything unusable (= no answer)."""
    if result is None:
        return None
    if result.action == "decline":
        return ApprovalAnswer(decision="no", decided_by=decided_by, reason="declined")
    if result.action != "accept" or not result.content:
        return None
    decisions: dict[object, Literal["yes", "no", "always"]] = {
        "yes": "yes",
        "no": "no",
        "always": "always",
    }
    decision = decisions.get(result.content.get("decision"))
    return None if decision is None else ApprovalAnswer(decision=decision, decided_by=decided_by)


def _client_name(ctx: ServerRequestContext[Any]) -> str:
    params = ctx.session.client_params
    name = params.client_info.name if params is not None and params.client_info else None
    return f"mcp-client:{name or 'unknown'}"


class ElicitingApprover:
    """Asks through an `elicitation/create` request during the call (older protocols)."""

    def __init__(self, ctx: ServerRequestContext[Any]) -> None:
        self._ctx = ctx

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer | None:
        ctx = self._ctx
        result = await ctx.session.elicit_form(
            approval_message(request), APPROVAL_SCHEMA, related_request_id=ctx.request_id
        )
        return answer_from(result, _client_name(ctx))


@dataclass(kw_only=True)
class _Question:
    request: ApprovalRequest
    answer: asyncio.Future[ApprovalAnswer | None]


class Exchange:
    """The conversation of one `tools/call` that asks its client in `input_required` rounds:
    the approver posts a question, the request handler returns it to the client."""

    def __init__(self) -> None:
        self._questions: asyncio.Queue[_Question] = asyncio.Queue()
        self.decided_by = "mcp-client:unknown"

    def post(self, request: ApprovalRequest) -> asyncio.Future[ApprovalAnswer | None]:
        answer: asyncio.Future[ApprovalAnswer | None] = asyncio.get_running_loop().create_future()
        self._questions.put_nowait(_Question(request=request, answer=answer))
        return answer

    async def next_question(self) -> _Question:
        return await self._questions.get()


class ExchangeApprover:
    """Asks through `input_required` rounds (protocol 2026-07-28 and later)."""

    def __init__(self, exchange: Exchange) -> None:
        self._exchange = exchange

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer | None:
        return await self._exchange.post(request)


@dataclass(kw_only=True)
class _Pending:
    question: _Question
    call: Any
    tool: str
    expires: float


@dataclass(kw_only=True)
class Rounds:
    """Calls waiting for their client's answer between `input_required` rounds.

    `open_round` files a question (and whatever the server needs to resume `call`) under a
    fresh single-use key, the `request_state`; `take` hands it back exactly once, and only for
    the same tool. A question whose call ended (its approval timed out) is forgotten with it;
    one left unanswered past `ttl_s` gets no answer, which never approves.
    """

    ttl_s: float = 600.0
    clock: Callable[[], float] = time.monotonic
    _pending: dict[str, _Pending] = field(default_factory=dict)

    def open_round(self, question: _Question, call: Any, task: asyncio.Task[Any], tool: str) -> str:
        self._expire()
        key = secrets.token_urlsafe(18)
        self._pending[key] = _Pending(
            question=question, call=call, tool=tool, expires=self.clock() + self.ttl_s
        )
        task.add_done_callback(lambda _t: self._pending.pop(key, None))
        return key

    def take(self, key: str, tool: str) -> tuple[_Question, Any] | None:
        self._expire()
        pending = self._pending.get(key)
        if pending is None or pending.tool != tool:
            return None
        del self._pending[key]
        return pending.question, pending.call

    def __len__(self) -> int:
        return len(self._pending)

    def _expire(self) -> None:
        now = self.clock()
        for key in [k for k, p in self._pending.items() if p.expires <= now]:
            pending = self._pending.pop(key)
            if not pending.question.answer.done():
                pending.question.answer.set_result(None)  # no answer: never an approval


def asker_for(ctx: ServerRequestContext[Any] | None, exchange: Exchange | None) -> Approver | None:
    """The approver that asks this request's client, or None when it cannot be asked."""
    if ctx is None or not client_can_be_asked(ctx):
        return None
    if uses_input_required(ctx):
        if exchange is None:
            return None
        exchange.decided_by = _client_name(ctx)
        return ExchangeApprover(exchange)
    return ElicitingApprover(ctx)
