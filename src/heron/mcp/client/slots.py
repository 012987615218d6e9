"""The manager's record of each server, and the status `heron mcp status` shows of it.

`Slot` is what `McpClientManager` keeps per configured server between connections (the live
connection, counters, back-off, refusal, findings); `slot_status` turns one into the
`ServerStatus` people see, with the server's OAuth login from the `LoginGate`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Literal

from heron.mcp.auth import LoginState
from heron.mcp.client.connection import Connection
from heron.mcp.client.errors import ServerRefused
from heron.mcp.client.login_gate import LoginGate
from heron.mcp.config import McpServerConfig
from heron.mcp.trust import Finding, TrustStore

__all__ = ["ServerStatus", "Slot", "slot_status"]

State = Literal["stopped", "running", "backing-off", "refused", "auth_required"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerStatus:
    """What `heron mcp status` shows for one server."""

    name: str
    transport: Literal["stdio", "http"]
    state: State
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
    login: LoginState | None = None
    """The OAuth login (servers with `auth = "oauth"` only)."""


@dataclass(kw_only=True)
class Slot:
    name: str
    config: McpServerConfig
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    conn: Connection | None = None
    tokens_at: float | None = None
    """The OAuth token file's modification time when `conn` was opened."""
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


def slot_status(
    slot: Slot, *, now: float, gate: LoginGate, trust: TrustStore | None
) -> ServerStatus:
    """The status of one server now."""
    conn = slot.conn
    state: State
    if slot.refusal is not None or (conn is not None and conn.refusal is not None):
        state = "refused"
    elif gate.waiting(slot.name):
        state = "auth_required"
    elif conn is not None and conn.usable:
        state = "running"
    elif slot.retry_at > now:
        state = "backing-off"
    else:
        state = "stopped"
    known = slot.known_tools
    if known is None and trust is not None:
        pin = trust.get(slot.name)
        known = len(pin.definitions) if pin is not None else None
    return ServerStatus(
        name=slot.name,
        transport=slot.config.transport,
        state=state,
        starts=slot.starts,
        crashes=slot.crashes,
        failures=slot.failures,
        retry_in_s=max(slot.retry_at - now, 0.0) if slot.retry_at > now else None,
        last_error=gate.reason(slot.name) or slot.last_error,
        server_version=conn.server_version if conn is not None else "",
        tools=known,
        login=gate.login_state(slot.name, slot.config),
    )
