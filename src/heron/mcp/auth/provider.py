"""The SDK's OAuth client provider, configured from `[mcp.servers.NAME.oauth]`.

`build_provider` returns an `httpx2.Auth` (the HTTP client's auth hook) that is the official
SDK's `OAuthClientProvider` — or its `ClientCredentialsOAuthProvider` /
`PrivateKeyJWTOAuthProvider` for machine clients — with heron's storage and consent step. The
SDK does the protocol: protected-resource and authorization-server metadata discovery (with the
2025-03-26 fallbacks), dynamic client registration or a client-ID metadata document, PKCE, the
scope choice, step-up on `403 insufficient_scope`, refresh, RFC 8707 resource indicators.

heron overrides three of the SDK's internal steps, each small (`test_mcp_oauth.py` fails by name
when an SDK release moves one of them):

- `_initialize` also restores the access token's expiry from storage (the SDK trusts a loaded
  token forever, so a restarted process would send an expired token and need a new consent
  instead of refreshing), applies a pre-registered client id, and — before a consent —
  forgets a dynamic registration made for another redirect URI;
- `_perform_authorization_code_grant` adds the configured scopes and any scopes a step-up
  asked for to the scopes the SDK chose from the server's challenge;
- the context's `update_token_expiry` treats a token as expired `refresh_margin_s` early, so
  it is refreshed before a request can fail with it;
- a refresh is claimed in the storage first (`TokenStorage.claim_refresh`): a token due for
  refresh makes the provider read the stored record again (`_initialized` is false while the
  token is not valid), so when another worker of a shared store refreshed meanwhile its token
  is used, and two workers never send the same refresh token (`_handle_refresh_response`
  gives the claim up when the refresh failed).

In `interactive=False` mode (a running agent) the consent step is not taken: the redirect
handler raises `AuthorizationRequired` and the caller decides whom to ask.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Literal

import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.client.auth.oauth2 import OAuthContext
from mcp.client.auth.utils import union_scopes
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from mcp.shared.exceptions import MCPDeprecationWarning
from pydantic import AnyUrl

from heron.errors import HeronError
from heron.mcp.auth.consent import ConsentChannel, ConsentError, ConsentRequest, parse_redirect
from heron.mcp.auth.scrub import install_log_filter, remember_secret
from heron.mcp.auth.storage import TokenStorage
from heron.mcp.config import McpOAuthConfig, McpServerConfig

__all__ = [
    "DEFAULT_REDIRECT_URI",
    "AuthorizationRequired",
    "HeronOAuth",
    "build_provider",
    "registration_kind",
]

DEFAULT_REDIRECT_URI = "http://127.0.0.1:33418/callback"
"""Where the operator's browser is sent when neither the channel nor the configuration says."""


class AuthorizationRequired(HeronError):
    """An OAuth login needs a person's consent, and this connection does not ask anyone.

    `scope` is what the authorization would ask for (a step-up's union included).
    """

    def __init__(self, server: str, *, scope: str | None, step_up: bool) -> None:
        self.server = server
        self.scope = scope
        self.step_up = step_up
        what = f"more scopes ({scope})" if step_up else "a login"
        super().__init__(f"MCP server {server!r} needs {what} with an operator's consent")


def registration_kind(
    oauth: McpOAuthConfig,
) -> Literal["dynamic", "pre-registered", "metadata-document"]:
    """How this configuration identifies heron to the authorization server."""
    if oauth.client_id is not None:
        return "pre-registered"
    if oauth.client_metadata_url is not None:
        return "metadata-document"
    return "dynamic"


@dataclass
class _Context(OAuthContext):
    refresh_margin_s: float = 60.0

    def early(self, lifetime: float) -> float:
        """How much earlier than its expiry a token of `lifetime` seconds is renewed: the
        margin, but never more than half the lifetime (a short-lived token stays usable)."""
        return min(self.refresh_margin_s, lifetime / 2)

    def update_token_expiry(self, token: OAuthToken) -> None:
        super().update_token_expiry(token)
        if self.token_expiry_time is not None and token.expires_in is not None:
            self.token_expiry_time -= self.early(int(token.expires_in))


class HeronOAuth:
    """heron's additions to an SDK provider (mixed in ahead of the SDK class)."""

    context: OAuthContext
    _loaded = False

    @property
    def _initialized(self) -> bool:
        # A token that is not valid (due for refresh, or none yet) sends the SDK through
        # `_initialize` again: the stored record may be newer than ours.
        return self._loaded and self.context.is_token_valid()

    @_initialized.setter
    def _initialized(self, value: bool) -> None:
        self._loaded = value

    def _heron_setup(
        self,
        *,
        server: str,
        oauth: McpOAuthConfig,
        fixed_client: OAuthClientInformationFull | None = None,
        extra_scope: str | None = None,
        machine: bool = False,
        interactive: bool = False,
    ) -> None:
        old = self.context
        values = {f.name: getattr(old, f.name) for f in fields(old)}
        self.context = _Context(**values, refresh_margin_s=oauth.refresh_margin_s)
        self.heron_server = server
        self._fixed_client = fixed_client
        self._extra_scope = union_scopes(" ".join(oauth.scopes) or None, extra_scope)
        self._metadata_url = oauth.client_metadata_url
        self._machine = machine
        self._interactive = interactive
        self.flows = 0
        """Authorizations (a consent or a client-credentials grant) this provider ran."""
        self.authorization_required: AuthorizationRequired | None = None
        """Set when a consent was needed and not asked for (no channel)."""
        if isinstance(self.context.storage, TokenStorage):
            self.context.storage.metadata = self._metadata

    def _metadata(self) -> dict[str, str | None]:
        found = self.context.oauth_metadata
        if found is None:
            return {"issuer": self.context.auth_server_url, "revocation_endpoint": None}
        revocation = found.revocation_endpoint
        return {
            "issuer": str(found.issuer),
            "revocation_endpoint": str(revocation) if revocation is not None else None,
        }

    async def _initialize(self) -> None:
        await self._load()
        context, storage = self.context, self.context.storage
        due = context.current_tokens is not None and not context.is_token_valid()
        due = due and context.can_refresh_token()
        if due and isinstance(storage, TokenStorage) and not await storage.claim_refresh():
            await self._load()  # another worker refreshed while we waited: its token

    async def _handle_refresh_response(self, response: httpx2.Response) -> bool:
        storage = self.context.storage
        try:
            return await super()._handle_refresh_response(response)  # type: ignore[misc,no-any-return]
        finally:
            if isinstance(storage, TokenStorage):
                storage.release_refresh()

    async def _load(self) -> None:
        """The SDK's load of the stored tokens and registration, with heron's corrections."""
        await super()._initialize()  # type: ignore[misc]
        context = self.context
        if self._fixed_client is not None:
            context.client_info = self._fixed_client
        elif self._interactive and context.client_info is not None:
            # A consent is coming: a dynamic registration for another redirect URI would be
            # refused at the authorization endpoint, so register again. (A connection without
            # a channel keeps it: refreshing needs it, and its redirect URI is never used.)
            wanted = {str(u) for u in context.client_metadata.redirect_uris or []}
            registered = {str(u) for u in context.client_info.redirect_uris or []}
            if context.client_info.client_id != self._metadata_url and not wanted <= registered:
                context.client_info = None
        storage = context.storage
        loaded = storage.loaded_lifetime if isinstance(storage, TokenStorage) else None
        if context.current_tokens is not None and loaded is not None:
            left, lifetime = loaded
            early = context.early(lifetime) if isinstance(context, _Context) and lifetime else 0
            context.token_expiry_time = time.time() + left - early
        if context.client_info is not None:
            remember_secret(context.client_info.client_secret)

    async def _perform_authorization(self) -> httpx2.Request:
        if self._machine:
            self.flows += 1
        return await super()._perform_authorization()  # type: ignore[misc,no-any-return]

    async def _perform_authorization_code_grant(self) -> tuple[str, str]:
        self.flows += 1
        metadata = self.context.client_metadata
        metadata.scope = union_scopes(metadata.scope, self._extra_scope)
        return await super()._perform_authorization_code_grant()  # type: ignore[misc,no-any-return]


class _AuthorizationCode(HeronOAuth, OAuthClientProvider):
    pass


class _ClientCredentials(HeronOAuth, ClientCredentialsOAuthProvider):
    pass


class _PrivateKeyJWT(HeronOAuth, PrivateKeyJWTOAuthProvider):
    pass


def _machine_provider(config: McpServerConfig, storage: TokenStorage) -> Any:
    oauth = config.oauth
    assert config.url is not None and oauth.client_id is not None
    scope = " ".join(oauth.scopes) or None
    with warnings.catch_warnings():
        # Without `issuer` the SDK warns that its 3.0 will require one (see docs/mcp.md).
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        if oauth.private_key_env is not None:
            signer = SignedJWTParameters(
                issuer=oauth.client_id,
                subject=oauth.client_id,
                signing_key=os.environ.get(oauth.private_key_env, ""),
                signing_algorithm=oauth.signing_algorithm,
            )
            return _PrivateKeyJWT(
                config.url,
                storage,
                oauth.client_id,
                signer.create_assertion_provider(),
                scope=scope,
                issuer=oauth.issuer,
            )
        secret = oauth.client_secret() or ""
        remember_secret(secret)
        post = oauth.token_endpoint_auth_method == "client_secret_post"
        return _ClientCredentials(
            config.url,
            storage,
            oauth.client_id,
            secret,
            token_endpoint_auth_method="client_secret_post" if post else "client_secret_basic",
            scope=scope,
            issuer=oauth.issuer,
        )


def build_provider(
    server: str,
    config: McpServerConfig,
    storage: TokenStorage,
    *,
    channel: ConsentChannel | None,
    redirect_uri: str | None = None,
    extra_scope: str | None = None,
    on_request: Callable[[ConsentRequest], None] | None = None,
) -> httpx2.Auth:
    """The SDK provider for one server. Without `channel` the consent step raises
    `AuthorizationRequired` instead of asking (machine grants never ask). `redirect_uri`
    overrides the channel's (a connection without a channel registers, if it must, with the
    redirect URI its later login will use)."""
    install_log_filter((AuthorizationRequired, ConsentError))
    assert config.url is not None
    oauth = config.oauth
    if oauth.grant == "identity_assertion":
        from heron.mcp.auth.identity_assertion import identity_provider

        return identity_provider(config, storage)
    if oauth.grant == "client_credentials":
        machine = _machine_provider(config, storage)
        machine._heron_setup(server=server, oauth=oauth, machine=True)
        return machine  # type: ignore[no-any-return]

    redirect_uri = (
        oauth.redirect_uri
        or redirect_uri
        or (channel.redirect_uri(server) if channel is not None else None)
        or DEFAULT_REDIRECT_URI
    )
    method = oauth.token_endpoint_auth_method
    metadata = OAuthClientMetadata(
        client_name=oauth.client_name,
        redirect_uris=[AnyUrl(redirect_uri)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method=method if method != "private_key_jwt" else None,
        scope=" ".join(oauth.scopes) or None,
    )
    fixed = None
    if oauth.client_id is not None:
        secret = oauth.client_secret()
        remember_secret(secret)
        fixed = OAuthClientInformationFull(
            client_id=oauth.client_id,
            client_secret=secret,
            redirect_uris=[AnyUrl(redirect_uri)],
            grant_types=["authorization_code", "refresh_token"],
            token_endpoint_auth_method=method or ("client_secret_basic" if secret else "none"),
            issuer=oauth.issuer,
        )
    pending: dict[str, ConsentRequest] = {}
    holder: dict[str, Any] = {}

    async def redirect_handler(url: str) -> None:
        request = ConsentRequest.for_url(server, url, redirect_uri=redirect_uri)
        if channel is None:
            context = holder["provider"].context
            wanted = set((context.client_metadata.scope or "").split())
            granted = context.current_tokens.scope if context.current_tokens else None
            # A step-up: the token still works, but not for everything asked now.
            step_up = context.is_token_valid() and not wanted <= set((granted or "").split())
            required = AuthorizationRequired(
                server, scope=context.client_metadata.scope, step_up=step_up
            )
            holder["provider"].authorization_required = required
            raise required
        pending["request"] = request
        if on_request is not None:
            on_request(request)
        await channel.present(request)

    async def callback_handler() -> AuthorizationCodeResult:
        assert channel is not None
        request = pending.pop("request")
        result = parse_redirect(await channel.redirected(request), request)
        remember_secret(result.code)
        return result

    provider = _AuthorizationCode(
        config.url,
        metadata,
        storage,
        redirect_handler,
        callback_handler,
        client_metadata_url=oauth.client_metadata_url,
    )
    holder["provider"] = provider
    provider._heron_setup(
        server=server,
        oauth=oauth,
        fixed_client=fixed,
        extra_scope=extra_scope,
        interactive=channel is not None,
    )
    return provider
