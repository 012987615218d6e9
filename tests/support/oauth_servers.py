"""A real OAuth authorization server with an OAuth-protected MCP server, on loopback.

Built from the official SDK's own parts: its authorization-server routes (metadata, dynamic
registration, authorize, token, revocation) over an in-memory provider, and a protected
Streamable HTTP MCP server (protected-resource metadata, bearer-token checks) in one Starlette
app, served by uvicorn on 127.0.0.1. `extra_routes` mounts more routes in the same app (heron's
OAuth callback, for instance).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx2
import mcp_types as types
import uvicorn
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    ProviderTokenVerifier,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.lowlevel import Server
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from heron.mcp.auth import ConsentRequest
from support.waiting import until


@dataclass
class MemoryAuthorizationServer:
    """The SDK's `OAuthAuthorizationServerProvider`, in memory. Consent is automatic: the
    authorize step redirects at once, with a code or (`refuse`) with `access_denied`."""

    grantable: list[str]
    refuse: bool = False
    access_ttl: int = 3600
    clients: dict[str, OAuthClientInformationFull] = field(default_factory=dict)
    codes: dict[str, AuthorizationCode] = field(default_factory=dict)
    access: dict[str, AccessToken] = field(default_factory=dict)
    refresh: dict[str, RefreshToken] = field(default_factory=dict)
    issued: list[OAuthToken] = field(default_factory=list)
    revoked: list[str] = field(default_factory=list)
    authorizations: list[AuthorizationParams] = field(default_factory=list)
    refreshes: int = 0

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        client_info.scope = " ".join(self.grantable)  # a registration may ask for any of them
        self.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        self.authorizations.append(params)
        redirect = str(params.redirect_uri)
        if self.refuse:
            return construct_redirect_uri(
                redirect, error="access_denied", error_description="no", state=params.state
            )
        code = secrets.token_urlsafe(24)
        assert client.client_id is not None
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(redirect, code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access, refresh = "at-" + secrets.token_urlsafe(24), "rt-" + secrets.token_urlsafe(24)
        expires = int(time.time()) + self.access_ttl
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=expires, resource=resource
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource
        )
        token = OAuthToken(
            access_token=access,
            expires_in=self.access_ttl,
            scope=" ".join(scopes),
            refresh_token=refresh,
        )
        self.issued.append(token)
        return token

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        return self._issue(
            authorization_code.client_id, authorization_code.scopes, authorization_code.resource
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.refreshes += 1
        self.refresh.pop(refresh_token.token, None)
        return self._issue(
            refresh_token.client_id, scopes or refresh_token.scopes, refresh_token.resource
        )

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.revoked.append(token.token)
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    def secrets(self) -> list[str]:
        """Every secret value this server handed out."""
        found = [t.access_token for t in self.issued]
        found += [t.refresh_token for t in self.issued if t.refresh_token]
        found += [c.client_secret for c in self.clients.values() if c.client_secret]
        return found


class CallScopes:
    """ASGI wrapper: while `needed` is set, `tools/call` needs those scopes (a 403
    `insufficient_scope` challenge naming them) — a server that changes its requirements."""

    def __init__(self, app: Any, provider: MemoryAuthorizationServer, metadata_url: str) -> None:
        self.app, self.provider, self.metadata_url = app, provider, metadata_url
        self.needed: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not self.needed:
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            method = json.loads(body).get("method")
        except ValueError:
            method = None
        header = dict(scope["headers"]).get(b"authorization", b"").decode()
        token = await self.provider.load_access_token(header.removeprefix("Bearer "))
        short = token is not None and not set(self.needed) <= set(token.scopes)
        if method == "tools/call" and short:
            challenge = (
                f'Bearer error="insufficient_scope", scope="{" ".join(self.needed)}", '
                f'resource_metadata="{self.metadata_url}"'
            )
            await send(
                {
                    "type": "http.response.start",
                    "status": 403,
                    "headers": [(b"www-authenticate", challenge.encode())],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


@dataclass
class Protected:
    url: str
    issuer: str
    auth: MemoryAuthorizationServer
    call_scopes: CallScopes


@asynccontextmanager
async def protected_server(
    *, scopes: list[str], grantable: list[str] | None = None, extra_routes: Sequence[Any] = ()
) -> AsyncIterator[Protected]:
    """An OAuth-protected MCP server (`whoami`) with its authorization server, on loopback."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    provider = MemoryAuthorizationServer(grantable=grantable or scopes)

    async def list_tools(
        _ctx: Any, _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[types.Tool(name="whoami", input_schema={"type": "object"})]
        )

    async def call_tool(_ctx: Any, _params: types.CallToolRequestParams) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text="you are authorised")])

    server: Server[Any] = Server("protected", on_list_tools=list_tools, on_call_tool=call_tool)
    app = server.streamable_http_app(
        host="127.0.0.1",
        auth=AuthSettings(
            issuer_url=base,  # type: ignore[arg-type]
            resource_server_url=base + "/mcp",  # type: ignore[arg-type]
            required_scopes=scopes,
            client_registration_options=ClientRegistrationOptions(enabled=True),
            revocation_options=RevocationOptions(enabled=True),
            validate_token_resource=False,
        ),
        token_verifier=ProviderTokenVerifier(provider),
        auth_server_provider=provider,
    )
    app.router.routes.extend(extra_routes)
    wrapped = CallScopes(app, provider, base + "/.well-known/oauth-protected-resource/mcp")
    uv = uvicorn.Server(uvicorn.Config(wrapped, log_level="warning", lifespan="on"))
    task = asyncio.create_task(uv.serve(sockets=[sock]))
    try:
        await until(lambda: uv.started, "the authorization server to start")
        yield Protected(url=base + "/mcp", issuer=base, auth=provider, call_scopes=wrapped)
    finally:
        uv.should_exit = True
        await task
        sock.close()


# -- the operator's browser -----------------------------------------------------------------------


def browser(log: list[ConsentRequest]) -> Callable[[ConsentRequest], Awaitable[None]]:
    """Opens the authorization URL, then follows the authorization server's redirect to
    wherever it points (heron's loopback listener), as a browser would."""

    async def open_url(request: ConsentRequest) -> None:
        log.append(request)
        async with httpx2.AsyncClient(follow_redirects=False, timeout=10) as http:
            answer = await http.get(request.url)
            assert answer.status_code in (302, 303, 307), answer.text
            await http.get(answer.headers["location"])

    return open_url
