"""The manager of MCP server connections: lifecycle, status, admission, calls, resources, prompts.

`McpClientManager` owns one connection per configured server:

- **lazy**: nothing starts until a server is needed. A pinned server's catalogue comes from its
  pin, so listing tools does not start it either; the first call does.
- **checked**: at start the server's tools are listed and admitted against the trust pin (see
  `admission`); a changed version or definition refuses the server until re-approved. While
  running it is re-checked every `health_interval_s` (a server that changes its tools
  mid-session is refused from then on).
- **self-healing**: a call in flight when the server dies gets an error result saying the
  outcome is unknown; the next call starts the server again. Repeated failures back off
  exponentially, and a call during the back-off fails at once with the retry time.
- **frugal**: a server idle for `idle_timeout_s` is stopped.
- **never blocked by a login**: a server with `auth = "oauth"` connects with the SDK's OAuth
  provider over its stored tokens (refreshed when due). When they are missing or expired, or a
  call needs more scopes, the server goes `auth_required`: its calls fail at once with that
  reason, the other servers go on, and — when the `McpAuth` has a consent channel — heron asks
  the operator once, in the background; the server is used again as soon as the login
  completes (or another process, `heron mcp login`, stored new tokens). A completed login
  tells the `on_tools_changed` listeners: a server that could not be listed without it can be
  now (`heron.mcp.shared` puts its tools into the running sessions).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from mcp.client.session import ElicitationFnT

import heron.mcp.client.admission as admission
import heron.mcp.client.calls as calls
import heron.mcp.client.resources as resources
from heron.mcp.auth import AuthorizationRequired, LoginState, McpAuth
from heron.mcp.auth.consent import ConsentChannel
from heron.mcp.auth.session import LogoutResult
from heron.mcp.client.connection import Connection, describe_start_failure
from heron.mcp.client.errors import ServerAuthRequired, ServerRefused, ServerUnavailable
from heron.mcp.client.human_input import HumanInput
from heron.mcp.client.login_gate import LoginGate, authorization_required
from heron.mcp.client.resources import (
    McpPrompt,
    McpPromptResult,
    McpResource,
    McpResourceContent,
)
from heron.mcp.client.slots import ServerStatus, Slot, slot_status
from heron.mcp.client.tool import McpTool
from heron.mcp.config import ApprovalMode, McpConfig, McpServerConfig
from heron.mcp.trust import (
    Finding,
    PinCheck,
    ServerIdentity,
    ToolDefinition,
    TrustStore,
    compare_pin,
    scan_definitions,
)
from heron.tools.definition import ToolResult

__all__ = ["McpClientManager", "ServerStatus"]


class McpClientManager:
    """Connections to the configured MCP servers, started on first use.

    Use as an async context manager (or call `aclose()`) so servers are stopped at the end.
    `trust=None` disables pinning (findings are still computed); with a `TrustStore`, servers
    are admitted at every start (`heron.mcp.client.admission`) and refused when they changed.
    `auth` holds the OAuth token store of servers with `auth = "oauth"`; its consent channel,
    when it has one, is how a running manager asks an operator (once per need).
    """

    def __init__(
        self,
        config: McpConfig | Mapping[str, McpServerConfig],
        *,
        trust: TrustStore | None = None,
        auth: McpAuth | None = None,
        builtin_names: Sequence[str] = (),
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        human_input: HumanInput | None = None,
    ) -> None:
        if isinstance(config, McpConfig):
            servers = config.enabled_servers()
            self.approval: ApprovalMode = config.approval
        else:
            servers = {n: c for n, c in sorted(config.items()) if c.enabled}
            self.approval = "first-use"
        self._slots = {n: Slot(name=n, config=c) for n, c in servers.items()}
        self._trust = trust
        self._gate = LoginGate(auth, logged_in=self._logged_in)
        self._builtin_names = tuple(builtin_names)
        self._backoff_base = backoff_base_s
        self._backoff_max = backoff_max_s
        self._clock = clock
        self.human_input = human_input
        """How a server's request for user input reaches a person (`heron serve`); `None`:
        heron declares no elicitation capability."""
        self._tools_changed: list[Callable[[str], Awaitable[None]]] = []

    def on_tools_changed(self, listener: Callable[[str], Awaitable[None]]) -> None:
        """Await `listener(server)` whenever `server`'s tools may have changed (a login
        completed); the listener handles its own failures."""
        self._tools_changed.append(listener)

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

    def _slot(self, server: str) -> Slot:
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

    def _note_failure(self, slot: Slot, reason: str) -> None:
        slot.failures += 1
        slot.last_error = reason
        slot.retry_at = self._clock() + self._backoff(slot.failures)

    async def _connection(self, server: str) -> Connection:
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
            tokens_at = self._gate.tokens_at(server, slot.config)
            http_auth = self._http_auth(slot)
            try:
                conn = await self._open(slot, http_auth)
            except ServerRefused as refused:
                self._refuse(slot, refused)
                raise
            except Exception as exc:
                required = authorization_required(exc, http_auth)
                if required is not None:
                    raise self._need_consent(slot, required) from None
                reason = describe_start_failure(exc)
                self._note_failure(slot, reason)
                raise ServerUnavailable(server, reason) from exc
            slot.conn, slot.tokens_at = conn, tokens_at
            slot.starts += 1
            return conn

    # -- OAuth (heron.mcp.client.login_gate) ------------------------------------------------

    def _http_auth(self, slot: Slot) -> Any:
        try:
            return self._gate.http_auth(slot.name, slot.config)
        except ServerUnavailable as exc:
            slot.last_error = exc.reason
            raise

    def _need_consent(self, slot: Slot, required: AuthorizationRequired) -> ServerAuthRequired:
        refused = self._gate.need_consent(slot.name, required)
        slot.last_error = refused.reason
        return refused

    async def _logged_in(self, server: str) -> None:
        slot = self._slot(server)
        slot.last_error = None
        slot.failures = 0
        slot.retry_at = 0.0
        # Drop a connection that used the old tokens (the next call connects with the new
        # ones); one a call opened after they were stored is kept, and so is that call.
        async with slot.lock:
            current = self._gate.tokens_at(server, slot.config)
            conn = slot.conn if slot.tokens_at != current else None
            if conn is not None:
                slot.conn = None
        if conn is not None:
            await conn.close()
        for listener in self._tools_changed:
            await listener(server)

    async def wait_for_login(self, server: str, within_s: float | None = None) -> bool:
        """Wait (at most `within_s`) for the background login of `server` to end; True when
        the server no longer waits for consent."""
        self._slot(server)
        return await self._gate.wait(server, within_s)

    async def login(self, server: str, *, channel: ConsentChannel | None = None) -> LoginState:
        """Log in to `server` now (the operator consents through `channel`, default the
        `McpAuth`'s); the next call uses the new tokens. Raises `LoginFailed`."""
        self._slot(server)
        return await self._gate.login(server, channel)

    async def logout(self, server: str) -> LogoutResult:
        """Revoke and delete `server`'s tokens (`McpAuth.logout`); stops the server."""
        self._slot(server)
        await self.stop(server)
        return await self._gate.logout(server)

    def _refuse(self, slot: Slot, refused: ServerRefused) -> None:
        slot.refusal = refused
        slot.last_error = refused.reason
        pin = self._trust.get(slot.name) if self._trust is not None else None
        slot.refused_pin_at = pin.approved_at if pin is not None else None

    def _reapproved(self, slot: Slot) -> bool:
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

    def _elicit(self, server: str) -> ElicitationFnT | None:
        return None if self.human_input is None else self.human_input.for_server(server)

    async def _open(self, slot: Slot, http_auth: Any = None) -> Connection:
        conn = Connection(
            slot.name, slot.config, self._clock, http_auth=http_auth, elicit=self._elicit(slot.name)
        )
        try:
            await conn.open()
        except Exception as exc:
            tail = conn.stderr_summary()
            if tail:
                reason = f"{describe_start_failure(exc)}; server stderr: {tail}"
                raise RuntimeError(reason) from exc
            raise
        try:
            definitions = await asyncio.wait_for(
                conn.list_definitions(), slot.config.startup_timeout_s
            )
            self._admit(slot, conn.server_version, definitions)
        except BaseException:
            await conn.close()
            raise
        conn.definitions = definitions
        slot.known_tools = len(definitions)
        conn.on_health = self._health_check
        return conn

    def _admit(
        self, slot: Slot, server_version: str, definitions: Sequence[ToolDefinition]
    ) -> None:
        """Admit a freshly started server (raises `ServerRefused`); pin it on first use."""
        others = [
            d
            for other in self._slots.values()
            if other.name != slot.name and other.conn is not None
            for d in other.conn.definitions
        ]
        slot.findings = admission.server_findings(
            slot.name, definitions, others, builtin_names=self._builtin_names
        )
        if self._trust is None:
            return
        identity = admission.live_identity(slot.config, server_version)
        decision = admission.admit(
            slot.name,
            pin=self._trust.get(slot.name),
            identity=identity,
            definitions=definitions,
            findings=slot.findings,
            approval=self.approval,
        )
        if decision.verdict == "refuse":
            raise decision.refusal()
        if decision.verdict == "pin":
            self._trust.approve(slot.name, identity, definitions)

    async def _health_check(self, conn: Connection) -> None:
        """Re-list the tools of a running server: a dead server or changed tools end it."""
        slot = self._slots[conn.name]
        try:
            definitions = await asyncio.wait_for(
                conn.list_definitions(use=False), conn.config.startup_timeout_s
            )
        except Exception as exc:
            conn.broken = True
            slot.crashes += 1
            self._note_failure(slot, f"health check failed: {describe_start_failure(exc)}")
            return
        decision = admission.drift(conn.name, admitted=conn.definitions, live=definitions)
        if decision.verdict == "refuse":
            conn.refusal = decision.refusal()
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
        """Stop every server (and any login waiting for consent)."""
        await self._gate.aclose()
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
        return [
            slot_status(slot, now=now, gate=self._gate, trust=self._trust)
            for slot in self._slots.values()
        ]

    def login_state(self, server: str) -> LoginState | None:
        """The OAuth login of `server` (None when it does not use OAuth)."""
        return self._gate.login_state(server, self._slot(server).config)

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
        problems = slot.config.credential_problems(datetime.now(UTC))
        if problems:
            raise ServerUnavailable(server, "; ".join(problems))
        http_auth = self._http_auth(slot)
        conn = Connection(server, slot.config, self._clock, http_auth=http_auth)
        try:
            await conn.open()
        except Exception as exc:
            required = authorization_required(exc, http_auth)
            if required is not None:
                raise self._need_consent(slot, required) from None
            raise
        try:
            definitions = await asyncio.wait_for(
                conn.list_definitions(), slot.config.startup_timeout_s
            )
            identity = admission.live_identity(slot.config, conn.server_version)
        finally:
            await conn.close()
        findings = list(
            admission.server_findings(server, definitions, builtin_names=self._builtin_names)
        )
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
            pinned = admission.pinned_listing(self._trust.get(server), slot.config)
            if pinned is not None:
                slot.known_tools = len(pinned)
                return pinned
        return (await self._connection(server)).definitions

    async def tools(
        self, servers: Sequence[str] | None = None
    ) -> tuple[list[McpTool], dict[str, str]]:
        """heron tools for every configured server (or those of `servers`) that can be
        listed, in server then tool order, with `enabled_tools` / `disabled_tools` applied.
        Servers that cannot be listed are returned as `{server: reason}` instead of failing
        the whole catalogue."""
        tools: list[McpTool] = []
        problems: dict[str, str] = {}
        for name, slot in self._slots.items():
            if servers is not None and name not in servers:
                continue
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
        which kind it is (server unavailable, tool error, protocol error, crash, timeout;
        see `heron.mcp.client.calls`)."""
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
        return await calls.call_tool(
            slot,
            conn,
            tool,
            arguments,
            limit=limit,
            progress=progress,
            need_consent=self._need_consent,
            note_failure=self._note_failure,
        )

    # -- resources and prompts -----------------------------------------------------------------

    async def list_resources(self, server: str) -> list[McpResource]:
        """Resources the server offers."""
        return await resources.list_resources(await self._connection(server))

    async def read_resource(self, server: str, uri: str) -> list[McpResourceContent]:
        """Read one resource without any tool call."""
        return await resources.read_resource(await self._connection(server), uri)

    async def list_prompts(self, server: str) -> list[McpPrompt]:
        """Prompt templates the server offers."""
        return await resources.list_prompts(await self._connection(server))

    async def get_prompt(
        self, server: str, name: str, arguments: Mapping[str, str] | None = None
    ) -> McpPromptResult:
        """Render one prompt template with its arguments."""
        return await resources.get_prompt(await self._connection(server), name, arguments)
