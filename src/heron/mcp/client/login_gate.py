"""The OAuth side of the manager: which auth hook a connection gets, and waiting for consent.

A server with `auth = "oauth"` connects with the SDK's OAuth provider over its stored tokens
(`McpAuth.provider`). When a connection or a call fails because a person's consent is needed
(`AuthorizationRequired`: no usable tokens, a revoked token, more scopes), the server waits for
consent (`auth_required`): `LoginGate.need_consent` records why and — when the `McpAuth` has a
consent channel — starts one background login that asks the operator. Nothing waits for it.
While waiting, new connections are refused at once (a step-up excepted: the login still works
for what it was granted); the wait ends when the login completes, or when the token file
changes (another process, `heron mcp login`, stored new tokens). A refused or failed login is
not repeated by itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from heron.mcp.auth import AuthorizationRequired, LoginFailed, LoginState, McpAuth
from heron.mcp.auth.causes import find_cause
from heron.mcp.auth.consent import ConsentChannel
from heron.mcp.auth.session import LogoutResult
from heron.mcp.auth.storage import TokenStoreLocked
from heron.mcp.client.errors import ServerAuthRequired, ServerUnavailable
from heron.mcp.config import McpServerConfig

__all__ = ["LoginGate", "PendingConsent", "authorization_required"]

log = logging.getLogger("heron.mcp.login")


@dataclass(kw_only=True)
class PendingConsent:
    """Why a server waits for an operator's consent, and the login that asks for it."""

    reason: str
    scope: str | None
    step_up: bool
    """The login works but a call needs more scopes: the server stays usable meanwhile."""
    tokens_at: float | None
    """The token file's modification time when consent became necessary: a newer file (a
    login in another process) ends the wait."""
    login: asyncio.Task[None] | None = None
    outcome: str | None = None
    """Why the background login failed (a refusal); heron does not ask again by itself."""


def authorization_required(
    exc: BaseException | None, http_auth: Any
) -> AuthorizationRequired | None:
    """The `AuthorizationRequired` behind a failure: raised in the exception (a failed
    connect) or recorded by the connection's provider (the SDK transport ended under it)."""
    found = find_cause(exc, AuthorizationRequired)
    if found is not None:
        return found
    recorded = getattr(http_auth, "authorization_required", None)
    return recorded if isinstance(recorded, AuthorizationRequired) else None


class LoginGate:
    """Consent state of every OAuth server of one manager.

    `logged_in(name)` is awaited when a login completed, so the manager can reset the server
    and drop the connection that used the old tokens.
    """

    def __init__(
        self, auth: McpAuth | None, *, logged_in: Callable[[str], Awaitable[None]]
    ) -> None:
        self.auth = auth
        self._logged_in = logged_in
        self.pending: dict[str, PendingConsent] = {}

    def waiting(self, server: str) -> bool:
        return server in self.pending

    def reason(self, server: str) -> str | None:
        """Why `server` waits for consent (None when it does not)."""
        pending = self.pending.get(server)
        return self.refusal(server, pending).reason if pending is not None else None

    def http_auth(self, server: str, config: McpServerConfig) -> Any:
        """The auth hook of a new connection (None without `auth = "oauth"`). Raises
        `ServerAuthRequired` while the server waits for consent, `ServerUnavailable` when
        its tokens cannot be read."""
        if config.auth != "oauth":
            return None
        if self.auth is None:
            raise ServerUnavailable(server, "it uses OAuth and this process has no token store")
        try:
            pending = self.pending.get(server)
            if pending is not None and not pending.step_up:
                if self.auth.storage(server).modified_at() == pending.tokens_at:
                    raise self.refusal(server, pending)
                del self.pending[server]  # new tokens arrived (another process logged in)
            return self.auth.provider(server)
        except TokenStoreLocked as exc:
            raise ServerUnavailable(server, str(exc)) from None

    def tokens_at(self, server: str, config: McpServerConfig) -> float | None:
        """When `server`'s token file last changed (None without OAuth or tokens)."""
        if config.auth != "oauth" or self.auth is None:
            return None
        return self.auth.storage(server).modified_at()

    def need_consent(self, server: str, required: AuthorizationRequired) -> ServerAuthRequired:
        """Record that `server` waits for consent and ask the operator once, in the
        background (when there is a consent channel)."""
        assert self.auth is not None
        pending = self.pending.get(server)
        if pending is None or (pending.outcome is not None and pending.scope != required.scope):
            what = f"more OAuth scopes ({required.scope})" if required.step_up else "an OAuth login"
            pending = self.pending[server] = PendingConsent(
                reason=f"it needs {what} with an operator's consent",
                scope=required.scope,
                step_up=required.step_up,
                tokens_at=self.auth.storage(server).modified_at(),
            )
            if self.auth.consent is not None:
                pending.login = asyncio.get_running_loop().create_task(
                    self._background_login(server, pending), name=f"mcp-login-{server}"
                )
        return self.refusal(server, pending)

    def refusal(self, server: str, pending: PendingConsent) -> ServerAuthRequired:
        """The error a use of `server` gets while it waits."""
        if pending.outcome is not None:
            how = f"the last login failed ({pending.outcome}); run `heron mcp login {server}`"
        elif pending.login is not None:
            how = "heron asked the operator; it is used again once they consent"
        else:
            how = f"run `heron mcp login {server}`"
        return ServerAuthRequired(server, f"{pending.reason}: {how}", scope=pending.scope)

    async def _background_login(self, server: str, pending: PendingConsent) -> None:
        assert self.auth is not None
        try:
            await self.auth.login(
                server, scope=pending.scope if pending.step_up else None, timeout_s=None
            )
        except LoginFailed as exc:
            pending.outcome = exc.reason
            pending.login = None
            # Nobody waits for a background login: the operator hears of its end here.
            log.warning("mcp: the login to %s failed: %s", server, exc.reason)
            return
        if self.pending.get(server) is pending:
            del self.pending[server]
        await self._logged_in(server)

    async def wait(self, server: str, within_s: float | None) -> bool:
        """Wait (at most `within_s`) for the background login of `server`; True when the
        server no longer waits for consent."""
        pending = self.pending.get(server)
        if pending is not None and pending.login is not None:
            await asyncio.wait({pending.login}, timeout=within_s)
        return server not in self.pending

    async def login(self, server: str, channel: ConsentChannel | None) -> LoginState:
        """Log in now, with the scopes a pending step-up wants. Raises `LoginFailed`."""
        if self.auth is None:
            raise LoginFailed(server, "this process has no token store")
        pending = self.pending.get(server)
        state = await self.auth.login(
            server, channel=channel, scope=pending.scope if pending is not None else None
        )
        if pending is not None and pending.login is not None:
            pending.login.cancel()
        self.pending.pop(server, None)
        await self._logged_in(server)
        return state

    async def logout(self, server: str) -> LogoutResult:
        if self.auth is None:
            raise LoginFailed(server, "this process has no token store")
        return await self.auth.logout(server)

    def login_state(self, server: str, config: McpServerConfig) -> LoginState | None:
        if config.auth != "oauth" or self.auth is None:
            return None
        return self.auth.login_state(server)

    async def aclose(self) -> None:
        """Stop the background logins still waiting for consent."""
        tasks = [p.login for p in self.pending.values() if p.login is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
