"""An MCP server's request for user input, answered by a person through the durable requests.

A server asks mid-call — `elicitation/create` for peers on the older protocol, an
`input_required` round in the current one (the installed SDK turns both into one callback). In
`heron serve`, `HumanInput.for_server(name)` is that callback, over the server's `RequestDesk`:
the question becomes a durable request (`heron.humans`) that any channel answers — `heron
approvals answer ask-… '{"date": "2026-12-24"}' --json`, `heron chat`'s `/approvals`, mail, the
gateway — with the server's requested schema checked on the answer; the call waits for it, up
to the question's deadline (`[approvals.questions] timeout_s`). An answer is `accept` with the
content; no answer in time, or the request ended otherwise, is `decline` — silence never
accepts. A URL request (`mode = "url"`, e.g. a login page) asks the person to open the address
and say `done` or `decline`; heron never opens it itself.

The request's session is `#mcp/<server>`, which no conversation can be named: the answer goes
back to the server, not into any session's history (it is opened with `report=False`: the
ending reporter never hands it to a session). Without a desk (`heron run`, no operator to
ask) heron declares no elicitation capability and the server gets the protocol's error.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import mcp_types
from mcp.client.session import ClientRequestContext, ElicitationFnT

from heron.humans.desk import RequestDesk
from heron.humans.store import HumanRequest

__all__ = ["HumanInput"]

_URL_OPTIONS = ("done", "decline")
SESSION_PREFIX = "#mcp/"
"""The session of a server's question (`#mcp/<server>`): no conversation can be named so."""
_ids = itertools.count(1)


class HumanInput:
    """Answers MCP servers' input requests from the desk `desk()` gives (see the module
    docstring; `None`: nobody can be asked, every request is declined); the store is polled
    every `poll_s` seconds while a request waits. The desk is looked up at each request, so
    the servers can connect before the process that asks has opened it."""

    def __init__(self, desk: Callable[[], RequestDesk | None], *, poll_s: float = 0.25) -> None:
        self.desk = desk
        self.poll_s = poll_s

    def for_server(self, server: str) -> ElicitationFnT:
        async def elicit(
            context: ClientRequestContext, params: mcp_types.ElicitRequestParams
        ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
            return await self._ask(server, params)

        return elicit

    async def _ask(
        self, server: str, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        desk = self.desk()
        if desk is None:
            return mcp_types.ElicitResult(action="decline")
        call_id = f"mcp-input-{next(_ids)}"
        if isinstance(params, mcp_types.ElicitRequestURLParams):
            request = await desk.open_question(
                session=f"{SESSION_PREFIX}{server}",
                call_id=call_id,
                tool=f"{server} (MCP)",
                question=(
                    f"The MCP server {server!r} asks you to open {params.url} : "
                    f"{params.message} Answer 'done' when you have, or 'decline'."
                ),
                arguments={"url": params.url, "message": params.message},
                options=_URL_OPTIONS,
                report=False,
            )
        else:
            request = await desk.open_question(
                session=f"{SESSION_PREFIX}{server}",
                call_id=call_id,
                tool=f"{server} (MCP)",
                question=f"The MCP server {server!r} asks: {params.message}",
                arguments={"message": params.message},
                schema=dict(params.requested_schema),
                report=False,
            )
        ended = await self._ended(desk, request)
        if ended.outcome != "answered":
            return mcp_types.ElicitResult(action="decline")
        if isinstance(params, mcp_types.ElicitRequestURLParams):
            return mcp_types.ElicitResult(action="accept" if ended.answer == "done" else "decline")
        content: Any = ended.answer
        return mcp_types.ElicitResult(action="accept", content=content)

    async def _ended(self, desk: RequestDesk, request: HumanRequest) -> HumanRequest:
        """The request once it has ended: answers come from other processes through the
        store, so this polls it (`get` applies the deadline)."""
        found = desk.get(request.id)
        while found.active:
            await asyncio.sleep(self.poll_s)
            found = desk.get(request.id)
        return found
