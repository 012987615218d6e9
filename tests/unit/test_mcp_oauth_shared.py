"""MCP OAuth tokens in a shared PostgreSQL store: every worker uses one encrypted record, two
workers refreshing at once rotate the refresh token once, and a login's sealed consent asked on
one worker is answered through another's callback route — against a real authorization server
on loopback (`support.oauth_servers`, built from the SDK's parts), which counts the refresh
requests it receives."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import psycopg
import pytest

from heron._support.postgres import close_process_pools, open_pool
from heron.humans.console import ConsoleChannel
from heron.humans.desk import RequestDesk
from heron.humans.postgres_store import PostgresRequestStore
from heron.humans.signing import DecisionSigner
from heron.humans.store import HumanRequest
from heron.mcp.auth import FollowRedirectConsent, McpAuth
from heron.mcp.auth.callback import CALLBACK_PATH, REDIRECT_BY, oauth_callback_routes
from heron.mcp.auth.desk_consent import DeskConsent, pending_consent
from heron.mcp.auth.postgres_storage import PostgresTokenRecords
from heron.mcp.client import McpClientManager
from heron.mcp.config import McpServerConfig
from heron.turn.postgres_keys import PostgresKeyStore
from support.oauth_servers import protected_server
from support.postgres import postgres_server, postgres_url
from support.waiting import until

__all__ = ["postgres_server", "postgres_url"]  # fixtures, found by pytest here

KEY = secrets.token_urlsafe(32)


@pytest.fixture(autouse=True)
def _pools() -> Iterator[None]:
    yield
    close_process_pools()  # each test has its own database


def token_files(root: Path) -> list[Path]:
    return list(root.rglob("mcp-oauth/*"))


def servers(url: str) -> dict[str, McpServerConfig]:
    return {"tickets": McpServerConfig.model_validate({"url": url, "auth": "oauth"})}


def worker(
    name: str, tmp_path: Path, url: str, store: str, now: list[float], key: str = KEY
) -> McpAuth:
    """One worker's OAuth: its own state directory, the shared store."""
    return McpAuth(
        servers(url),
        state_dir=tmp_path / name,
        clock=lambda: now[0],
        token_key=key,
        store_url=store,
    )


async def test_two_workers_refreshing_at_once_rotate_the_refresh_token_once(
    tmp_path: Path, postgres_url: str
) -> None:
    now = [time.time()]
    async with protected_server(scopes=["tickets:read"]) as srv:
        first = worker("w1", tmp_path, srv.url, postgres_url, now)
        second = worker("w2", tmp_path, srv.url, postgres_url, now)
        consent = FollowRedirectConsent(redirect_uri="http://127.0.0.1:9/callback")
        await first.login("tickets", channel=consent)
        assert second.login_state("tickets").status == "logged_in"  # the same record
        now[0] += 3600 - 30  # within the refresh margin of the hour-long token
        async with (
            McpClientManager(servers(srv.url), auth=first) as one,
            McpClientManager(servers(srv.url), auth=second) as two,
        ):
            results = await asyncio.wait_for(
                asyncio.gather(
                    one.call("tickets", "whoami", {}), two.call("tickets", "whoami", {})
                ),
                30,
            )
        newest = srv.auth.issued[-1]
        held = [await auth.storage("tickets").get_tokens() for auth in (first, second)]

    assert all(r.success for r in results), [r.error for r in results]
    assert srv.auth.refreshes == 1 and len(srv.auth.issued) == 2
    assert [t.access_token if t else None for t in held] == [newest.access_token] * 2
    assert token_files(tmp_path) == []  # no worker kept a token file of its own
    with psycopg.connect(postgres_url) as conn:
        [(envelope,)] = conn.execute("SELECT envelope FROM mcp_oauth_records").fetchall()
    for secret in srv.auth.secrets():
        assert secret not in envelope  # sealed with the token key


async def test_a_shared_store_without_a_token_key_never_stores_tokens(
    tmp_path: Path, postgres_url: str
) -> None:
    auth = worker("w1", tmp_path, "http://127.0.0.1:9/mcp", postgres_url, [0.0], key="")
    state = auth.login_state("tickets")
    assert state.status == "locked" and "only encrypted: set HERON_TOKEN_KEY" in state.detail


def test_a_claimed_refresh_holds_off_others_and_a_stale_write_is_refused(
    postgres_url: str,
) -> None:
    pool = open_pool(postgres_url, max_size=2)
    try:
        a, b = PostgresTokenRecords(pool, "tickets"), PostgresTokenRecords(pool, "tickets")
        assert a.claim_refresh("a", now=0.0, until=30.0) is None  # nothing stored yet
        assert a.save({"record": 1}, expect=None)
        version = a.claim_refresh("a", now=1.0, until=31.0)
        assert version == 1
        assert b.claim_refresh("b", now=2.0, until=32.0) is None  # a holds it
        assert a.save({"record": 2}, expect=version)  # a's rotation, released
        assert not b.save({"record": "stale"}, expect=version)  # never over a newer record
        assert b.load() == ({"record": 2}, 2)
        assert b.claim_refresh("b", now=3.0, until=33.0) == 2
        assert a.claim_refresh("a", now=40.0, until=70.0) == 2  # b's claim lapsed
    finally:
        pool.close()


async def test_a_sealed_consent_asked_on_one_worker_is_answered_through_another(
    tmp_path: Path, postgres_url: str
) -> None:
    """The login waits on worker A (the sealing key is in its memory only); the browser's
    redirect lands on worker B's callback route, which seals the address into the shared
    request store; A opens it, logs in, and B uses the tokens."""
    pools = [open_pool(postgres_url, max_size=2) for _ in range(2)]
    desk_a, desk_b = (
        RequestDesk(
            PostgresRequestStore(pool),
            signer=DecisionSigner(PostgresKeyStore(pool, "decision")),
            channels=[ConsoleChannel()],
        )
        for pool in pools
    )
    now = [time.time()]
    try:
        async with protected_server(
            scopes=["tickets:read"], extra_routes=oauth_callback_routes(desk_b)
        ) as srv:
            first = worker("w1", tmp_path, srv.url, postgres_url, now)
            consent = DeskConsent(desk_a, redirect_uri=srv.issuer + CALLBACK_PATH, poll_s=0.01)
            login = asyncio.create_task(first.login("tickets", channel=consent))
            found: list[HumanRequest] = []

            def asked() -> bool:
                found[:] = pending_consent(desk_b, server="tickets")  # B sees A's question
                return bool(found)

            await until(asked, "the consent request in the shared store")
            url = next(x.strip() for x in found[0].question.splitlines() if "http" in x)
            async with httpx2.AsyncClient(follow_redirects=True, timeout=10) as browser:
                landed = await browser.get(url)  # consent, then the redirect to B's route
            state = await asyncio.wait_for(login, 30)
            second = worker("w2", tmp_path, srv.url, postgres_url, now)
            async with McpClientManager(servers(srv.url), auth=second) as manager:
                call = await manager.call("tickets", "whoami", {})
        ended = desk_a.store.get(found[0].id)
    finally:
        for pool in pools:
            pool.close()

    assert landed.status_code == 200 and state.status == "logged_in" and call.success
    assert ended is not None and ended.answered_by == REDIRECT_BY
    assert str(ended.answer).startswith("heron-sealed-v1.")  # only A's key opens it
