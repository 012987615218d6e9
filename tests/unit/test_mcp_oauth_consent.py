"""The consent step of an MCP OAuth login as a request to a human on the durable desk.

A real authorization server and protected MCP server on loopback (`support.oauth_servers`)
also serve heron's callback route (`oauth_callback_routes`) in the same uvicorn app, as the
gateway would; the requests live in a real SQLite store; "the operator's browser" is an HTTP
client that opens the authorization URL the desk delivered and follows the redirect.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from heron.humans.config import ApprovalsConfig
from heron.humans.console import ConsoleChannel
from heron.humans.desk import RequestDesk
from heron.humans.refusals import InvalidAnswer, NotAnApprover
from heron.humans.signing import DecisionKeyStore, DecisionSigner
from heron.humans.sqlite_store import SqliteRequestStore
from heron.humans.store import HumanRequest
from heron.mcp.auth import LoginFailed, LoginState, McpAuth
from heron.mcp.auth.callback import CALLBACK_PATH, REDIRECT_BY, oauth_callback_routes
from heron.mcp.auth.desk_consent import CONSENT_TOOL, DeskConsent, pending_consent
from heron.mcp.client import McpClientManager
from heron.mcp.config import McpServerConfig
from support.oauth_servers import Protected, protected_server
from support.waiting import until


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[RequestDesk]:
    state = tmp_path / "state"
    store = SqliteRequestStore.open_dir(state)
    yield RequestDesk(
        store, signer=DecisionSigner(DecisionKeyStore(state)), channels=[ConsoleChannel()]
    )
    store.close()


def _servers(url: str) -> dict[str, McpServerConfig]:
    return {"tickets": McpServerConfig(url=url, auth="oauth")}


def _url_of(request: HumanRequest) -> str:
    line = next(x for x in request.question.splitlines() if x.strip().startswith("http"))
    return line.strip()


async def _one_pending(desk: RequestDesk) -> HumanRequest:
    found: list[HumanRequest] = []

    def check() -> bool:
        found[:] = pending_consent(desk, server="tickets")
        return bool(found)

    await until(check, "the consent request on the desk")
    return found[0]


@dataclass
class Waiting:
    """A login running in the background, waiting on its consent request."""

    auth: McpAuth
    task: asyncio.Task[LoginState]
    pending: HumanRequest


async def _login_waiting(
    desk: RequestDesk, srv: Protected, state_dir: Path, redirect_uri: str
) -> Waiting:
    consent = DeskConsent(desk, redirect_uri=redirect_uri, poll_s=0.01)
    auth = McpAuth(_servers(srv.url), state_dir=state_dir, token_key="")
    task = asyncio.create_task(auth.login("tickets", channel=consent))
    return Waiting(auth=auth, task=task, pending=await _one_pending(desk))


async def _consent(url: str) -> str:
    """The operator's browser: open the authorization URL, return where it redirects."""
    async with httpx2.AsyncClient(follow_redirects=False, timeout=10) as http:
        answer = await http.get(url)
    assert answer.status_code in (302, 303, 307), answer.text
    return answer.headers["location"]


def _database_text(tmp_path: Path) -> str:
    rows = sqlite3.connect(tmp_path / "state" / "heron.db").execute("SELECT * FROM human_requests")
    return repr(rows.fetchall())


async def test_the_browser_redirect_to_the_callback_route_completes_a_desk_login(
    tmp_path: Path, desk: RequestDesk
) -> None:
    routes = oauth_callback_routes(desk)
    async with protected_server(scopes=["tickets:read"], extra_routes=routes) as srv:
        waiting = await _login_waiting(desk, srv, tmp_path / "state", srv.issuer + CALLBACK_PATH)
        auth, login, pending = waiting.auth, waiting.task, waiting.pending
        location = await _consent(_url_of(pending))
        async with httpx2.AsyncClient(timeout=10) as http:
            landed = await http.get(location)
            again = await http.get(location)  # a reload of the page: the login is answered
        state = await asyncio.wait_for(login, 30)
        async with McpClientManager(_servers(srv.url), auth=auth) as manager:
            call = await manager.call("tickets", "whoami", {})
        code = srv.auth.authorizations and location.split("code=")[1].split("&")[0]

    assert landed.status_code == 200 and "heron received the answer" in landed.text
    assert again.status_code == 400  # ended: no waiting login has this state any more
    assert state.status == "logged_in" and call.success
    ended = desk.get(pending.id)
    assert ended.tool == CONSENT_TOOL and ended.answered_by == REDIRECT_BY
    assert ended.reported  # read by the login itself: never reported to a session
    assert str(ended.answer).startswith("heron-sealed-v1.")
    stored = _database_text(tmp_path)
    assert code and code not in stored  # the authorization code never sits in the store
    for secret in srv.auth.secrets():
        assert secret not in stored


async def test_a_redirect_for_no_waiting_login_is_refused_and_settles_nothing(
    tmp_path: Path, desk: RequestDesk
) -> None:
    routes = oauth_callback_routes(desk)
    async with protected_server(scopes=["tickets:read"], extra_routes=routes) as srv:
        waiting = await _login_waiting(desk, srv, tmp_path / "state", srv.issuer + CALLBACK_PATH)
        login, pending = waiting.task, waiting.pending
        async with httpx2.AsyncClient(timeout=10) as http:
            forged = await http.get(srv.issuer + CALLBACK_PATH + "?code=stolen&state=other")
            stateless = await http.get(srv.issuer + CALLBACK_PATH + "?code=stolen")
        still = desk.get(pending.id)
        login.cancel()
        with pytest.raises(asyncio.CancelledError):
            await login

    assert forged.status_code == 400 and stateless.status_code == 400
    assert still.active  # the forged redirect completed nothing
    assert desk.get(pending.id).status == "cancelled"  # the login stopped waiting


async def test_an_operator_pastes_the_redirected_address_back_through_the_desk(
    tmp_path: Path, desk: RequestDesk
) -> None:
    async with protected_server(scopes=["tickets:read"]) as srv:
        # The redirect URI points nowhere heron listens (a phone, a gateway on loopback).
        waiting = await _login_waiting(desk, srv, tmp_path / "state", "http://127.0.0.1:9/callback")
        login, pending = waiting.task, waiting.pending
        location = await _consent(_url_of(pending))
        desk.answer(pending.id, location, channel="console", name="alice")
        state = await asyncio.wait_for(login, 30)

    assert state.status == "logged_in"
    ended = desk.get(pending.id)
    assert ended.answered_by == "console:alice" and ended.signature
    assert "code=" not in _database_text(tmp_path)


async def test_an_address_of_another_login_is_refused_and_the_request_keeps_waiting(
    tmp_path: Path, desk: RequestDesk
) -> None:
    async with protected_server(scopes=["tickets:read"]) as srv:
        waiting = await _login_waiting(desk, srv, tmp_path / "state", "http://127.0.0.1:9/callback")
        login, pending = waiting.task, waiting.pending
        location = await _consent(_url_of(pending))
        refused = []
        for wrong in (location.replace("state=", "state=x"), "yes", "http://127.0.0.1:9/x"):
            with pytest.raises(InvalidAnswer) as caught:
                desk.answer(pending.id, wrong, channel="console", name="alice")
            refused.append(str(caught.value))
        still = desk.get(pending.id)
        desk.answer(pending.id, location, channel="console", name="alice")
        state = await asyncio.wait_for(login, 30)

    assert all("its `state` is not this request's" in r for r in refused), refused
    assert still.active and state.status == "logged_in"
    # Only the state's digest is stored; the schema binds the answer to it.
    assert pending.risk == "high" and pending.schema is not None
    assert pending.schema["x-heron-bound-query"]["sha256"] == pending.arguments["state_sha256"]


async def test_a_login_started_before_the_desk_is_open_asks_once_it_is(
    tmp_path: Path, desk: RequestDesk
) -> None:
    async with protected_server(scopes=["tickets:read"]) as srv:
        consent = DeskConsent(None, redirect_uri="http://127.0.0.1:9/callback", poll_s=0.01)
        auth = McpAuth(_servers(srv.url), state_dir=tmp_path / "state", token_key="")
        login = asyncio.create_task(auth.login("tickets", channel=consent))
        await until(lambda: len(srv.auth.clients) == 1, "the login to register its client")
        before = pending_consent(desk)
        consent.open_on(desk)
        pending = await _one_pending(desk)
        desk.answer(pending.id, await _consent(_url_of(pending)), channel="console", name="a")
        state = await asyncio.wait_for(login, 30)

    assert before == [] and state.status == "logged_in"


async def test_only_an_approver_may_paste_and_a_no_refuses_the_login(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    store = SqliteRequestStore.open_dir(state_dir)
    desk = RequestDesk(
        store,
        signer=DecisionSigner(DecisionKeyStore(state_dir)),
        channels=[ConsoleChannel()],
        config=ApprovalsConfig(approvers={"console": ["alice"]}),
    )
    try:
        async with protected_server(scopes=["tickets:read"]) as srv:
            redirect = "http://127.0.0.1:9/callback"
            waiting = await _login_waiting(desk, srv, state_dir, redirect)
            auth, login, pending = waiting.auth, waiting.task, waiting.pending
            location = await _consent(_url_of(pending))
            with pytest.raises(NotAnApprover):
                desk.answer(pending.id, location, channel="console", name="mallory")
            desk.answer(pending.id, "no", channel="console", name="alice")
            with pytest.raises(LoginFailed) as failed:
                await asyncio.wait_for(login, 30)
    finally:
        store.close()

    assert failed.value.refused and "refused by console:alice" in failed.value.reason
    assert srv.auth.issued == []
    assert auth.login_state("tickets").status == "logged_out"


async def test_a_consent_refused_at_the_authorization_server_comes_back_through_the_callback(
    tmp_path: Path, desk: RequestDesk
) -> None:
    routes = oauth_callback_routes(desk)
    async with protected_server(scopes=["tickets:read"], extra_routes=routes) as srv:
        srv.auth.refuse = True
        waiting = await _login_waiting(desk, srv, tmp_path / "state", srv.issuer + CALLBACK_PATH)
        login, pending = waiting.task, waiting.pending
        location = await _consent(_url_of(pending))
        async with httpx2.AsyncClient(timeout=10) as http:
            landed = await http.get(location)
        with pytest.raises(LoginFailed) as failed:
            await asyncio.wait_for(login, 30)

    assert landed.status_code == 200
    assert failed.value.refused and "access_denied" in failed.value.reason
    assert srv.auth.issued == []


async def test_a_running_manager_asks_once_on_the_desk_and_goes_on(
    tmp_path: Path, desk: RequestDesk
) -> None:
    routes = oauth_callback_routes(desk)
    async with protected_server(scopes=["tickets:read"], extra_routes=routes) as srv:
        consent = DeskConsent(desk, redirect_uri=srv.issuer + CALLBACK_PATH, poll_s=0.01)
        auth = McpAuth(
            _servers(srv.url), state_dir=tmp_path / "state", consent=consent, token_key=""
        )
        async with McpClientManager(_servers(srv.url), auth=auth) as manager:
            first = await asyncio.wait_for(manager.call("tickets", "whoami", {}), 10)
            second = await asyncio.wait_for(manager.call("tickets", "whoami", {}), 10)
            pending = await _one_pending(desk)
            waiting: Any = manager.status()[0].state
            location = await _consent(_url_of(pending))
            async with httpx2.AsyncClient(timeout=10) as http:
                await http.get(location)
            assert await manager.wait_for_login("tickets", 30)
            after = await manager.call("tickets", "whoami", {})

    assert not first.success and not second.success and waiting == "auth_required"
    assert len(pending_consent(desk)) == 0
    assert len(desk.store.list(limit=10)) == 1  # asked once
    assert after.success


async def test_heron_serve_asks_on_the_desk_and_sends_the_browser_to_the_gateway(
    tmp_path: Path,
) -> None:
    from heron.cli.common import serve_consent
    from heron.config import HeronConfig

    fields: dict[str, Any] = {
        "state": {"dir": str(tmp_path / "state")},
        "gateway": {"public_url": "https://heron.example.com/"},
        "mcp": {"servers": {"tickets": {"url": "https://t.example.com/mcp", "auth": "oauth"}}},
    }
    consent = serve_consent(HeronConfig.model_validate(fields))
    not_durable = serve_consent(
        HeronConfig.model_validate({**fields, "approvals": {"durable": False}})
    )
    no_oauth = serve_consent(HeronConfig.model_validate({**fields, "mcp": {}}))

    assert consent is not None
    assert consent.redirect_uri("tickets") == "https://heron.example.com/mcp/oauth/callback"
    assert not_durable is None and no_oauth is None
