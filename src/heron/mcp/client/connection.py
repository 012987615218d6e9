"""One live MCP server connection: an SDK `Client` over stdio or Streamable HTTP in its own task.

The SDK's transports are anyio context managers that must be entered and left by the same task,
so each connection runs its client in a task of its own (`Connection._run`) and stops it by
setting `closing`; requests are made from the caller's task, so cancelling the caller cancels
the request and the SDK sends MCP cancellation to the server. While it runs, the connection
stops itself when idle and runs the manager's health check on schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from importlib import metadata
from typing import IO, Any, Protocol, TypeVar

import mcp_types
from mcp import Client, StdioServerParameters
from mcp.client.session import ElicitationFnT
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

# A private SDK name, on purpose: it builds the HTTP client (of whichever HTTP library this SDK
# release uses: httpx or httpx2) with the SDK's own timeouts, and heron needs one it can give
# headers to. `test_mcp_connection.py` fails by name when an SDK release moves or changes it.
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from heron.mcp.auth.scrub import scrub_secrets
from heron.mcp.client.errors import ServerRefused, ServerUnavailable
from heron.mcp.config import McpServerConfig
from heron.mcp.trust import ToolDefinition

__all__ = ["Connection", "describe_start_failure", "tool_definition"]

_LIST_PAGE_CAP = 100
"""Most pages heron reads of one listing (tools, resources, prompts)."""
_STDERR_TAIL = 1500
_STDERR_MESSAGE = 400
_CLOSE_TIMEOUT_S = 10.0


class _Page(Protocol):
    @property
    def next_cursor(self) -> str | None: ...


PageT = TypeVar("PageT", bound=_Page)


def tool_definition(server: str, tool: mcp_types.Tool) -> ToolDefinition:
    """An SDK tool as the definition heron pins and wraps."""
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


def _heron_version() -> str:
    try:
        return metadata.version("heron")
    except metadata.PackageNotFoundError:
        return "0"


def describe_start_failure(exc: BaseException) -> str:
    """Why a server failed to start (or a request failed), in words for an error message."""
    if isinstance(exc, TimeoutError):
        return "it did not answer in time"
    if isinstance(exc, FileNotFoundError):
        return f"its command was not found ({exc.filename or exc})"
    if isinstance(exc, MCPError):
        return scrub_secrets(f"MCP error {exc.code}: {exc.message}")
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe_start_failure(e) for e in exc.exceptions)
    # OAuth errors may quote an authorization server's answer: never show a secret.
    return scrub_secrets(str(exc) or type(exc).__name__)


class Connection:
    """One running SDK client, owned by its own task."""

    def __init__(
        self,
        name: str,
        config: McpServerConfig,
        clock: Callable[[], float],
        *,
        http_auth: Any = None,
        elicit: ElicitationFnT | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.elicit = elicit
        """Answers the server's requests for user input (`heron.mcp.client.human_input`)."""
        self.http_auth = http_auth
        """The HTTP client's auth hook (the SDK's OAuth provider for `auth = "oauth"`)."""
        self._clock = clock
        self.client: Client | None = None
        self.definitions: tuple[ToolDefinition, ...] = ()
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
        self.on_health: Callable[[Connection], Any] | None = None
        self.unreadable: str | None = None
        """Why the connection was closed on a message from the server heron cannot read."""

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
            http = create_mcp_http_client(
                headers=cfg.resolved_headers() or None, auth=self.http_auth
            )
            transport = HttpTransport(cfg.url, http)
        return Client(
            transport,
            mode=cfg.protocol,
            cache=None,
            client_info=info,
            message_handler=self._on_message,
            elicitation_callback=self.elicit,
        )

    async def _on_message(self, message: Any) -> None:
        """A message the SDK could not parse (JSON nested deeper than its parser allows, a lone
        surrogate escape, not JSON at all) would leave the call it answers waiting for its
        timeout: the connection is closed at once instead, so that call fails now (hostile
        input never hangs a turn) and the next call starts the server again."""
        if isinstance(message, ValidationError) and self.unreadable is None:
            detail = message.errors()[0].get("msg", "") if message.errors() else ""
            self.unreadable = f"a message from the server is not valid JSON-RPC ({detail})"
            self.broken = True
            self.closing.set()

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

    async def pages(
        self, fetch: Callable[[Client, str | None], Awaitable[PageT]], *, use: bool = True
    ) -> list[PageT]:
        """Every page of one paginated listing, in order (at most `_LIST_PAGE_CAP` pages);
        `fetch(client, cursor)` requests one page."""
        found: list[PageT] = []
        cursor: str | None = None
        with self.busy(use=use) as client:
            for _ in range(_LIST_PAGE_CAP):
                page = await fetch(client, cursor)
                found.append(page)
                cursor = page.next_cursor
                if cursor is None:
                    break
        return found

    async def list_definitions(self, *, use: bool = True) -> tuple[ToolDefinition, ...]:
        """The server's tools, as definitions."""
        pages = await self.pages(lambda client, cursor: client.list_tools(cursor=cursor), use=use)
        return tuple(tool_definition(self.name, t) for page in pages for t in page.tools)

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


class HttpTransport:
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
