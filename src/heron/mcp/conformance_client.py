"""Entry point that the official MCP conformance suite drives as the client under test.

The suite (`@modelcontextprotocol/conformance`, ``conformance client --command ...``) starts a
scenario server, runs ``python -m heron.mcp.conformance_client <server-url>`` with the scenario
name in ``MCP_CONFORMANCE_SCENARIO`` (and, for some OAuth scenarios, provisioned credentials in
``MCP_CONFORMANCE_CONTEXT``), and then checks what the client did on the wire.

Everything goes through heron's own `McpClientManager` and `McpTool`, the code `heron run` uses,
with one Streamable HTTP server configured at heron's defaults and no trust store: connect
(discovery probe, then the initialize handshake), list the tools, then validate arguments
strictly and call every tool once, rendering each result as a heron `ToolResult`.

For the ``auth/*`` scenarios the server is configured with ``auth = "oauth"`` the way an operator
would configure it — a client-ID metadata document URL (used where the authorization server
supports them, else dynamic registration), or the credentials the suite provisions (a
pre-registered client, or a machine client for the ``client-credentials-*`` scenarios) — and
the tokens go to a throw-away state directory. The running manager never blocks for consent:
a server that needs a login goes ``auth_required`` and heron asks through its consent channel
in the background, which here is `FollowRedirectConsent` (the scenario authorization servers
consent at once and redirect, as the suite expects); once the login is done the same step is
retried, once. A call refused for want of scopes (a step-up) is retried once the same way.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from heron.mcp.auth import FollowRedirectConsent, McpAuth
from heron.mcp.client import McpClientManager, McpTool
from heron.mcp.config import McpServerConfig
from heron.tools.definition import ToolContext

__all__ = [
    "CLIENT_METADATA_URL",
    "REDIRECT_URI",
    "SERVER_NAME",
    "TOOL_ARGUMENTS",
    "main",
    "run_scenario",
    "server_config",
]

SERVER_NAME = "conformance"
"""The name the scenario server gets in heron's configuration (its tools are `conformance__*`)."""

TOOL_ARGUMENTS: Mapping[str, Mapping[str, Any]] = {"add_numbers": {"a": 5, "b": 3}}
"""Arguments for the scenario servers' tools that take any; every other tool gets `{}`."""

CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
"""The client-ID metadata document the suite's authorization servers expect."""

REDIRECT_URI = "http://localhost:3000/callback"

_SECRET_ENV = "HERON_CONFORMANCE_CLIENT_SECRET"
_KEY_ENV = "HERON_CONFORMANCE_PRIVATE_KEY"
_ID_TOKEN_ENV = "HERON_CONFORMANCE_ID_TOKEN"
_LOGIN_WAIT_S = 60.0


def _log(line: str) -> None:
    # stdout and stderr are both captured into the suite's results; stderr keeps stdout clean.
    print(f"heron-conformance: {line}", file=sys.stderr, flush=True)


def server_config(
    url: str,
    scenario: str = "",
    context: Mapping[str, Any] | None = None,
    *,
    issuer: str | None = None,
) -> McpServerConfig:
    """heron's configuration of the scenario server, as an operator would write it.

    Outside ``auth/*``: just the URL. For OAuth scenarios the provisioned credentials (the
    suite's context) decide: an identity provider's ID token means enterprise-managed
    authorization (``grant = "identity_assertion"``, the authorization server `issuer` as the
    operator knows it); a private key or a ``client-credentials-*`` scenario means a machine
    client (``grant = "client_credentials"``); a client id with a secret otherwise means a
    pre-registered client; nothing means a client-ID metadata document with dynamic
    registration as the fallback. Secrets go into the environment, as the configuration asks.
    """
    if not scenario.startswith("auth/"):
        return McpServerConfig(url=url)
    context = context or {}
    oauth: dict[str, Any] = {}
    client_id = context.get("client_id")
    if context.get("idp_id_token"):
        os.environ[_ID_TOKEN_ENV] = str(context["idp_id_token"])
        os.environ[_SECRET_ENV] = str(context.get("client_secret", ""))
        oauth = {
            "grant": "identity_assertion",
            "client_id": client_id,
            "client_secret_env": _SECRET_ENV,
            "issuer": issuer,
            "id_token_env": _ID_TOKEN_ENV,
            "idp_token_endpoint": context.get("idp_token_endpoint"),
            "idp_client_id": context.get("idp_client_id"),
        }
    elif context.get("private_key_pem"):
        os.environ[_KEY_ENV] = str(context["private_key_pem"])
        oauth = {
            "grant": "client_credentials",
            "client_id": client_id,
            "private_key_env": _KEY_ENV,
            "signing_algorithm": str(context.get("signing_algorithm", "ES256")),
        }
    elif client_id and context.get("client_secret"):
        os.environ[_SECRET_ENV] = str(context["client_secret"])
        oauth = {"client_id": client_id, "client_secret_env": _SECRET_ENV}
        if scenario.startswith("auth/client-credentials"):
            oauth["grant"] = "client_credentials"
    else:
        oauth = {"client_metadata_url": CLIENT_METADATA_URL}
    return McpServerConfig.model_validate({"url": url, "auth": "oauth", "oauth": oauth})


async def run_scenario(
    url: str, scenario: str = "", context: Mapping[str, Any] | None = None
) -> int:
    """Connect heron's MCP client to `url`, list the server's tools and call each one once.

    Returns the exit status: 0 when the server could be listed and every call succeeded,
    1 otherwise (the reason is logged on stderr). `scenario` and `context` choose the OAuth
    configuration (`server_config`).
    """
    label = scenario or "(no scenario)"
    issuer = await _authorization_server(url) if (context or {}).get("idp_id_token") else None
    config = server_config(url, scenario, context, issuer=issuer)
    with tempfile.TemporaryDirectory(prefix="heron-conformance-") as state:
        auth = McpAuth(
            {SERVER_NAME: config},
            state_dir=Path(state),
            consent=FollowRedirectConsent(redirect_uri=REDIRECT_URI),
        )
        async with McpClientManager({SERVER_NAME: config}, auth=auth) as manager:
            tools, problems = await manager.tools()
            if problems and await _logged_in(manager):
                tools, problems = await manager.tools()
            if problems:
                _log(f"{label}: cannot list tools: {problems[SERVER_NAME]}")
                return 1
            names = ", ".join(t.definition.name for t in tools) or "-"
            _log(f"{label}: connected; tools: {names}")
            called = [await _call_once(manager, tool) for tool in tools]
            return 0 if all(called) else 1


async def _authorization_server(url: str) -> str | None:
    """The authorization server the scenario's protected-resource metadata names: what the
    operator of an enterprise-managed server is told and configures as `issuer`."""
    import httpx2
    from mcp.client.auth.utils import (
        build_protected_resource_metadata_discovery_urls,
        create_oauth_metadata_request,
        handle_protected_resource_response,
    )

    async with httpx2.AsyncClient(timeout=30.0) as http:
        for candidate in build_protected_resource_metadata_discovery_urls(None, url):
            metadata = await handle_protected_resource_response(
                await http.send(create_oauth_metadata_request(candidate))
            )
            if metadata is not None and metadata.authorization_servers:
                return str(metadata.authorization_servers[0]).rstrip("/")
    return None


async def _logged_in(manager: McpClientManager) -> bool:
    """Wait for a login heron started in the background (a server that was `auth_required`)."""
    status = {s.name: s for s in manager.status()}[SERVER_NAME]
    if status.state != "auth_required":
        return False
    _log(f"waiting for the login heron asked for: {status.last_error}")
    return await manager.wait_for_login(SERVER_NAME, _LOGIN_WAIT_S)


async def _call_once(manager: McpClientManager, tool: McpTool) -> bool:
    name = tool.definition.name
    ctx = ToolContext(call_id=f"conformance-{name}", turn_id="conformance", progress=_log)
    arguments = tool.validate(TOOL_ARGUMENTS.get(name, {}))
    result = await tool.execute(arguments, ctx)
    needs_consent = isinstance(result.data, dict) and (
        result.data.get("mcp_error", {}).get("kind") == "auth_required"
    )
    if needs_consent:
        _log(f"{tool.spec.name}: {result.error}")
        if await _logged_in(manager):
            result = await tool.execute(arguments, ctx)
    outcome = "ok" if result.success else "failed"
    _log(f"{tool.spec.name} {outcome}: {result.output if result.success else result.error}")
    return result.success


def _context() -> dict[str, Any]:
    raw = os.environ.get("MCP_CONFORMANCE_CONTEXT")
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        _log("MCP_CONFORMANCE_CONTEXT is not JSON; ignored")
        return {}
    return parsed if isinstance(parsed, dict) else {}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m heron.mcp.conformance_client <server-url>`` (the suite appends the URL)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        _log("usage: python -m heron.mcp.conformance_client <server-url>")
        return 2
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    return asyncio.run(run_scenario(args[0], scenario, _context()))


if __name__ == "__main__":
    sys.exit(main())
