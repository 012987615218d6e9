"""Logging in to, out of, and reporting on OAuth-protected MCP servers.

`McpAuth` is the one object the rest of heron talks to: it knows the configured servers, the
state directory and the token key, and builds everything per server —

- `provider(name, ...)`: the SDK's OAuth provider (the HTTP client's auth hook) over the
  server's token file, for a connection (`McpClientManager` uses it);
- `login(name, channel=...)`: a full authorization — discovery, registration, PKCE, the
  operator's consent through a `ConsentChannel`, the token exchange — by connecting to the
  server once; the tokens are stored and the connection closed;
- `logout(name)`: revokes the tokens at the authorization server (RFC 7009, when it has a
  revocation endpoint) and deletes the token file;
- `login_state(name)`: what `heron mcp status` and `heron doctor` show, without any secret.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import httpx2
from mcp.client.auth import OAuthFlowError
from mcp.client.auth.oauth2 import OAuthContext
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    create_oauth_metadata_request,
    handle_auth_metadata_response,
    handle_protected_resource_response,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata

from heron.errors import HeronError
from heron.mcp.auth.causes import find_cause
from heron.mcp.auth.consent import ConsentChannel, ConsentError, ConsentRefused
from heron.mcp.auth.provider import AuthorizationRequired, build_provider, registration_kind
from heron.mcp.auth.scrub import scrub_secrets
from heron.mcp.auth.storage import (
    MIN_KEY_CHARS,
    FileTokenRecords,
    TokenCipher,
    TokenRecords,
    TokenStorage,
    TokenStoreLocked,
    token_path,
)
from heron.mcp.config import McpConfig, McpServerConfig

__all__ = ["LoginFailed", "LoginState", "LoginStatus", "LogoutResult", "McpAuth"]

LoginStatus = Literal["not_oauth", "logged_out", "logged_in", "refreshable", "expired", "locked"]
"""`logged_in`: a valid access token; `refreshable`: it expired but a refresh token renews it
without anyone; `expired`: a login is needed; `locked`: the tokens are encrypted and the key is
missing or wrong; `logged_out`: nothing stored; `not_oauth`: the server does not use OAuth."""

_HTTP_TIMEOUT_S = 30.0


class LoginFailed(HeronError):
    """A login did not end with tokens. `refused` when the operator (or the authorization
    server) said no."""

    def __init__(self, server: str, reason: str, *, refused: bool = False) -> None:
        self.server = server
        self.reason = reason
        self.refused = refused
        super().__init__(f"login to MCP server {server!r} failed: {reason}")


@dataclass(frozen=True, kw_only=True, slots=True)
class LoginState:
    """The login of one server, as status lines show it (never a secret)."""

    server: str
    status: LoginStatus
    detail: str
    """One line for people, e.g. `logged in (issues:read), expires in 54 min`."""
    scope: str | None = None
    expires_at: datetime | None = None
    refreshable: bool = False
    client_id: str | None = None
    registration: Literal["dynamic", "pre-registered", "metadata-document"] | None = None
    grant: Literal["authorization_code", "client_credentials", "identity_assertion"] | None = None
    encrypted: bool = False
    issuer: str | None = None

    @property
    def needs_consent(self) -> bool:
        """Whether using the server now would need a person to consent first."""
        if self.grant in ("client_credentials", "identity_assertion"):
            return False
        return self.status in ("logged_out", "expired", "locked")


@dataclass(frozen=True, kw_only=True, slots=True)
class LogoutResult:
    server: str
    revoked: tuple[str, ...]
    """The token kinds the authorization server revoked (`refresh_token`, `access_token`)."""
    deleted: bool
    """Whether a token file was deleted."""
    problems: tuple[str, ...] = ()
    """Why a revocation did not happen (the local tokens are deleted anyway)."""


def _describe_failure(exc: BaseException) -> tuple[str, bool]:
    """A reason for a failed login, and whether it was a refusal."""
    found = find_cause(exc, (ConsentRefused, ConsentError, AuthorizationRequired, OAuthFlowError))
    if isinstance(found, ConsentRefused):
        return str(found), True
    if found is not None:
        return scrub_secrets(str(found)), False
    if isinstance(exc, TimeoutError):
        return "no consent arrived in time", False
    return scrub_secrets(str(exc) or type(exc).__name__), False


class McpAuth:
    """OAuth for the configured MCP servers (see the module docstring).

    `token_key` encrypts tokens at rest; by default it is read from the environment variable
    `McpConfig.token_key_env` names (`HERON_TOKEN_KEY`). `consent` is the default channel of
    `login()`. With `store_url` the records are in that shared PostgreSQL store instead of
    `state_dir`, where every worker uses them, always encrypted (a server's storage is locked
    without a key).
    """

    def __init__(
        self,
        config: McpConfig | Mapping[str, McpServerConfig],
        *,
        state_dir: Path,
        token_key: str | None = None,
        consent: ConsentChannel | None = None,
        clock: Callable[[], float] = time.time,
        store_url: str | None = None,
    ) -> None:
        if isinstance(config, McpConfig):
            self._servers = dict(config.servers)
            key_env = config.token_key_env
        else:
            self._servers = dict(config)
            key_env = McpConfig().token_key_env
        self._key = token_key if token_key is not None else os.environ.get(key_env)
        self._key_env = key_env
        self._ciphers: list[TokenCipher] = []
        self.state_dir = state_dir
        self.store_url = store_url
        self.consent = consent
        self._clock = clock

    @property
    def encrypted(self) -> bool:
        """Whether tokens are encrypted at rest (a key is configured)."""
        return bool(self._key)

    @property
    def _cipher(self) -> TokenCipher | None:
        """The cipher of the configured key, built on first use (a bad key is reported for
        the servers that need it, not for every run). Raises `TokenStoreLocked`."""
        if not self._key:
            return None
        if not self._ciphers:
            try:
                self._ciphers.append(TokenCipher(self._key))
            except ValueError as exc:
                raise TokenStoreLocked(f"{self._key_env}: {exc}") from None
        return self._ciphers[0]

    def servers(self) -> list[str]:
        """The configured servers that use OAuth, in name order."""
        return sorted(n for n, c in self._servers.items() if c.auth == "oauth")

    def config(self, server: str) -> McpServerConfig:
        cfg = self._servers.get(server)
        if cfg is None or cfg.auth != "oauth" or cfg.url is None:
            raise KeyError(f'MCP server {server!r} is not configured with auth = "oauth"')
        return cfg

    def storage(self, server: str, *, fresh: bool = False) -> TokenStorage:
        """The token storage of `server`. Raises `TokenStoreLocked` for a shared store
        without a token key (tokens never enter it in the clear)."""
        cfg = self.config(server)
        assert cfg.url is not None
        records: TokenRecords = FileTokenRecords(token_path(self.state_dir, server))
        if self.store_url is not None:
            if self._cipher is None:
                raise TokenStoreLocked(
                    f"a shared store keeps OAuth tokens only encrypted: set {self._key_env} "
                    f"(at least {MIN_KEY_CHARS} characters, the same on every worker)"
                )
            from heron._support.postgres import process_pool
            from heron.mcp.auth.postgres_storage import PostgresTokenRecords

            records = PostgresTokenRecords(process_pool(self.store_url), server, clock=self._clock)
        return TokenStorage(
            records,
            server=server,
            url=cfg.url,
            cipher=self._cipher,
            fresh=fresh,
            clock=self._clock,
        )

    def provider(
        self,
        server: str,
        *,
        channel: ConsentChannel | None = None,
        extra_scope: str | None = None,
        fresh: bool = False,
    ) -> httpx2.Auth:
        """The SDK provider for a connection to `server`. Without `channel` a needed consent
        raises `AuthorizationRequired` (the connection fails; nobody is asked)."""
        default = self.consent.redirect_uri(server) if self.consent is not None else None
        return build_provider(
            server,
            self.config(server),
            self.storage(server, fresh=fresh),
            channel=channel,
            redirect_uri=default,
            extra_scope=extra_scope,
        )

    # -- login --------------------------------------------------------------------------------

    async def login(
        self,
        server: str,
        *,
        channel: ConsentChannel | None = None,
        scope: str | None = None,
        timeout_s: float | None = 900.0,
    ) -> LoginState:
        """Authorize heron for `server` now: connect once, let the SDK run the whole flow with
        `channel` (default: `self.consent`) as the consent step, store the tokens.

        Stored tokens are not used (this is a new login; the client registration is kept
        until the new tokens replace them). `scope` adds scopes to what the server asks for
        (a step-up the running agent met). Raises `LoginFailed` (`refused` when consent was
        refused); waits at most `timeout_s` for the whole login.
        """
        cfg = self.config(server)
        channel = channel or self.consent
        if channel is None and cfg.oauth.grant == "authorization_code":
            raise LoginFailed(server, "no consent channel to ask an operator through")
        problems = cfg.credential_problems()
        if problems:
            raise LoginFailed(server, "; ".join(problems))
        provider = build_provider(
            server, cfg, self.storage(server, fresh=True), channel=channel, extra_scope=scope
        )
        try:
            await asyncio.wait_for(_connect_once(cfg, provider), timeout_s)
        except Exception as exc:
            reason, refused = _describe_failure(exc)
            raise LoginFailed(server, reason, refused=refused) from None
        if not getattr(provider, "flows", 0):
            raise LoginFailed(server, "the server did not ask for an authorization")
        return self.login_state(server)

    # -- logout -------------------------------------------------------------------------------

    async def logout(self, server: str) -> LogoutResult:
        """Revoke the stored tokens where the authorization server allows it, then delete
        them (and the client registration) whatever the revocation's outcome."""
        cfg = self.config(server)
        assert cfg.url is not None
        storage = self.storage(server)
        try:
            record = storage.raw_record()
        except TokenStoreLocked as exc:
            deleted = storage.delete()
            return LogoutResult(
                server=server,
                revoked=(),
                deleted=deleted,
                problems=(f"{exc}; not revoked, deleted locally",),
            )
        tokens = record.get("tokens") or {}
        client = record.get("client")
        revoked: list[str] = []
        problems: list[str] = []
        kinds = [k for k in ("refresh_token", "access_token") if tokens.get(k)]
        if kinds:
            try:
                endpoint = (record.get("authorization_server") or {}).get("revocation_endpoint")
                async with httpx2.AsyncClient(timeout=_HTTP_TIMEOUT_S) as http:
                    endpoint = endpoint or await _discover_revocation(http, cfg.url)
                    if endpoint is None:
                        problems.append("the authorization server offers no token revocation")
                    else:
                        info = self._client_info(cfg, client)
                        for kind in kinds:
                            if await _revoke(http, cfg, endpoint, info, tokens[kind], kind):
                                revoked.append(kind)
                            else:
                                problems.append(f"the {kind.replace('_', ' ')} was not revoked")
            except (httpx2.HTTPError, OAuthFlowError, ValueError) as exc:
                problems.append(f"revocation failed: {scrub_secrets(str(exc))}")
        deleted = storage.delete()
        return LogoutResult(
            server=server, revoked=tuple(revoked), deleted=deleted, problems=tuple(problems)
        )

    def _client_info(self, cfg: McpServerConfig, stored: Any) -> OAuthClientInformationFull | None:
        oauth = cfg.oauth
        if oauth.client_id is not None:
            secret = oauth.client_secret()
            return OAuthClientInformationFull(
                client_id=oauth.client_id,
                client_secret=secret,
                token_endpoint_auth_method=oauth.token_endpoint_auth_method
                or ("client_secret_basic" if secret else "none"),
            )
        if isinstance(stored, dict):
            return OAuthClientInformationFull.model_validate(stored)
        return None

    # -- state --------------------------------------------------------------------------------

    def login_state(self, server: str) -> LoginState:
        """The login of `server` now (reads the token file; no network)."""
        cfg = self._servers.get(server)
        if cfg is None or cfg.auth != "oauth":
            return LoginState(server=server, status="not_oauth", detail="no OAuth")
        oauth = cfg.oauth
        base: dict[str, Any] = {
            "server": server,
            "grant": oauth.grant,
            "registration": registration_kind(oauth),
            "encrypted": self.encrypted,
        }
        try:
            record = self.storage(server).describe(registration=registration_kind(oauth))
        except TokenStoreLocked as exc:
            return LoginState(**{**base, "encrypted": True}, status="locked", detail=str(exc))
        if record is None or not record.has_access_token:
            what = (
                "no tokens yet (obtained automatically)"
                if oauth.grant != "authorization_code"
                else "not logged in"
            )
            return LoginState(**base, status="logged_out", detail=what)
        fields: dict[str, Any] = {
            **base,
            "scope": record.scope,
            "refreshable": record.has_refresh_token,
            "client_id": record.client_id or oauth.client_id,
            "issuer": record.issuer,
            "encrypted": record.encrypted,
        }
        scope = f" ({record.scope})" if record.scope else ""
        if record.expires_at is None:
            return LoginState(**fields, status="logged_in", detail=f"logged in{scope}")
        fields["expires_at"] = datetime.fromtimestamp(record.expires_at, UTC)
        left = record.expires_at - self._clock()
        if left > 0:
            return LoginState(
                **fields,
                status="logged_in",
                detail=f"logged in{scope}, access token expires in {_duration(left)}",
            )
        if record.has_refresh_token:
            return LoginState(
                **fields,
                status="refreshable",
                detail=f"logged in{scope}; the access token expired and is refreshed on next use",
            )
        return LoginState(
            **fields, status="expired", detail=f"the login{scope} expired; log in again"
        )


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} days"


async def _connect_once(cfg: McpServerConfig, provider: Any) -> None:
    """Connect with `provider` (its flow runs on the server's first 401) and disconnect. A
    server that lets `initialize` through unauthenticated is asked for its tools; once the
    flow stored tokens, what the server answers afterwards no longer matters."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    assert cfg.url is not None
    http = create_mcp_http_client(headers=cfg.resolved_headers() or None, auth=provider)
    try:
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(http)
            transport = streamable_http_client(cfg.url, http_client=http)
            client = await stack.enter_async_context(
                Client(transport, mode=cfg.protocol, cache=None)
            )
            if not provider.flows:
                await client.list_tools()
    except Exception:
        if not (provider.flows and provider.context.current_tokens is not None):
            raise


async def _discover_revocation(http: httpx2.AsyncClient, server_url: str) -> str | None:
    """The revocation endpoint from the server's protected-resource metadata and its
    authorization server's metadata (the SDK's discovery URLs and parsers)."""
    auth_server: str | None = None
    for url in build_protected_resource_metadata_discovery_urls(None, server_url):
        response = await http.send(create_oauth_metadata_request(url))
        prm = await handle_protected_resource_response(response)
        if prm is not None and prm.authorization_servers:
            auth_server = str(prm.authorization_servers[0])
            break
    for url in build_oauth_authorization_server_metadata_discovery_urls(auth_server, server_url):
        response = await http.send(create_oauth_metadata_request(url))
        ok, metadata = await handle_auth_metadata_response(response)
        if not ok:
            break
        if metadata is not None:
            endpoint = metadata.revocation_endpoint
            return str(endpoint) if endpoint is not None else None
    return None


async def _revoke(
    http: httpx2.AsyncClient,
    cfg: McpServerConfig,
    endpoint: str,
    info: OAuthClientInformationFull | None,
    token: str,
    kind: str,
) -> bool:
    """One RFC 7009 revocation request, with the client authentication the SDK would use."""
    assert cfg.url is not None
    context = OAuthContext(
        server_url=cfg.url,
        client_metadata=OAuthClientMetadata(redirect_uris=None),
        storage=None,  # type: ignore[arg-type]  # prepare_token_auth reads only client_info
        redirect_handler=None,
        callback_handler=None,
        client_info=info,
    )
    data = {"token": token, "token_type_hint": kind}
    if info is not None:
        data["client_id"] = info.client_id
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    data, headers = context.prepare_token_auth(data, headers)
    response = await http.post(endpoint, data=data, headers=headers)
    return response.status_code == 200
