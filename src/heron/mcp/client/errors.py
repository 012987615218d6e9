"""The ways an MCP server cannot be used: unavailable now, waiting for an operator's OAuth
consent, or refused until approved."""

from __future__ import annotations

from collections.abc import Sequence

from heron.errors import HeronError
from heron.mcp.trust import Finding, PinCheck

__all__ = ["ServerAuthRequired", "ServerRefused", "ServerUnavailable"]


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


class ServerAuthRequired(ServerUnavailable):
    """A server's OAuth login needs an operator's consent (status `auth_required`); heron
    asked once, and the server is used again as soon as the login completes."""

    def __init__(self, server: str, reason: str, *, scope: str | None = None) -> None:
        self.scope = scope
        super().__init__(server, reason)
