"""Enterprise-managed authorization (SEP-990): heron's token exchange at an identity provider,
against a real token endpoint on loopback; and the sealed answers consent requests rely on.

The whole flow (the exchange, then the SDK's jwt-bearer grant at the authorization server) runs
against the official conformance suite's `auth/cross-app-access-complete-flow` scenario
(`scripts/run-mcp-conformance.sh`).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import uvicorn
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from heron.humans.sealing import SealingError, SealingKey, seal
from heron.mcp.auth.identity_assertion import (
    ID_JAG,
    IdentityAssertionFailed,
    exchange_id_token,
)
from heron.mcp.config import McpOAuthConfig
from support.waiting import until


@asynccontextmanager
async def identity_provider(valid_token: str) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """An RFC 8693 token endpoint that issues an ID-JAG for `valid_token` only."""
    seen: list[dict[str, Any]] = []

    async def token(request: Request) -> JSONResponse:
        form = dict(await request.form())
        seen.append({**form, "authorization": request.headers.get("authorization")})
        if form.get("subject_token") != valid_token:
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        return JSONResponse(
            {"access_token": "jag-" + "x" * 20, "issued_token_type": ID_JAG, "token_type": "N_A"}
        )

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    app = Starlette(routes=[Route("/token", token, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await until(lambda: server.started, "the identity provider to start")
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/token", seen
    finally:
        server.should_exit = True
        await task
        sock.close()


async def test_the_id_token_is_exchanged_for_an_id_jag_naming_the_server_and_its_resource() -> None:
    async with identity_provider("id-token-ok") as (endpoint, seen):
        jag = await exchange_id_token(
            token_endpoint=endpoint,
            id_token="id-token-ok",
            client_id="heron-at-idp",
            client_secret="idp-secret-value",
            audience="https://auth.example.com",
            resource="https://mcp.example.com/mcp",
        )

    assert jag == "jag-" + "x" * 20
    request = seen[0]
    assert request["grant_type"] == "urn:ietf:params:oauth:grant-type:token-exchange"
    assert request["subject_token_type"] == "urn:ietf:params:oauth:token-type:id_token"
    assert request["requested_token_type"] == ID_JAG
    assert request["audience"] == "https://auth.example.com"
    assert request["resource"] == "https://mcp.example.com/mcp"
    assert str(request["authorization"]).startswith("Basic ")


async def test_a_refused_exchange_says_so_without_the_id_token() -> None:
    async with identity_provider("id-token-ok") as (endpoint, _seen):
        with pytest.raises(IdentityAssertionFailed) as failed:
            await exchange_id_token(
                token_endpoint=endpoint,
                id_token="expired-id-token-value",
                client_id="heron-at-idp",
                client_secret=None,
                audience="https://auth.example.com",
                resource="https://mcp.example.com/mcp",
            )

    assert "refused the token exchange (400)" in str(failed.value)
    assert "expired-id-token-value" not in str(failed.value)


def test_identity_assertion_needs_its_authorization_server_and_identity_provider() -> None:
    with pytest.raises(ValidationError) as missing:
        McpOAuthConfig(grant="identity_assertion", client_id="heron", client_secret_env="S")
    assert "needs issuer, id_token_env, idp_token_endpoint, idp_client_id" in str(missing.value)
    with pytest.raises(ValidationError) as stray:
        McpOAuthConfig(id_token_env="ID_TOKEN")
    assert "apply to grant = 'identity_assertion'" in str(stray.value)


def test_a_sealed_answer_opens_only_with_its_key_and_for_its_request() -> None:
    key, other = SealingKey(), SealingKey()
    sealed = seal("https://heron.example.com/cb?code=abc&state=s", key.public, request_id="ask-1")

    assert "code=abc" not in sealed
    assert key.open(sealed, request_id="ask-1") == "https://heron.example.com/cb?code=abc&state=s"
    with pytest.raises(SealingError):
        other.open(sealed, request_id="ask-1")
    with pytest.raises(SealingError):
        key.open(sealed, request_id="ask-2")  # copied onto another request
    with pytest.raises(SealingError):
        key.open("code=abc", request_id="ask-1")  # an answer that was never sealed
