"""`heron mcp login`, `status`, `doctor` and `logout` against a real OAuth-protected server.

The authorization server and the protected MCP server run on loopback in this test's event
loop (`support.oauth_servers`); each `heron` command is a real subprocess on its own state
directory. The operator's browser is an HTTP client that opens the authorization URL the
command printed and follows (or copies) the redirect.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import httpx2
import pytest

from support.cli import HERON, TIMEOUT_S, Finished, Heron
from support.oauth_servers import Protected, protected_server


def _config(heron: Heron, srv: Protected, *extra: str) -> None:
    lines = ["[mcp.servers.tickets]", f'url = "{srv.url}"', 'auth = "oauth"', *extra]
    heron.write("heron.toml", "\n".join(lines) + "\n")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Login:
    """A `heron mcp login …` process with a terminal the test types into."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.stderr: list[str] = []

    started: ClassVar[list[Login]] = []

    @classmethod
    async def start(cls, heron: Heron, *args: str) -> Login:
        proc = await asyncio.create_subprocess_exec(
            *HERON,
            "mcp",
            "login",
            *args,
            cwd=heron.root,
            env=heron.env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        login = cls(proc)
        cls.started.append(login)
        return login

    async def line_starting(self, prefix: str) -> str:
        assert self.proc.stderr is not None
        async with asyncio.timeout(TIMEOUT_S):
            while True:
                raw = await self.proc.stderr.readline()
                assert raw, "".join(self.stderr)
                line = raw.decode()
                self.stderr.append(line)
                if line.strip().startswith(prefix):
                    return line.strip()

    async def type(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode() + b"\n")
        await self.proc.stdin.drain()

    async def finish(self) -> Finished:
        async with asyncio.timeout(TIMEOUT_S):
            out, err = await self.proc.communicate()
        return Finished(
            code=self.proc.returncode or 0,
            stdout=out.decode(),
            stderr="".join(self.stderr) + err.decode(),
        )


@pytest.fixture(autouse=True)
async def _no_login_left_running() -> AsyncIterator[None]:
    yield
    while Login.started:
        proc = Login.started.pop().proc
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


async def _redirect_of(url: str) -> str:
    """The browser: open the authorization URL (the server consents at once), return the
    address it redirects to."""
    async with httpx2.AsyncClient(follow_redirects=False, timeout=10) as http:
        answer = await http.get(url)
    assert answer.status_code in (302, 303, 307), answer.text
    return answer.headers["location"]


async def _run(heron: Heron, *args: str) -> Finished:
    # In a thread: the servers answering the command run on this event loop.
    return await asyncio.to_thread(heron.run, *args)


async def test_login_by_paste_then_status_doctor_and_logout_which_revokes(heron: Heron) -> None:
    async with protected_server(scopes=["tickets:read"]) as srv:
        _config(heron, srv)
        login = await Login.start(heron, "tickets", "--paste")
        url = await login.line_starting("http")
        await login.type(await _redirect_of(url))
        logged_in = await login.finish()
        status = await _run(heron, "mcp", "status")
        doctor = await _run(heron, "doctor")
        logout = await _run(heron, "mcp", "logout", "tickets")
        after = await _run(heron, "mcp", "status")
        issued = srv.auth.issued[-1]
        secrets = srv.auth.secrets()

    assert logged_in.code == 0, logged_in.stderr
    assert "logged in to tickets: logged in (tickets:read)" in logged_in.stdout
    assert status.code == 0, status.stdout + status.stderr
    assert "tickets  running  http" in status.stdout
    assert "  login: logged in (tickets:read), access token expires in" in status.stdout
    assert "[ok  ] mcp login tickets: logged in (tickets:read)" in doctor.stdout
    assert logout.code == 0, logout.stderr
    assert logout.stdout.strip() == (
        "logged out of tickets: refresh token, access token; tokens deleted"
    )
    assert set(srv.auth.revoked) == {issued.access_token, issued.refresh_token}
    assert "tickets  auth_required  http" in after.stdout and after.code == 1
    assert "login: not logged in" in after.stdout
    seen = [logged_in, status, doctor, logout, after]
    # Secrets live in the token files (`mcp-oauth/`) only: not in the database, the audit,
    # the logs; the status after the logout registered a new client there.
    stored = b"".join(
        p.read_bytes()
        for p in heron.state_dir.rglob("*")
        if p.is_file() and p.parent.name != "mcp-oauth"
    )
    assert stored
    for secret in secrets:
        assert all(secret not in p.stdout + p.stderr for p in seen), secret
        assert secret.encode() not in stored, secret


async def test_login_receives_the_browser_redirect_on_loopback(heron: Heron) -> None:
    redirect = f"http://127.0.0.1:{_free_port()}/callback"
    async with protected_server(scopes=["tickets:read"]) as srv:
        _config(heron, srv, "[mcp.servers.tickets.oauth]", f'redirect_uri = "{redirect}"')
        login = await Login.start(heron, "tickets")
        url = await login.line_starting("http")
        location = await _redirect_of(url)
        async with httpx2.AsyncClient(timeout=10) as http:
            landed = await http.get(location)
        logged_in = await login.finish()

    assert location.startswith(redirect + "?")
    assert landed.status_code == 200 and "heron received the answer" in landed.text
    assert logged_in.code == 0, logged_in.stderr
    assert "logged in to tickets" in logged_in.stdout


async def test_login_paste_answers_the_consent_another_process_waits_for(
    heron: Heron, tmp_path: Path
) -> None:
    async with protected_server(scopes=["tickets:read"]) as srv:
        # The gateway at the public address is not running: the browser cannot come back.
        _config(heron, srv)
        heron.write(
            "heron.toml",
            (tmp_path / "heron.toml").read_text()
            + '\n[gateway]\npublic_url = "https://heron.invalid"\n',
        )
        waiting = await Login.start(heron, "tickets")
        url = await waiting.line_starting("http")
        assert (await waiting.line_starting("heron waits for the redirect")).endswith(")."), url
        paster = await Login.start(heron, "tickets", "--paste")
        shown = await paster.line_starting("[heron] ask-")
        location = await _redirect_of(url)
        assert location.startswith("https://heron.invalid/mcp/oauth/callback?")
        await paster.type(location)
        pasted = await paster.finish()
        logged_in = await waiting.finish()

    assert "needs your consent" in shown
    assert pasted.code == 0, pasted.stderr
    assert "the process that asked completes the login" in pasted.stdout
    assert logged_in.code == 0, logged_in.stderr
    assert "logged in to tickets" in logged_in.stdout


async def test_serve_asks_once_on_the_desk_and_a_pasted_address_completes_its_login(
    heron: Heron,
) -> None:
    from heron.humans.sqlite_store import SqliteRequestStore
    from heron.mcp.auth import token_path
    from heron.mcp.auth.desk_consent import CONSENT_TOOL
    from support.waiting import poll_until

    async with protected_server(scopes=["tickets:read"]) as srv:
        _config(heron, srv)
        heron.write("script.yaml", "turns: []\n")
        serve = heron.start("serve", "--model", "scripted:script.yaml", "--session", "main")
        # The agent is up while the server waits for consent: serve's own line on stderr.
        await asyncio.to_thread(serve.wait_for_stderr, "needs your consent")
        store = SqliteRequestStore.open_dir(heron.state_dir)
        try:
            asked = [r for r in store.list(limit=10) if r.tool == CONSENT_TOOL]
        finally:
            store.close()
        url = next(x.strip() for x in asked[0].question.splitlines() if "/authorize?" in x)
        paster = await Login.start(heron, "tickets", "--paste")
        await paster.line_starting("[heron] ask-")
        await paster.type(await _redirect_of(url))
        pasted = await paster.finish()
        tokens = token_path(heron.state_dir, "tickets")
        await poll_until(lambda: b"access_token" in _read(tokens), "serve's login to finish")
        status = await _run(heron, "mcp", "status")
        serve.interrupt()
        stopped = await asyncio.to_thread(serve.finish)
        secrets = srv.auth.secrets()

    assert len(asked) == 1 and asked[0].active
    assert pasted.code == 0, pasted.stderr
    assert "login: logged in (tickets:read)" in status.stdout, status.stdout
    assert len(srv.auth.authorizations) == 1  # asked once
    assert stopped.stderr.count("needs your consent") == 1, stopped.stderr
    # The bus, the sessions, the audit and the requests share heron.db: no token, no code.
    database = b"".join(p.read_bytes() for p in heron.state_dir.glob("heron.db*"))
    assert b"mcp_oauth_login" in database and b"code=" not in database
    for secret in secrets:
        assert secret.encode() not in database and secret not in stopped.stderr, secret


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


async def test_serve_receives_the_browser_redirect_on_its_own_http_front(heron: Heron) -> None:
    from heron.humans.sqlite_store import SqliteRequestStore
    from heron.mcp.auth import token_path
    from heron.mcp.auth.desk_consent import CONSENT_TOOL
    from support.waiting import poll_until

    port = _free_port()
    async with protected_server(scopes=["tickets:read"]) as srv:
        _config(heron, srv)
        heron.write(
            "heron.toml",
            (heron.root / "heron.toml").read_text()
            + f'\n[gateway]\npublic_url = "http://127.0.0.1:{port}"\n',
        )
        heron.env["HERON_WEBHOOK_SECRET"] = "oauth-callback-secret"
        heron.write("script.yaml", "turns: []\n")
        serve = heron.start("serve", "--model", "scripted:script.yaml", "--webhook-port", str(port))
        await asyncio.to_thread(serve.wait_for_stderr, "needs your consent")
        store = SqliteRequestStore.open_dir(heron.state_dir)
        try:
            [asked] = [r for r in store.list(limit=10) if r.tool == CONSENT_TOOL]
        finally:
            store.close()
        url = next(x.strip() for x in asked.question.splitlines() if "/authorize?" in x)
        redirect = await _redirect_of(url)
        assert redirect.startswith(f"http://127.0.0.1:{port}/mcp/oauth/callback?")
        async with httpx2.AsyncClient(timeout=10) as browser:
            forged = await browser.get(redirect.replace("state=", "state=x"))
            landed = await browser.get(redirect)
        tokens = token_path(heron.state_dir, "tickets")
        await poll_until(lambda: b"access_token" in _read(tokens), "serve's login to finish")
        serve.interrupt()
        stopped = await asyncio.to_thread(serve.finish)

    assert forged.status_code == 400
    assert landed.status_code == 200, landed.text
    assert stopped.code == 0, stopped.stderr
