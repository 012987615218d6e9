"""Serve heron tools to other MCP clients, with the official SDK's low-level `Server`.

`ToolServer` turns any list of heron `Tool`s into an MCP server over stdio or Streamable HTTP:

- listing: each tool's input schema and description, and its annotations as MCP hints
  (`readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint`); only the tools the
  autonomy level lets an agent see are listed (`read-only` lists read-only tools only);
- calling, through a small heron lifecycle: strict validation with `tool.validate`, the approval
  policy, execution with a `ToolContext`, the observer, optional receipts, the spill of oversize
  output. Results are text content (plus structured content when `ToolResult.data` is a JSON
  object); failures, refusals and invalid arguments come back with `isError`.

An MCP server cannot ask anyone, so a call that needs approval under the autonomy level is
refused with heron's policy-denial text. With `autonomy="full"` calls run approved (tools that
take the runtime's `approved` marker get it, as in an agent turn).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from heron._support.canonical import canonical_json
from heron.safety.redact import scrub_value
from heron.tools.definition import Tool, ToolArgumentsError, ToolContext, ToolResult, ToolSpec
from heron.tools.registry import Autonomy, ToolRegistry
from heron.turn.approval import ApprovalManager, ApprovalPolicy, unavailable_denied
from heron.turn.extensions import OutputSpill
from heron.turn.observer import NullObserver, Observer, ToolCallRecord, ToolCallStartRecord
from heron.turn.receipts import ReceiptSigner

Transport = Literal["stdio", "http"]
OBSERVED_CHARS = 1000
_call_ids = itertools.count(1)


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


class ToolServer:
    """An MCP server over `tools`. `approval` decides which calls may run unattended (default:
    supervised autonomy); `workspace` is what tools see as `ctx.workspace`."""

    def __init__(
        self,
        tools: Sequence[Tool],
        *,
        name: str = "heron",
        version: str = "",
        approval: ApprovalManager | None = None,
        observer: Observer | None = None,
        receipts: ReceiptSigner | None = None,
        spill: OutputSpill | None = None,
        workspace: Path | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self.approval = approval or ApprovalManager(policy=ApprovalPolicy())
        autonomy: Autonomy = self.approval.policy.autonomy
        scoped = ToolRegistry(tools).scope(autonomy=autonomy)
        self.tools: dict[str, Tool] = {
            name: tool for name in scoped.names() if (tool := scoped.get(name)) is not None
        }
        self.observer = observer or NullObserver()
        self.receipts = receipts
        self.spill = spill
        self.workspace = workspace
        self.timeout_s = timeout_s
        self.server: Server[Any] = Server(
            name,
            version=version,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    # -- protocol handlers ------------------------------------------------------------------

    async def _list_tools(
        self, _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[self.describe(t.spec) for t in self.tools.values()])

    async def _call_tool(
        self, _ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        result, receipt = await self.call(params.name, dict(params.arguments or {}))
        return self.to_mcp(result, receipt)

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
    def to_mcp(result: ToolResult, receipt: str | None = None) -> types.CallToolResult:
        """Text content (the output, or the error and any output), structured content when
        `data` is a JSON object, `isError` for failures, the receipt in `_meta`."""
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
        return types.CallToolResult(
            content=[types.TextContent(text=text)],
            structured_content=structured,
            is_error=not result.success,
            _meta=meta,
        )

    # -- the lifecycle ----------------------------------------------------------------------

    async def call(self, name: str, arguments: dict[str, Any]) -> tuple[ToolResult, str | None]:
        """Run one call through validation, approval, execution, observer and receipts;
        returns the result and its receipt (None without receipts or on failure)."""
        tool = self.tools.get(name)
        if tool is None:
            known = ", ".join(sorted(self.tools)) or "none"
            return ToolResult.fail(f"no tool named {name!r} here; tools: {known}"), None
        spec = tool.spec
        call_id = f"mcp-{next(_call_ids)}"
        marker = "approved" in spec.runtime_args
        if marker:
            arguments = {**arguments, "approved": False}  # a client can never approve itself
        try:
            validated = tool.validate(arguments)
        except ToolArgumentsError as exc:
            return ToolResult.fail(
                f"invalid arguments for '{name}': {'; '.join(exc.problems)}. Nothing was run."
            ), None
        requirement = self.approval.requirement(spec)
        if requirement == "prompt":
            why = "this MCP server cannot ask an operator"
            self.approval.record_refusal(
                spec,
                arguments,
                call_id=call_id,
                turn_id=call_id,
                decided_by="policy",
                reason=why,
            )
            return ToolResult.fail(unavailable_denied(name, why)), None
        if marker:
            validated["approved"] = requirement == "approved"
        result = await self._execute(tool, validated, call_id)
        receipt = None
        if result.success and self.receipts is not None:
            receipt = self.receipts.sign(name, validated, result.output)
        return result, receipt

    async def _execute(self, tool: Tool, validated: dict[str, Any], call_id: str) -> ToolResult:
        spec = tool.spec
        start = ToolCallStartRecord(
            tool=spec.name,
            call_id=call_id,
            arguments=canonical_json(scrub_value(validated))[:OBSERVED_CHARS],
            turn_id=call_id,
            owner=spec.owner,
            channel="mcp",
        )
        self.observer.tool_call_start(start)

        async def call_tool(name: str, args: dict[str, Any]) -> ToolResult:
            # Tools calling tools (run_python) go through this same lifecycle.
            return (await self.call(name, args))[0]

        ctx = ToolContext(
            call_id=call_id,
            turn_id=call_id,
            channel="mcp",
            call_tool=call_tool,
            workspace=self.workspace,
        )
        began = time.perf_counter()
        try:
            result = await asyncio.wait_for(tool.execute(validated, ctx), self.timeout_s)
        except TimeoutError:
            result = ToolResult.fail(f"'{spec.name}' timed out after {self.timeout_s:g} s")
        except Exception as exc:
            result = ToolResult.fail(f"'{spec.name}' raised {type(exc).__name__}: {exc}")
        if not isinstance(result, ToolResult):
            result = ToolResult.fail(f"'{spec.name}' returned {type(result).__name__}")
        if self.spill is not None:
            preview = self.spill.spill(spec.name, call_id, result.output)
            if preview is not None:
                result = ToolResult(
                    success=result.success, output=preview, error=result.error, data=result.data
                )
        self.observer.tool_call_end(
            ToolCallRecord.ending(
                start,
                duration_ms=(time.perf_counter() - began) * 1000,
                success=result.success,
                status="ok" if result.success else "error",
                result=(result.output if result.success else result.error or "")[:OBSERVED_CHARS],
            )
        )
        return result

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
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
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
