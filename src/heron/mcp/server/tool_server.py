"""`ToolServer`: heron tools served over MCP, every call through heron's own lifecycle.

A `tools/call` is one call of a one-call batch in the engine's lifecycle (`heron.turn`):
before-hooks, availability, delivery defaults, the approval-marker scrub, strict validation,
the duplicate and repeat guards, call checks, the approval gate, dispatch with its timeout and
cancellation, observer records, after-hooks, the spill of oversize output, loop detection,
bounding, receipts and the execution audit — exactly what an agent's own call gets. Each MCP
session (the `Mcp-Session-Id` of Streamable HTTP; stdio is one session) is one "turn" for the
guards, the loop detector and the "always" answers.

Approval asks the human behind the connected client (`asking`): `input_required` rounds on
protocol 2026-07-28, `elicitation/create` before it. `human` replaces that with another
approver — the seam through which heron's own durable approval requests answer later. When
nobody can be asked, a call that needs approval is denied by policy, never silently run.

The engine's events become MCP notifications on the call's own stream: progress lines are
`notifications/progress` (when the client asked for progress), and every event is a log message
(`notifications/message`, logger `heron`) at or above the level the client set with
`logging/setLevel` (on 2026-07-28, the level its request opted into). A spilled output comes
with a `resource_link` to the whole of it, readable page by page (`artifacts`).
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPDeprecationWarning

from heron._support.http_limits import guarded_uvicorn
from heron._support.limits import input_limits
from heron.artifacts.store import ArtifactStore
from heron.audit.executions import ExecutionAuditTrail
from heron.mcp.server.artifacts import ArtifactResources, TrackingSpill
from heron.mcp.server.asking import (
    APPROVAL_KEY,
    APPROVAL_SCHEMA,
    Exchange,
    Rounds,
    answer_from,
    approval_message,
    asker_for,
    uses_input_required,
)
from heron.mcp.server.lifecycle import CallRecord, ServedTools, Session
from heron.mcp.server.notifications import Notifier
from heron.tools.definition import Tool, ToolResult, ToolSpec
from heron.turn.approval import ApprovalManager, ApprovalPolicy, Approver, NoApprover
from heron.turn.cancel import CancelScope
from heron.turn.context import RuntimeKnobs
from heron.turn.extensions import CallCheck, OutputSpill
from heron.turn.hooks import ToolHook, sort_hooks
from heron.turn.observer import FanOutObserver, NullObserver, Observer
from heron.turn.receipts import ReceiptSigner

__all__ = ["ToolServer", "Transport", "mcp_annotations"]

Transport = Literal["stdio", "http"]
_SESSIONS = 256
"""MCP sessions whose guards and "always" answers are remembered (the oldest is forgotten)."""


def mcp_annotations(spec: ToolSpec) -> types.ToolAnnotations:
    """heron's annotations as MCP hints. An irreversible tool is reported destructive; a
    read-only tool is never destructive (MCP's default for that hint is true)."""
    ann = spec.annotations
    return types.ToolAnnotations(
        read_only_hint=ann.read_only,
        destructive_hint=not ann.read_only and (ann.destructive or ann.irreversible),
        idempotent_hint=ann.idempotent,
        open_world_hint=ann.open_world,
    )


@dataclass(kw_only=True)
class _Served:
    """One `tools/call` in progress, across its `input_required` rounds."""

    tool: str
    task: asyncio.Task[CallRecord]
    exchange: Exchange | None
    notifier: Notifier
    cancel: CancelScope


class ToolServer:
    """An MCP server over `tools` (see the module docstring).

    `approval` holds the policy (autonomy, `auto_approve`, `always_ask`) and the audit log;
    `human` answers approvals instead of the connected client (default: `approval`'s approver
    when it has one). `hooks`, `checks`, `knobs`, `observer`, `receipts` and `spill` are the
    engine's; `timeout_s` is the per-call timeout (`knobs.tool_timeout_s`). `audit` records
    every executed call in the execution audit trail (`heron audit`), who approved it included.
    """

    def __init__(
        self,
        tools: Sequence[Tool],
        *,
        name: str = "heron",
        version: str = "",
        approval: ApprovalManager | None = None,
        human: Approver | None = None,
        observer: Observer | None = None,
        receipts: ReceiptSigner | None = None,
        spill: OutputSpill | None = None,
        workspace: Path | None = None,
        timeout_s: float | None = None,
        hooks: Sequence[ToolHook] = (),
        checks: Sequence[CallCheck] = (),
        knobs: RuntimeKnobs | None = None,
        input_ttl_s: float = 600.0,
        audit: ExecutionAuditTrail | None = None,
    ) -> None:
        self.name = name
        self.approval = approval or ApprovalManager(policy=ApprovalPolicy())
        own = self.approval.approver
        self.human = human if human is not None else (None if isinstance(own, NoApprover) else own)
        base = knobs or RuntimeKnobs()
        self.knobs = replace(base, tool_timeout_s=timeout_s) if timeout_s is not None else base
        self.spill = TrackingSpill(spill) if spill is not None else None
        observer = observer or NullObserver()
        if audit is not None:
            observer = FanOutObserver(observer, audit)
        self.served = ServedTools(
            tools,
            name=name,
            approval=self.approval,
            human=self.human,
            observer=observer,
            receipts=receipts,
            spill=self.spill,
            workspace=workspace,
            knobs=self.knobs,
            hooks=sort_hooks(hooks),
            checks=tuple(checks),
            audit=audit,
        )
        self.tools: dict[str, Tool] = self.served.tools
        """The served tools by name (those the autonomy level lets an agent see)."""
        store = getattr(spill, "store", None)
        self.resources = (
            ArtifactResources(store, self.spill)
            if isinstance(store, ArtifactStore) and self.spill is not None
            else None
        )
        self.rounds = Rounds(ttl_s=input_ttl_s)
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._running: set[asyncio.Task[Any]] = set()
        handlers: dict[str, Any] = {}
        if self.resources is not None:
            handlers = {
                "on_list_resources": self._list_resources,
                "on_list_resource_templates": self._list_resource_templates,
                "on_read_resource": self._read_resource,
            }
        with warnings.catch_warnings():
            # `logging/setLevel` is deprecated in 2026-07-28, and what older clients use.
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            self.server: Server[Any] = Server(
                name,
                version=version,
                on_list_tools=self._list_tools,
                on_call_tool=self._call_tool,
                on_set_logging_level=self._set_logging_level,
                **handlers,
            )
        # Seals `request_state` (encrypted, bound to the request and principal, expiring).
        self.server.middleware.append(
            RequestStateBoundary(
                RequestStateSecurity.ephemeral(ttl=input_ttl_s), default_audience=name
            )
        )

    # -- sessions --------------------------------------------------------------------------

    def _session(self, ctx: ServerRequestContext[Any] | None) -> Session:
        """The session of a request: Streamable HTTP's `Mcp-Session-Id`; one for stdio (and
        in-process) clients. An HTTP request without a session id is a session of its own,
        so no answer ("always") or guard of one client can ever apply to another."""
        request = ctx.request if ctx is not None else None
        key = "default"
        if request is not None:
            headers = getattr(request, "headers", None)
            found = headers.get("mcp-session-id") if headers is not None else None
            if not found:
                return self.served.new_session()
            key = str(found)
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = self.served.new_session(
                turn_id=f"mcp-session-{len(self._sessions) + 1}"
            )
            while len(self._sessions) > _SESSIONS:
                self._sessions.popitem(last=False)
        self._sessions.move_to_end(key)
        return session

    # -- protocol handlers ------------------------------------------------------------------

    async def _list_tools(
        self, _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[self.describe(t.spec) for t in self.tools.values()])

    async def _set_logging_level(
        self, ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        self._session(ctx).log_level = params.level
        return types.EmptyResult()

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        if params.request_state is not None:
            return await self._resume(ctx, params)
        session = self._session(ctx)
        notifier = Notifier(session)
        notifier.ctx = ctx
        exchange = Exchange() if uses_input_required(ctx) else None
        asker = asker_for(ctx, exchange)
        cancel = CancelScope()
        task = asyncio.get_running_loop().create_task(
            self.served.run(
                params.name,
                dict(params.arguments or {}),
                session=session,
                asker=asker,
                sink=notifier,
                cancel=cancel,
            )
        )
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        served = _Served(
            tool=params.name, task=task, exchange=exchange, notifier=notifier, cancel=cancel
        )
        return await self._round(ctx, served)

    async def _resume(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        """The client's answer to an `input_required` round (its `request_state` is already
        unsealed and checked by the SDK's boundary)."""
        try:
            key = json.loads(params.request_state or "").get("heron")
        except (ValueError, AttributeError):
            key = None
        taken = self.rounds.take(key, params.name) if isinstance(key, str) else None
        if taken is None:
            return _error(
                "This approval request has expired or was already answered; nothing was run. "
                "Call the tool again."
            )
        question, served = taken
        assert isinstance(served, _Served) and served.exchange is not None
        response = (params.input_responses or {}).get(APPROVAL_KEY)
        result = response if isinstance(response, types.ElicitResult) else None
        question.answer.set_result(answer_from(result, served.exchange.decided_by))
        served.notifier.ctx = ctx
        return await self._round(ctx, served)

    async def _round(
        self, ctx: ServerRequestContext[Any], served: _Served
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Serve one request of a call: until it ends, or (2026 protocol) until it asks."""
        task, exchange, notifier, cancel = (
            served.task,
            served.exchange,
            served.notifier,
            served.cancel,
        )
        waits: set[asyncio.Future[Any]] = {task}
        question = None
        if exchange is not None:
            question = asyncio.get_running_loop().create_task(exchange.next_question())
            waits.add(question)
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # The client cancelled the request: the call is interrupted like an agent's.
            cancel.cancel("cancelled by the MCP client")
            await asyncio.wait({task}, timeout=self.knobs.cancel_grace_s + 1)
            raise
        finally:
            if question is not None and not question.done():
                question.cancel()
        await notifier.flush()
        notifier.ctx = None
        if question is not None and question.done() and not task.done():
            asked = question.result()
            key = self.rounds.open_round(asked, served, task, served.tool)
            return types.InputRequiredResult(
                input_requests={
                    APPROVAL_KEY: types.ElicitRequest(
                        params=types.ElicitRequestFormParams(
                            message=approval_message(asked.request),
                            requested_schema=APPROVAL_SCHEMA,
                        )
                    )
                },
                request_state=json.dumps({"heron": key}),
            )
        record = task.result()
        return self.to_mcp(record.result, record.receipt, links=self._links(record.call_id))

    async def _list_resources(
        self, _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        assert self.resources is not None
        return self.resources.list()

    async def _list_resource_templates(
        self, _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        assert self.resources is not None
        return self.resources.templates()

    async def _read_resource(
        self, _ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        assert self.resources is not None
        return self.resources.read(params.uri)

    def _links(self, call_id: str) -> list[types.ResourceLink]:
        if self.resources is None or self.spill is None:
            return []
        artifact = self.spill.artifact_of(call_id)
        link = self.resources.link(artifact) if artifact is not None else None
        return [link] if link is not None else []

    @staticmethod
    def describe(spec: ToolSpec) -> types.Tool:
        """The MCP listing entry of one tool."""
        return types.Tool(
            name=spec.name,
            description=spec.description,
            input_schema=dict(spec.parameters),
            annotations=mcp_annotations(spec),
        )

    @staticmethod
    def to_mcp(
        result: ToolResult,
        receipt: str | None = None,
        *,
        links: Sequence[types.ResourceLink] = (),
    ) -> types.CallToolResult:
        """Text content (the output, or the error and any output), structured content when
        `data` is a JSON object, `isError` for failures, the receipt in `_meta`, and a link to
        each stored full output."""
        if result.success:
            text = result.output or "(no output)"
        else:
            reason = result.error or result.output or "the tool failed without a message"
            text = f"{reason}\n{result.output}" if result.error and result.output else reason
        structured: dict[str, Any] | None = None
        if isinstance(result.data, dict):
            try:
                structured = json.loads(json.dumps(result.data))
            except (TypeError, ValueError):
                structured = None  # not JSON: the text says it all
        meta = {"heron/receipt": receipt} if receipt else None
        content: list[Any] = [types.TextContent(text=text), *links]
        return types.CallToolResult(
            content=content,
            structured_content=structured,
            is_error=not result.success,
            _meta=meta,
        )

    # -- the lifecycle ----------------------------------------------------------------------

    async def call(self, name: str, arguments: dict[str, Any]) -> tuple[ToolResult, str | None]:
        """Run one call through the lifecycle with no client to ask (approval goes to
        `human`, else is denied by policy); returns the result and its receipt (None without
        receipts or when the call did not succeed)."""
        record = await self.served.run(
            name,
            arguments,
            session=self._session(None),
            asker=None,
            sink=lambda _event: None,
            cancel=CancelScope(),
        )
        return record.result, record.receipt

    # -- transports -------------------------------------------------------------------------

    async def serve_stdio(self) -> None:
        """Serve one client on stdin/stdout until it closes the connection."""
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read, write):
            await self.server.run(read, write, self.server.create_initialization_options())

    async def serve_http(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        """Serve Streamable HTTP at `http://HOST:PORT/mcp` until interrupted; port 0 takes a
        free one. The URL is written to stderr once the socket listens."""
        import uvicorn

        app = self.server.streamable_http_app(host=host)
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen()
        shown = f"[{host}]" if ":" in host else host
        sys.stderr.write(f"heron: MCP server at http://{shown}:{sock.getsockname()[1]}/mcp\n")
        sys.stderr.flush()
        # Under the limits of every heron HTTP server; a body is one JSON-RPC message, so its
        # bound is the one of outside JSON (`[limits] max_bytes`).
        config = guarded_uvicorn(
            app, max_body=input_limits().max_bytes, log_level="warning", lifespan="on"
        )
        try:
            await uvicorn.Server(config).serve(sockets=[sock])
        finally:
            sock.close()

    async def serve(self, transport: Transport, *, host: str = "127.0.0.1", port: int = 0) -> None:
        """Serve on `transport`."""
        if transport == "stdio":
            await self.serve_stdio()
        else:
            await self.serve_http(host=host, port=port)


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)
