"""heron as an MCP client: a manager of server connections and the `Tool` wrapping MCP tools.

`McpClientManager` owns one connection per configured server, built on the official SDK's
`mcp.Client` (stdio or Streamable HTTP):

- **lazy**: nothing starts until a server is needed. A pinned server's catalogue comes from its
  pin, so listing tools does not start it either; the first call does.
- **checked**: at start the server's tools are listed and verified against the trust pin (see
  `heron.mcp.trust`); a changed version or definition refuses the server until re-approved.
  While running it is re-checked every `health_interval_s` (a server that changes its tools
  mid-session is refused from then on).
- **self-healing**: a call in flight when the server dies gets an error result saying the
  outcome is unknown; the next call starts the server again. Repeated failures back off
  exponentially, and a call during the back-off fails at once with the retry time.
- **frugal**: a server idle for `idle_timeout_s` is stopped.

Each SDK client lives in its own task (the SDK's transports are anyio context managers that
must be entered and left by the same task); calls are made from the caller's task, so
cancelling the caller cancels the request and the SDK sends MCP cancellation to the server.

`McpTool` is one MCP tool as a heron `Tool`: namespaced `<server>__<tool>`, owner
`mcp:<server>`, arguments validated strictly against the server's schema, progress
notifications forwarded to `ctx.progress`, structured content carried in `ToolResult.data`.
The server's annotations are hints: unless the server is `trusted`, heron assumes the tool may
write, destroy and reach the outside world.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from typing import IO, Any, Literal

import jsonschema
import mcp_types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from heron.errors import HeronError
from heron.mcp.config import McpConfig, McpServerConfig
from heron.mcp.trust import (
    Finding,
    PinCheck,
    ServerIdentity,
    ServerPin,
    ToolDefinition,
    TrustStore,
    compare_pin,
    definitions_digest,
    launch_identity,
    scan_definitions,
)
from heron.tools.definition import (
    Tool,
    ToolAnnotations,
    ToolArgumentsError,
    ToolContext,
    ToolResult,
    ToolSpec,
)
from heron.tools.function_tool import tool as function_tool
from heron.tools.validation import SchemaValidator

__all__ = [
    "McpClientManager",
    "McpPrompt",
    "McpPromptArgument",
    "McpPromptResult",
    "McpResource",
    "McpResourceContent",
    "McpTool",
    "ServerRefused",
    "ServerStatus",
    "ServerUnavailable",
    "resource_tools",
]

_LIST_PAGE_CAP = 100
_STDERR_TAIL = 1500
_STDERR_MESSAGE = 400
_CLOSE_TIMEOUT_S = 10.0


class ServerUnavailable(HeronError):
    """A server cannot be used right now (not configured, cannot start, backing off)."""

    def __init__(self, server: str, reason: str) -> None:
        self.server = server
        self.reason = reason
        super().__init__(f"MCP server {server!r} is unavailable: {reason}")


class ServerRefused(ServerUnavailable):
    """A server is refused by the trust pin until an operator (re-)approves it."""

    def __init__(
        self, server: str, reason: str, *, check: PinCheck, findings: Sequence[Finding] = ()
    ) -> None:
        self.check = check
        self.findings = tuple(findings)
        super().__init__(server, reason)


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerStatus:
    """What `heron mcp status` shows for one server."""

    name: str
    transport: Literal["stdio", "http"]
    state: Literal["stopped", "running", "backing-off", "refused"]
    starts: int
    """How many times the server was started in this process."""
    crashes: int
    """Connections that ended under a call or a health check."""
    failures: int
    """Consecutive failed starts and crashes since the last successful call."""
    retry_in_s: float | None
    last_error: str | None
    server_version: str
    tools: int | None
    """Tools the server lists (None when unknown: never started and not pinned)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class McpResource:
    server: str
    uri: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class McpResourceContent:
    uri: str
    mime_type: str | None = None
    text: str | None = None
    blob: bytes | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class McpPromptArgument:
    name: str
    description: str | None = None
    required: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class McpPrompt:
    server: str
    name: str
    title: str | None = None
    description: str | None = None
    arguments: tuple[McpPromptArgument, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class McpPromptResult:
    description: str | None
    messages: tuple[tuple[str, str], ...]
    """(role, rendered text) per message."""


# -- result rendering -----------------------------------------------------------------------


def _render_block(block: Any) -> str:
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
        size = len(block.data) * 3 // 4
        return f"[{block.type}: {block.mime_type}, about {size} bytes]"
    if isinstance(block, mcp_types.ResourceLink):
        label = f" ({block.name})" if block.name and block.name != block.uri else ""
        return f"[resource link: {block.uri}{label}]"
    if isinstance(block, mcp_types.EmbeddedResource):
        res = block.resource
        if isinstance(res, mcp_types.TextResourceContents):
            return f"[resource {res.uri}]\n{res.text}"
        size = len(res.blob) * 3 // 4
        return f"[resource {res.uri}: {res.mime_type or 'binary'}, about {size} bytes]"
    return f"[{getattr(block, 'type', 'unknown')} content]"


def render_call_result(result: mcp_types.CallToolResult) -> ToolResult:
    """Turn an MCP `CallToolResult` into a heron `ToolResult`.

    Text blocks become the output; other blocks are summarised in place. Structured content
    goes to `data` (its JSON is the output when there is no text); without structured content,
    non-text blocks are kept in `data["content"]`. `isError` makes a failed result.
    """
    text = "\n".join(_render_block(b) for b in result.content)
    data: Any = result.structured_content
    if data is None and any(not isinstance(b, mcp_types.TextContent) for b in result.content):
        data = {"content": [b.model_dump(by_alias=True, exclude_none=True) for b in result.content]}
    if result.is_error:
        return ToolResult.fail(text or "the tool reported an error without details", data=data)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    return ToolResult.ok(text, data=data)


def _definition(server: str, tool: mcp_types.Tool) -> ToolDefinition:
    annotations = (
        tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else {}
    )
    return ToolDefinition(
        server=server,
        name=tool.name,
        title=tool.title,
        description=tool.description or "",
        input_schema=tool.input_schema,
        output_schema=tool.output_schema,
        annotations=annotations,
    )


def _progress_line(progress: float, total: float | None, message: str | None) -> str:
    amount = f"{progress:g}/{total:g}" if total else f"{progress:g}"
    return f"{message} ({amount})" if message else f"progress {amount}"


def _heron_version() -> str:
    try:
        return metadata.version("heron")
    except metadata.PackageNotFoundError:
        return "0"


# -- one live connection --------------------------------------------------------------------


class _Connection:
    """One running SDK client, owned by its own task."""

    def __init__(self, name: str, config: McpServerConfig, clock: Callable[[], float]) -> None:
        self.name = name
        self.config = config
        self._clock = clock
        self.client: Client | None = None
        self.definitions: tuple[ToolDefinition, ...] = ()
        self.digest = ""
        self.server_version = ""
        self.in_flight = 0
        self.last_used = clock()
        self.broken = False
        self.refusal: ServerRefused | None = None
        self.closing = asyncio.Event()
        self.done = asyncio.Event()
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task[None] | None = None
        self._errlog: IO[str] | None = None
        self._final_stderr = ""
        self.on_health: Callable[[_Connection], Any] | None = None

    @property
    def usable(self) -> bool:
        return self.client is not None and not self.broken and not self.closing.is_set()

    def touch(self) -> None:
        self.last_used = self._clock()

    @contextlib.contextmanager
    def busy(self, *, use: bool = True) -> Iterator[Client]:
        """Mark a request in flight (the idle timer never stops a busy server). `use=False`
        is for heron's own requests (health checks), which must not keep a server alive."""
        client = self.client
        if client is None or self.broken:
            raise ServerUnavailable(self.name, "not connected")
        self.in_flight += 1
        if use:
            self.touch()
        try:
            yield client
        finally:
            self.in_flight -= 1
            if use:
                self.touch()

    def stderr_summary(self) -> str:
        """The end of the server's stderr on one line, short enough for an error message."""
        text = " ".join(self.stderr_tail().split())
        return text if len(text) <= _STDERR_MESSAGE else "…" + text[-_STDERR_MESSAGE:]

    def stderr_tail(self) -> str:
        """The last lines the server wrote to stderr (stdio servers)."""
        log = self._errlog
        if log is None or log.closed:
            return self._final_stderr
        try:
            # pread leaves the file offset alone: the server writes through a shared offset.
            fd = log.fileno()
            size = os.fstat(fd).st_size
            data = os.pread(fd, _STDERR_TAIL, max(0, size - _STDERR_TAIL))
        except (OSError, ValueError):
            return ""
        return data.decode("utf-8", errors="replace").strip()

    def _build(self) -> Client:
        cfg = self.config
        info = mcp_types.Implementation(name="heron", version=_heron_version())
        if cfg.command is not None:
            self._errlog = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115  (closed by `close`)
            params = StdioServerParameters(
                command=cfg.command,
                args=list(cfg.args),
                env=cfg.resolved_env() or None,
                cwd=cfg.cwd,
            )
            transport: Any = stdio_client(params, errlog=self._errlog)
        else:
            assert cfg.url is not None
            http = create_mcp_http_client(headers=cfg.resolved_headers() or None)
            transport = _HttpTransport(cfg.url, http)
        return Client(transport, mode=cfg.protocol, cache=None, client_info=info)

    async def open(self) -> None:
        """Start the server and connect; raises on failure (the connection is then closed)."""
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"mcp-server-{self.name}"
        )
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), self.config.startup_timeout_s)
        except BaseException:
            await self.close()
            raise

    async def _run(self) -> None:
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(self._build())
                self.client = client
                self.touch()
                info = client.server_info
                self.server_version = f"{info.name}/{info.version}" if info else ""
                self._ready.set_result(None)
                await self._watch()
        except BaseException as exc:
            if not self._ready.done():
                if isinstance(exc, asyncio.CancelledError):
                    self._ready.cancel()
                else:
                    self._ready.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self.client = None
            self.broken = True
            self.done.set()

    async def _watch(self) -> None:
        """Wait for close; meanwhile stop when idle and run the periodic health check."""
        cfg = self.config
        next_health = self._clock() + (cfg.health_interval_s or 0)
        while not self.closing.is_set() and not self.broken:
            now = self._clock()
            waits = []
            if cfg.idle_timeout_s is not None:
                idle_left = self.last_used + cfg.idle_timeout_s - now
                if idle_left <= 0 and self.in_flight == 0:
                    return
                # A call still running past the idle time: look again one idle period later.
                waits.append(idle_left if idle_left > 0 else cfg.idle_timeout_s)
            if cfg.health_interval_s is not None:
                if now >= next_health:
                    if self.on_health is not None:
                        await self.on_health(self)
                    next_health = self._clock() + cfg.health_interval_s
                    continue
                waits.append(next_health - now)
            try:
                await asyncio.wait_for(self.closing.wait(), min(waits) if waits else None)
            except TimeoutError:
                continue

    async def list_definitions(self, *, use: bool = True) -> tuple[ToolDefinition, ...]:
        found: list[ToolDefinition] = []
        cursor: str | None = None
        with self.busy(use=use) as client:
            for _ in range(_LIST_PAGE_CAP):
                page = await client.list_tools(cursor=cursor)
                found.extend(_definition(self.name, t) for t in page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
        return tuple(found)

    async def close(self) -> None:
        """Stop the server (bounded), whatever state the connection is in."""
        self.closing.set()
        task = self._task
        if task is not None and not task.done():
            if not self._ready.done():
                task.cancel()  # still connecting: there is no session to wind down
            done, _ = await asyncio.wait({task}, timeout=_CLOSE_TIMEOUT_S)
            if not done:
                task.cancel()
                await asyncio.wait({task}, timeout=_CLOSE_TIMEOUT_S)
        if self._errlog is not None and not self._errlog.closed:
            self._final_stderr = self.stderr_tail()
            self._errlog.close()


class _HttpTransport:
    """Streamable HTTP transport that owns its HTTP client (so headers can be set)."""

    def __init__(self, url: str, http: Any) -> None:
        self._url = url
        self._http = http
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> Any:
        await self._stack.enter_async_context(self._http)
        return await self._stack.enter_async_context(
            streamable_http_client(self._url, http_client=self._http)
        )

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()


# -- the manager ----------------------------------------------------------------------------


@dataclass(kw_only=True)
class _Slot:
    name: str
    config: McpServerConfig
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    conn: _Connection | None = None
    starts: int = 0
    crashes: int = 0
    failures: int = 0
    retry_at: float = 0.0
    last_error: str | None = None
    refusal: ServerRefused | None = None
    refused_pin_at: float | None = None
    """`approved_at` of the pin in force when the server was refused (None: no pin)."""
    findings: tuple[Finding, ...] = ()
    known_tools: int | None = None


class McpClientManager:
    """Connections to the configured MCP servers, started on first use.

    Use as an async context manager (or call `aclose()`) so servers are stopped at the end.
    `trust=None` disables pinning (findings are still computed); with a `TrustStore`, servers
    are verified at every start and refused when they changed.
    """

    def __init__(
        self,
        config: McpConfig | Mapping[str, McpServerConfig],
        *,
        trust: TrustStore | None = None,
        builtin_names: Sequence[str] = (),
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(config, McpConfig):
            servers = config.enabled_servers()
            self.approval: Literal["first-use", "explicit"] = config.approval
        else:
            servers = {n: c for n, c in sorted(config.items()) if c.enabled}
            self.approval = "first-use"
        self._slots = {n: _Slot(name=n, config=c) for n, c in servers.items()}
        self._trust = trust
        self._builtin_names = tuple(builtin_names)
        self._backoff_base = backoff_base_s
        self._backoff_max = backoff_max_s
        self._clock = clock

    async def __aenter__(self) -> McpClientManager:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def servers(self) -> list[str]:
        """Configured (enabled) server names, in name order."""
        return list(self._slots)

    def config(self, server: str) -> McpServerConfig:
        return self._slot(server).config

    def _slot(self, server: str) -> _Slot:
        slot = self._slots.get(server)
        if slot is None:
            raise ServerUnavailable(server, "no such server is configured (or it is disabled)")
        return slot

    # -- lifecycle ---------------------------------------------------------------------------

    def _backoff(self, failures: int) -> float:
        # The first retry is immediate ("the next call reconnects"); then exponential.
        if failures <= 1:
            return 0.0
        return float(min(self._backoff_base * 2 ** (failures - 2), self._backoff_max))

    def _note_failure(self, slot: _Slot, reason: str) -> None:
        slot.failures += 1
        slot.last_error = reason
        slot.retry_at = self._clock() + self._backoff(slot.failures)

    async def _connection(self, server: str) -> _Connection:
        slot = self._slot(server)
        async with slot.lock:
            conn = slot.conn
            if conn is not None and conn.usable:
                return conn
            if conn is not None:
                slot.conn = None
                if conn.refusal is not None:
                    self._refuse(slot, conn.refusal)
                await conn.close()
            if slot.refusal is not None and not self._reapproved(slot):
                old = slot.refusal  # a fresh exception per call: tracebacks must not pile up
                raise ServerRefused(server, old.reason, check=old.check, findings=old.findings)
            wait = slot.retry_at - self._clock()
            if wait > 0:
                raise ServerUnavailable(
                    server,
                    f"{slot.last_error or 'it failed'}; heron retries in {wait:.1f}s "
                    f"(failure {slot.failures} in a row)",
                )
            problems = slot.config.credential_problems(datetime.now(UTC))
            if problems:
                slot.last_error = "; ".join(problems)
                raise ServerUnavailable(server, slot.last_error)
            try:
                conn = await self._open(slot)
            except ServerRefused as refused:
                self._refuse(slot, refused)
                raise
            except Exception as exc:
                reason = _describe_start_failure(exc)
                self._note_failure(slot, reason)
                raise ServerUnavailable(server, reason) from exc
            slot.conn = conn
            slot.starts += 1
            return conn

    def _refuse(self, slot: _Slot, refused: ServerRefused) -> None:
        slot.refusal = refused
        slot.last_error = refused.reason
        pin = self._trust.get(slot.name) if self._trust is not None else None
        slot.refused_pin_at = pin.approved_at if pin is not None else None

    def _reapproved(self, slot: _Slot) -> bool:
        """Clear a refusal when the pin was (re-)approved since, e.g. by another process."""
        if self._trust is None:
            return False
        pin = self._trust.get(slot.name)
        current = pin.approved_at if pin is not None else None
        if current is None or current == slot.refused_pin_at:
            return False
        slot.refusal = None
        slot.refused_pin_at = None
        return True

    async def _open(self, slot: _Slot) -> _Connection:
        conn = _Connection(slot.name, slot.config, self._clock)
        try:
            await conn.open()
        except Exception as exc:
            tail = conn.stderr_summary()
            if tail:
                reason = f"{_describe_start_failure(exc)}; server stderr: {tail}"
                raise RuntimeError(reason) from exc
            raise
        try:
            definitions = await asyncio.wait_for(
                conn.list_definitions(), slot.config.startup_timeout_s
            )
            identity = self._identity(slot, conn.server_version)
            self._verify(slot, identity, definitions)
        except BaseException:
            await conn.close()
            raise
        conn.definitions = definitions
        conn.digest = definitions_digest(definitions)
        slot.known_tools = len(definitions)
        conn.on_health = self._health_check
        return conn

    def _identity(self, slot: _Slot, server_version: str) -> ServerIdentity:
        base = launch_identity(slot.config)
        return ServerIdentity(
            launch=base.launch, package_version=base.package_version, server_version=server_version
        )

    def _verify(
        self, slot: _Slot, identity: ServerIdentity, definitions: Sequence[ToolDefinition]
    ) -> None:
        """Check a freshly started server against its pin; pin it on first use if allowed."""
        others = [
            d
            for other in self._slots.values()
            if other.name != slot.name and other.conn is not None
            for d in other.conn.definitions
        ]
        findings = [
            f
            for f in scan_definitions([*definitions, *others], builtin_names=self._builtin_names)
            if f.server == slot.name
        ]
        slot.findings = tuple(findings)
        if self._trust is None:
            return
        pin = self._trust.get(slot.name)
        check = compare_pin(pin, identity, definitions)
        if check.status == "match":
            return
        if check.status == "changed":
            raise ServerRefused(
                slot.name,
                "it changed since it was approved ("
                + "; ".join(check.changes)
                + f"). Review the diff and re-approve with `heron mcp approve {slot.name}`",
                check=check,
                findings=findings,
            )
        if self.approval == "explicit":
            raise ServerRefused(
                slot.name,
                f"it has not been approved yet; run `heron mcp approve {slot.name}`",
                check=check,
                findings=findings,
            )
        high = [f for f in findings if f.severity == "high"]
        if high:
            raise ServerRefused(
                slot.name,
                "its tool descriptions look like prompt injection ("
                + "; ".join(f"{f.tool}: {f.message}" for f in high)
                + f"); inspect it and approve explicitly with `heron mcp approve {slot.name}`",
                check=check,
                findings=findings,
            )
        self._trust.approve(slot.name, identity, definitions)

    async def _health_check(self, conn: _Connection) -> None:
        """Re-list the tools of a running server: a dead server or changed tools end it."""
        slot = self._slots[conn.name]
        try:
            definitions = await asyncio.wait_for(
                conn.list_definitions(use=False), conn.config.startup_timeout_s
            )
        except Exception as exc:
            conn.broken = True
            slot.crashes += 1
            self._note_failure(slot, f"health check failed: {_describe_start_failure(exc)}")
            return
        if definitions_digest(definitions) != conn.digest:
            identity = self._identity(slot, conn.server_version)
            check = compare_pin(_pin_of(conn, identity), identity, definitions)
            conn.refusal = ServerRefused(
                conn.name,
                "its tool definitions changed while it was running ("
                + "; ".join(check.changes)
                + f"); re-approve with `heron mcp approve {conn.name}`",
                check=check,
            )
            conn.broken = True

    async def start(self, server: str) -> None:
        """Start `server` now unless it runs, with the same checks as a start on first use
        (credentials, back-off, trust pin). Raises `ServerUnavailable` / `ServerRefused`."""
        await self._connection(server)

    async def stop(self, server: str) -> None:
        """Stop a server now; the next use starts it again."""
        slot = self._slot(server)
        async with slot.lock:
            conn, slot.conn = slot.conn, None
        if conn is not None:
            await conn.close()

    async def aclose(self) -> None:
        """Stop every server."""
        await asyncio.gather(*(self.stop(name) for name in self._slots))

    async def wait_stopped(self, server: str, within_s: float) -> bool:
        """Wait (at most `within_s`) until the server's current connection has ended."""
        conn = self._slot(server).conn
        if conn is None:
            return True
        try:
            await asyncio.wait_for(conn.done.wait(), within_s)
        except TimeoutError:
            return False
        return True

    def status(self) -> list[ServerStatus]:
        """One status per configured server, in name order."""
        now = self._clock()
        out = []
        for slot in self._slots.values():
            conn = slot.conn
            running = conn is not None and conn.usable
            if slot.refusal is not None or (conn is not None and conn.refusal is not None):
                state: Literal["stopped", "running", "backing-off", "refused"] = "refused"
            elif running:
                state = "running"
            elif slot.retry_at > now:
                state = "backing-off"
            else:
                state = "stopped"
            known = slot.known_tools
            if known is None and self._trust is not None:
                pin = self._trust.get(slot.name)
                known = len(pin.definitions) if pin is not None else None
            out.append(
                ServerStatus(
                    name=slot.name,
                    transport=slot.config.transport,
                    state=state,
                    starts=slot.starts,
                    crashes=slot.crashes,
                    failures=slot.failures,
                    retry_in_s=max(slot.retry_at - now, 0.0) if slot.retry_at > now else None,
                    last_error=slot.last_error,
                    server_version=conn.server_version if conn is not None else "",
                    tools=known,
                )
            )
        return out

    def findings(self, server: str | None = None) -> list[Finding]:
        """Scan findings from the last start of `server` (or of every server)."""
        slots = [self._slot(server)] if server is not None else list(self._slots.values())
        return [f for s in slots for f in s.findings]

    async def scan(self) -> list[Finding]:
        """Scan every server's definitions together (starting servers that are neither running
        nor pinned): injected instructions, cross-server tool references and shadowing."""
        definitions: list[ToolDefinition] = []
        for name in self._slots:
            with contextlib.suppress(ServerUnavailable):
                definitions.extend(await self.definitions(name))
        return scan_definitions(definitions, builtin_names=self._builtin_names)

    async def check_health(self, server: str) -> bool:
        """Check a running server now (re-lists its tools). False when it is not healthy;
        a server that is not running is reported unhealthy without being started."""
        slot = self._slot(server)
        conn = slot.conn
        if conn is None or not conn.usable:
            return False
        await self._health_check(conn)
        return conn.usable

    # -- approval and inspection (for `heron mcp`) --------------------------------------------

    async def inspect(
        self, server: str
    ) -> tuple[ServerIdentity, tuple[ToolDefinition, ...], list[Finding], PinCheck]:
        """Start `server` without pin enforcement and report what approving it would pin:
        its identity, definitions, scan findings and the comparison with the current pin."""
        slot = self._slot(server)
        conn = _Connection(server, slot.config, self._clock)
        problems = slot.config.credential_problems(datetime.now(UTC))
        if problems:
            raise ServerUnavailable(server, "; ".join(problems))
        await conn.open()
        try:
            definitions = await asyncio.wait_for(
                conn.list_definitions(), slot.config.startup_timeout_s
            )
            identity = self._identity(slot, conn.server_version)
        finally:
            await conn.close()
        findings = [
            f
            for f in scan_definitions(definitions, builtin_names=self._builtin_names)
            if f.server == server
        ]
        pin = self._trust.get(server) if self._trust is not None else None
        return identity, definitions, findings, compare_pin(pin, identity, definitions)

    async def approve(self, server: str) -> PinCheck:
        """Pin `server` as it is now (operator approval). Returns the comparison with the
        previous pin, so the caller can show what was approved. Clears a refusal."""
        if self._trust is None:
            raise ServerUnavailable(server, "no trust store is configured")
        identity, definitions, _findings, check = await self.inspect(server)
        self._trust.approve(server, identity, definitions)
        slot = self._slot(server)
        await self.stop(server)
        slot.refusal = None
        slot.last_error = None
        slot.failures = 0
        slot.retry_at = 0.0
        return check

    # -- tools ---------------------------------------------------------------------------------

    async def definitions(self, server: str) -> tuple[ToolDefinition, ...]:
        """The server's tool definitions (all of them, before enabled/disabled filtering).

        A running server answers from its verified listing; a pinned server whose launch
        identity is unchanged answers from its pin without starting; otherwise it starts.
        """
        slot = self._slot(server)
        conn = slot.conn
        if conn is not None and conn.usable:
            return conn.definitions
        if self._trust is not None and slot.refusal is None:
            pin = self._trust.get(server)
            if pin is not None:
                base = launch_identity(slot.config)
                if (pin.identity.launch, pin.identity.package_version) == (
                    base.launch,
                    base.package_version,
                ):
                    slot.known_tools = len(pin.definitions)
                    return pin.definitions
        return (await self._connection(server)).definitions

    async def tools(self) -> tuple[list[McpTool], dict[str, str]]:
        """heron tools for every configured server that can be listed, in server then tool
        order, with `enabled_tools` / `disabled_tools` applied. Servers that cannot be listed
        are returned as `{server: reason}` instead of failing the whole catalogue."""
        tools: list[McpTool] = []
        problems: dict[str, str] = {}
        for name, slot in self._slots.items():
            try:
                definitions = await self.definitions(name)
            except ServerUnavailable as exc:
                problems[name] = exc.reason
                continue
            for definition in sorted(definitions, key=lambda d: d.name):
                if slot.config.tool_enabled(definition.name):
                    tools.append(McpTool(self, definition, trusted=slot.config.trusted))
        return tools, problems

    async def call(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        progress: Callable[[str], None] | None = None,
        timeout_s: float | None = None,
    ) -> ToolResult:
        """Call one tool of one server; every failure is a failed `ToolResult` that says
        which kind it is (server unavailable, tool error, protocol error, crash, timeout)."""
        try:
            slot = self._slot(server)
        except ServerUnavailable as exc:
            return ToolResult.fail(str(exc))
        if not slot.config.tool_enabled(tool):
            return ToolResult.fail(f"tool {tool!r} of MCP server {server!r} is disabled")
        try:
            conn = await self._connection(server)
        except ServerUnavailable as exc:
            return ToolResult.fail(str(exc))
        limit = timeout_s if timeout_s is not None else slot.config.timeout_s

        sink = progress

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            if sink is not None:
                sink(_progress_line(progress, total, message))

        try:
            with conn.busy() as client:
                result = await client.call_tool(
                    tool,
                    dict(arguments),
                    read_timeout_seconds=limit,
                    progress_callback=on_progress,
                )
        except ServerUnavailable as exc:
            return ToolResult.fail(str(exc))
        except MCPError as exc:
            if exc.code == mcp_types.CONNECTION_CLOSED:
                return self._crashed(slot, conn, tool)
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                return ToolResult.fail(
                    f"MCP tool {server}__{tool} timed out after {limit:g}s; heron asked the "
                    "server to cancel it (its effects, if any, are unknown)",
                    data={"mcp_error": {"kind": "timeout", "code": exc.code}},
                )
            return ToolResult.fail(
                f"MCP protocol error from server {server!r} (code {exc.code}): {exc.message}",
                data={"mcp_error": {"kind": "protocol", "code": exc.code, "data": exc.data}},
            )
        except RuntimeError as exc:
            # The SDK checks structured content against the tool's output schema.
            return ToolResult.fail(
                f"MCP server {server!r} returned an invalid result for {tool!r}: {exc}",
                data={"mcp_error": {"kind": "invalid_result"}},
            )
        except Exception:
            # Transport failures (broken pipe, HTTP connection lost) end the connection.
            return self._crashed(slot, conn, tool)
        slot.failures = 0
        return render_call_result(result)

    def _crashed(self, slot: _Slot, conn: _Connection, tool: str) -> ToolResult:
        conn.broken = True
        slot.crashes += 1
        tail = conn.stderr_summary()
        self._note_failure(
            slot, "the connection closed during a call" + (f": {tail}" if tail else "")
        )
        return ToolResult.fail(
            f"MCP server {slot.name!r} stopped during the call to {tool!r}; whether the call "
            "took effect is unknown. The next call restarts the server."
            + (f" Server stderr: {tail}" if tail else ""),
            data={"mcp_error": {"kind": "connection_closed"}},
        )

    # -- resources and prompts -----------------------------------------------------------------

    async def list_resources(self, server: str) -> list[McpResource]:
        """Resources the server offers."""
        conn = await self._connection(server)
        out: list[McpResource] = []
        cursor: str | None = None
        for _ in range(_LIST_PAGE_CAP):
            with conn.busy() as client:
                page = await client.list_resources(cursor=cursor)
            out.extend(
                McpResource(
                    server=server,
                    uri=r.uri,
                    name=r.name,
                    title=r.title,
                    description=r.description,
                    mime_type=r.mime_type,
                )
                for r in page.resources
            )
            cursor = page.next_cursor
            if cursor is None:
                break
        return out

    async def read_resource(self, server: str, uri: str) -> list[McpResourceContent]:
        """Read one resource without any tool call."""
        conn = await self._connection(server)
        with conn.busy() as client:
            result = await client.read_resource(uri)
        out = []
        for item in result.contents:
            if isinstance(item, mcp_types.TextResourceContents):
                out.append(
                    McpResourceContent(uri=item.uri, mime_type=item.mime_type, text=item.text)
                )
            else:
                out.append(
                    McpResourceContent(
                        uri=item.uri, mime_type=item.mime_type, blob=base64.b64decode(item.blob)
                    )
                )
        return out

    async def list_prompts(self, server: str) -> list[McpPrompt]:
        """Prompt templates the server offers."""
        conn = await self._connection(server)
        out: list[McpPrompt] = []
        cursor: str | None = None
        for _ in range(_LIST_PAGE_CAP):
            with conn.busy() as client:
                page = await client.list_prompts(cursor=cursor)
            out.extend(
                McpPrompt(
                    server=server,
                    name=p.name,
                    title=p.title,
                    description=p.description,
                    arguments=tuple(
                        McpPromptArgument(
                            name=a.name, description=a.description, required=bool(a.required)
                        )
                        for a in p.arguments or ()
                    ),
                )
                for p in page.prompts
            )
            cursor = page.next_cursor
            if cursor is None:
                break
        return out

    async def get_prompt(
        self, server: str, name: str, arguments: Mapping[str, str] | None = None
    ) -> McpPromptResult:
        """Render one prompt template with its arguments."""
        conn = await self._connection(server)
        with conn.busy() as client:
            result = await client.get_prompt(name, dict(arguments or {}))
        return McpPromptResult(
            description=result.description,
            messages=tuple((m.role, _render_block(m.content)) for m in result.messages),
        )


def _pin_of(conn: _Connection, identity: ServerIdentity) -> ServerPin:
    """A pseudo-pin from the definitions a connection was verified with (for diffs)."""
    return ServerPin(
        server=conn.name,
        identity=identity,
        digest=conn.digest,
        definitions=conn.definitions,
        approved_at=0.0,
    )


def _describe_start_failure(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "it did not answer in time"
    if isinstance(exc, FileNotFoundError):
        return f"its command was not found ({exc.filename or exc})"
    if isinstance(exc, MCPError):
        return f"MCP error {exc.code}: {exc.message}"
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe_start_failure(e) for e in exc.exceptions)
    text = str(exc) or type(exc).__name__
    return text


# -- the heron Tool ---------------------------------------------------------------------------


def _annotations(hints: Mapping[str, Any], trusted: bool) -> ToolAnnotations:
    if not trusted:
        # Untrusted hints decide nothing: assume the worst for approval and parallelism.
        return ToolAnnotations(read_only=False, destructive=True, idempotent=False, open_world=True)
    read_only = hints.get("readOnlyHint") is True
    return ToolAnnotations(
        read_only=read_only,
        destructive=not read_only and hints.get("destructiveHint", True) is not False,
        idempotent=read_only or hints.get("idempotentHint") is True,
        open_world=hints.get("openWorldHint", True) is not False,
    )


class McpTool:
    """One MCP tool as a heron `Tool`."""

    __slots__ = ("_manager", "_schema_problem", "_spec", "_validator", "definition", "trusted")

    def __init__(
        self, manager: McpClientManager, definition: ToolDefinition, *, trusted: bool
    ) -> None:
        self._manager = manager
        self.definition = definition
        self.trusted = trusted
        schema = dict(definition.input_schema)
        self._schema_problem: str | None = None
        self._validator: SchemaValidator | None = None
        try:
            self._validator = SchemaValidator(definition.prefixed, schema)
        except jsonschema.SchemaError as exc:
            self._schema_problem = f"the server's input schema is invalid: {exc.message}"
        description = definition.description.strip() or (
            f"MCP tool {definition.name} of server {definition.server}"
        )
        self._spec = ToolSpec(
            name=definition.prefixed,
            description=description,
            parameters=schema,
            output_schema=definition.output_schema,
            annotations=_annotations(definition.annotations, trusted),
            owner=f"mcp:{definition.server}",
        )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    @property
    def server(self) -> str:
        return self.definition.server

    @property
    def hints(self) -> Mapping[str, Any]:
        """The server's own annotations (hints; trusted only for `trusted` servers)."""
        return self.definition.annotations

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        if self._validator is None:
            raise ToolArgumentsError(self._spec.name, [self._schema_problem or "invalid schema"])
        return self._validator.validate(arguments)

    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await self._manager.call(
            self.definition.server, self.definition.name, arguments, progress=ctx.progress
        )


# -- resources and prompts as optional tools ------------------------------------------------------


def resource_tools(manager: McpClientManager) -> list[Tool]:
    """`mcp_resources` and `mcp_prompts`: resources and prompts of the servers configured with
    `resources_as_tools`, for models that should reach them through tool calls. Empty when no
    server opts in. (Resources and prompts are always reachable through the manager.)"""
    servers = [n for n in manager.servers if manager.config(n).resources_as_tools]
    if not servers:
        return []
    names = ", ".join(servers)

    async def mcp_resources(server: str, uri: str = "") -> ToolResult:
        if server not in servers:
            return ToolResult.fail(
                f"server {server!r} does not share resources; use one of {names}"
            )
        if not uri:
            listed = await manager.list_resources(server)
            lines = [
                f"{r.uri} - {r.title or r.name}" + (f": {r.description}" if r.description else "")
                for r in listed
            ]
            return ToolResult.ok("\n".join(lines) or "(no resources)")
        contents = await manager.read_resource(server, uri)
        parts = [
            c.text
            if c.text is not None
            else f"[{c.uri}: {c.mime_type or 'binary'}, {len(c.blob or b'')} bytes]"
            for c in contents
        ]
        return ToolResult.ok("\n".join(parts))

    async def mcp_prompts(
        server: str, name: str = "", arguments: dict[str, str] | None = None
    ) -> ToolResult:
        if server not in servers:
            return ToolResult.fail(f"server {server!r} does not share prompts; use one of {names}")
        if not name:
            listed = await manager.list_prompts(server)
            lines = [
                f"{p.name}({', '.join(a.name + ('' if a.required else '?') for a in p.arguments)})"
                + (f" - {p.description}" if p.description else "")
                for p in listed
            ]
            return ToolResult.ok("\n".join(lines) or "(no prompts)")
        result = await manager.get_prompt(server, name, arguments)
        return ToolResult.ok("\n\n".join(f"[{role}]\n{text}" for role, text in result.messages))

    mcp_resources.__doc__ = f"""List or read resources (documents, data) that MCP servers share.

    Without `uri` it lists the server's resources; with `uri` it returns that resource's text.
    Servers: {names}.

    Args:
        server: Name of the MCP server.
        uri: A resource URI from the listing; empty to list.
    """
    mcp_prompts.__doc__ = f"""List or render prompt templates that MCP servers share.

    Without `name` it lists the server's prompts and their arguments (`?` marks optional ones);
    with `name` it renders that prompt with `arguments`. Servers: {names}.

    Args:
        server: Name of the MCP server.
        name: Prompt name from the listing; empty to list.
        arguments: Values for the prompt's arguments.
    """
    return [
        function_tool(read_only=True, open_world=True, owner="mcp")(mcp_resources),
        function_tool(read_only=True, open_world=True, owner="mcp")(mcp_prompts),
    ]
