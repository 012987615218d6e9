"""Enterprise-managed authorization (SEP-990): no consent step, the enterprise's identity
provider vouches for the operator.

Two exchanges, for `grant = "identity_assertion"`:

1. at the identity provider, the operator's ID token for an Identity Assertion Authorization
   Grant (ID-JAG) naming the MCP authorization server and the MCP server (RFC 8693 token
   exchange) — the step the SDK leaves to the deployment, done here by `exchange_id_token`;
2. at the MCP authorization server, the ID-JAG for an access token (RFC 7523 jwt-bearer) — the
   SDK's `IdentityAssertionOAuthProvider`, over heron's token file.

The authorization server is configuration (`issuer`), never discovered from the MCP server, so
neither the ID-JAG nor the client secret can be redirected elsewhere. The ID token comes from
the environment variable `id_token_env` names (how the deployment's single sign-on hands it to
heron), read at every exchange so a renewed one is used; each ID-JAG is a known secret.
"""

from __future__ import annotations

import os
from typing import Final

import httpx2
from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider

from heron.errors import HeronError
from heron.mcp.auth.scrub import remember_secret, scrub_secrets
from heron.mcp.auth.storage import TokenStorage
from heron.mcp.config import McpServerConfig

__all__ = ["ID_JAG", "IdentityAssertionFailed", "exchange_id_token", "identity_provider"]

TOKEN_EXCHANGE: Final = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_TOKEN: Final = "urn:ietf:params:oauth:token-type:id_token"
ID_JAG: Final = "urn:ietf:params:oauth:token-type:id-jag"
_TIMEOUT_S: Final = 30.0
_MAX_SHOWN: Final = 300


class IdentityAssertionFailed(HeronError):
    """The identity provider did not issue an ID-JAG (an expired ID token, a refused client)."""


async def exchange_id_token(
    *,
    token_endpoint: str,
    id_token: str,
    client_id: str,
    client_secret: str | None,
    audience: str,
    resource: str,
) -> str:
    """The ID-JAG the identity provider issues for `id_token` (RFC 8693), for the
    authorization server `audience` and the MCP server `resource`."""
    data = {
        "grant_type": TOKEN_EXCHANGE,
        "subject_token": id_token,
        "subject_token_type": ID_TOKEN,
        "requested_token_type": ID_JAG,
        "audience": audience,
        "resource": resource,
        "client_id": client_id,
    }
    async with httpx2.AsyncClient(timeout=_TIMEOUT_S) as http:
        if client_secret:
            auth = httpx2.BasicAuth(client_id, client_secret)
            response = await http.post(token_endpoint, data=data, auth=auth)
        else:
            response = await http.post(token_endpoint, data=data)
    if response.status_code != 200:
        shown = scrub_secrets(response.text[:_MAX_SHOWN])
        raise IdentityAssertionFailed(
            f"the identity provider refused the token exchange ({response.status_code}): {shown}"
        )
    try:
        body = response.json()
    except ValueError:
        body = None
    jag = body.get("access_token") if isinstance(body, dict) else None
    if not isinstance(jag, str) or not jag or body.get("issued_token_type") != ID_JAG:
        raise IdentityAssertionFailed("the identity provider's answer carries no ID-JAG")
    remember_secret(jag)
    return jag


def identity_provider(config: McpServerConfig, storage: TokenStorage) -> httpx2.Auth:
    """The SDK's jwt-bearer provider, its assertions from `exchange_id_token`."""
    oauth = config.oauth
    assert config.url is not None and oauth.client_id is not None and oauth.issuer is not None
    assert oauth.idp_token_endpoint is not None and oauth.idp_client_id is not None
    token_endpoint, idp_client_id = oauth.idp_token_endpoint, oauth.idp_client_id
    secret = oauth.client_secret() or ""
    idp_secret = os.environ.get(oauth.idp_client_secret_env or "") or None
    remember_secret(secret, idp_secret)

    async def assertion(audience: str, resource: str) -> str:
        id_token = os.environ.get(oauth.id_token_env or "")
        if not id_token:
            raise IdentityAssertionFailed(f"${oauth.id_token_env} holds no ID token")
        remember_secret(id_token)
        return await exchange_id_token(
            token_endpoint=token_endpoint,
            id_token=id_token,
            client_id=idp_client_id,
            client_secret=idp_secret,
            audience=audience,
            resource=resource,
        )

    post = oauth.token_endpoint_auth_method == "client_secret_post"
    return IdentityAssertionOAuthProvider(
        config.url,
        storage,
        oauth.client_id,
        secret,
        oauth.issuer,
        assertion,
        scope=" ".join(oauth.scopes) or None,
        token_endpoint_auth_method="client_secret_post" if post else "client_secret_basic",
    )
