"""OAuth for MCP servers, through the official SDK's OAuth client (`mcp.client.auth`).

A server configured with `auth = "oauth"` gets the SDK's provider as the auth hook of its HTTP
client: discovery, dynamic client registration or a client-ID metadata document, PKCE, scope
step-up, refresh. heron adds what the SDK leaves to its user:

- `storage`: the token file per server in the state directory (0600, encrypted at rest with a
  key), implementing the SDK's `TokenStorage`;
- `consent`: the consent step behind `ConsentChannel` (terminal paste, loopback callback,
  automatic redirect for test servers); the OAuth `state` binds a redirect to its request;
- `desk_consent`: `DeskConsent`, the consent step as a sealed request on the durable desk
  (`heron.humans`), answered by the callback route or a paste; `callback`: that route
  (`oauth_callback_routes`, mounted by the gateway at `[gateway] public_url`);
- `identity_assertion`: enterprise-managed authorization (SEP-990), the token exchange at the
  identity provider in front of the SDK's jwt-bearer provider;
- `provider`: the SDK provider configured from `[mcp.servers.NAME.oauth]`, which in a running
  agent never blocks for consent (`AuthorizationRequired`);
- `session`: `McpAuth` — `login`, `logout` (with revocation), `login_state`;
- `scrub`: secrets never reach logs, events, audits or status lines.
"""

from __future__ import annotations

from heron.mcp.auth.consent import (
    ConsentChannel,
    ConsentError,
    ConsentRefused,
    ConsentRequest,
    FollowRedirectConsent,
    LoopbackConsent,
    TerminalConsent,
    parse_redirect,
)
from heron.mcp.auth.provider import AuthorizationRequired, build_provider
from heron.mcp.auth.scrub import scrub_secrets
from heron.mcp.auth.session import LoginFailed, LoginState, LoginStatus, LogoutResult, McpAuth
from heron.mcp.auth.storage import FileTokenStorage, TokenCipher, TokenStoreLocked, token_path

__all__ = [
    "AuthorizationRequired",
    "ConsentChannel",
    "ConsentError",
    "ConsentRefused",
    "ConsentRequest",
    "FileTokenStorage",
    "FollowRedirectConsent",
    "LoginFailed",
    "LoginState",
    "LoginStatus",
    "LogoutResult",
    "LoopbackConsent",
    "McpAuth",
    "TerminalConsent",
    "TokenCipher",
    "TokenStoreLocked",
    "build_provider",
    "parse_redirect",
    "scrub_secrets",
    "token_path",
]
