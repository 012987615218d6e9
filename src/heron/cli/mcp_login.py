"""`heron mcp login NAME` and `heron mcp logout NAME`: OAuth logins to MCP servers.

`login` runs the whole authorization in this process (the official SDK's OAuth client:
discovery, registration, PKCE, the token exchange); the consent step is a request on the
durable desk (`heron.mcp.auth.desk_consent`), so the authorization URL is printed here and is
also in front of the approvers on their other channels (`heron approvals`, the web console).
The browser's redirect comes back to the callback route — the gateway's at `[gateway]
public_url`, or one served here on loopback for the length of the login — or the operator
pastes it (`--paste`: read from this terminal).

`login --paste` when another process (an always-on `heron serve`) already waits for a consent
to NAME answers that request with the pasted address instead, and that process completes the
login. `logout` revokes the tokens at the authorization server and deletes them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import sys
import threading
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from heron.cli import common
from heron.cli.common import UsageError, err, out

if TYPE_CHECKING:
    from heron.config import HeronConfig
    from heron.humans.desk import RequestDesk
    from heron.humans.store import HumanRequest
    from heron.mcp.auth import ConsentRequest, LoginState, McpAuth

EXIT_OK, EXIT_ATTENTION = 0, 1


def add_arguments(login: argparse.ArgumentParser, logout: argparse.ArgumentParser) -> None:
    login.add_argument("server", metavar="SERVER")
    login.add_argument(
        "--paste",
        action="store_true",
        help="paste the address the browser lands on here (when it cannot reach heron)",
    )
    login.add_argument(
        "--as", dest="as_name", metavar="NAME", help="who you are (default: login name)"
    )
    logout.add_argument("server", metavar="SERVER")


def _auth(config: HeronConfig, server: str) -> McpAuth:
    from heron.mcp.auth import McpAuth

    auth = McpAuth(config.mcp, state_dir=config.state.path(), store_url=config.store.url)
    if server not in auth.servers():
        oauth = ", ".join(auth.servers()) or "none"
        raise UsageError(f'no MCP server {server!r} with auth = "oauth" (configured: {oauth})')
    return auth


def _read_line(loop: asyncio.AbstractEventLoop, into: asyncio.Future[str]) -> None:
    """Read one line on a daemon thread (an unanswered prompt must not hold the exit)."""

    def deliver(line: str) -> None:
        if not into.done():
            into.set_result(line)

    def read() -> None:
        loop.call_soon_threadsafe(deliver, sys.stdin.readline())

    threading.Thread(target=read, name="heron-paste", daemon=True).start()


def _answer(desk: RequestDesk, request: HumanRequest, address: str, name: str) -> bool:
    from heron.humans.refusals import RequestError

    try:
        desk.answer(request.id, address.strip(), channel="console", name=name)
    except RequestError as exc:
        err(f"mcp: {exc}")
        return False
    return True


async def login(args: argparse.Namespace, config: HeronConfig) -> int:
    """`heron mcp login SERVER [--paste]`."""
    from heron.mcp.auth import LoginFailed

    auth = _auth(config, args.server)
    name = args.as_name or getpass.getuser()
    async with contextlib.AsyncExitStack() as stack:
        desk = common.open_desk(config, stack)
        if args.paste:
            answered = await _answer_waiting(desk, args.server, name)
            if answered is not None:
                return answered
        try:
            state = await _login_here(auth, desk, config, args.server, args.paste, name)
        except LoginFailed as exc:
            err(f"mcp: {exc}")
            return EXIT_ATTENTION
    out(f"logged in to {args.server}: {state.detail}")
    return EXIT_OK


async def _answer_waiting(desk: RequestDesk, server: str, name: str) -> int | None:
    """Answer another process's waiting consent to `server` with a pasted address; None when
    nothing waits."""
    from heron.mcp.auth.desk_consent import pending_consent

    waiting = pending_consent(desk, server=server)
    if not waiting:
        return None
    for request in waiting:
        sys.stderr.write(f"[heron] {request.id} waits: {request.question}\n")
    sys.stderr.write("Paste the address your browser landed on:\n> ")
    sys.stderr.flush()
    loop = asyncio.get_running_loop()
    line: asyncio.Future[str] = loop.create_future()
    _read_line(loop, line)
    address = await line
    states = parse_qs(urlsplit(address.strip()).query).get("state") or [""]
    found = pending_consent(desk, state=states[0], server=server)
    if not found:
        err(f"mcp: that address belongs to no login to {server!r} waiting for consent")
        return EXIT_ATTENTION
    if not _answer(desk, found[0], address, name):
        return EXIT_ATTENTION
    out(f"answered {found[0].id}; the process that asked completes the login")
    return EXIT_OK


@contextlib.asynccontextmanager
async def _loopback_callback(desk: RequestDesk, redirect_uri: str) -> AsyncIterator[bool]:
    """Serve the callback route at `redirect_uri` while the login runs, when that is a
    loopback address; yields whether it listens."""
    import socket

    parts = urlsplit(redirect_uri)
    if parts.scheme != "http" or parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        yield False
        return
    import uvicorn
    from starlette.applications import Starlette

    from heron._support.http_limits import DEFAULT_MAX_BODY, guarded_uvicorn
    from heron.mcp.auth.callback import oauth_callback_routes

    host = "::1" if parts.hostname == "::1" else "127.0.0.1"
    sock = socket.socket(socket.AF_INET6 if host == "::1" else socket.AF_INET)
    try:
        sock.bind((host, parts.port or 80))
    except OSError as exc:
        sock.close()
        err(f"mcp: cannot listen for the redirect on {redirect_uri} ({exc.strerror})")
        yield False
        return
    sock.listen()
    app = Starlette(routes=oauth_callback_routes(desk, path=parts.path or "/"))
    config = guarded_uvicorn(app, max_body=DEFAULT_MAX_BODY, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield True
    finally:
        server.should_exit = True
        await task
        sock.close()


async def _login_here(
    auth: McpAuth, desk: RequestDesk, config: HeronConfig, server: str, paste: bool, name: str
) -> LoginState:
    from heron.mcp.auth import LoginFailed
    from heron.mcp.auth.desk_consent import DeskConsent

    redirect_uri = common.mcp_redirect_uri(config, server)
    pasted: list[asyncio.Task[None]] = []
    async with _loopback_callback(desk, redirect_uri) as listening:
        if not listening and not paste and config.gateway.public_url is None:
            raise LoginFailed(server, "nowhere to receive the redirect; use --paste")

        async def announce(request: ConsentRequest, opened: HumanRequest) -> None:
            sys.stderr.write(
                f"\nheron: MCP server {server!r} needs your consent "
                f"({request.scope or 'default scopes'}). Open this address:\n\n"
                f"  {request.url}\n\n"
            )
            if paste:
                sys.stderr.write(
                    f"Then paste the address your browser lands on (it starts with "
                    f"{request.redirect_uri}):\n> "
                )
                pasted.append(asyncio.create_task(_paste_into(desk, opened, name)))
            else:
                sys.stderr.write(f"heron waits for the redirect ({opened.id}).\n")
            sys.stderr.flush()

        try:
            channel = DeskConsent(desk, redirect_uri=redirect_uri, announce=announce)
            return await auth.login(server, channel=channel)
        finally:
            for task in pasted:
                task.cancel()


async def _paste_into(desk: RequestDesk, request: HumanRequest, name: str) -> None:
    loop = asyncio.get_running_loop()
    line: asyncio.Future[str] = loop.create_future()
    _read_line(loop, line)
    address = await line
    if not address.strip():
        desk.cancel(request.id, "nothing was pasted")
    elif not _answer(desk, request, address, name):
        desk.cancel(request.id, "the pasted answer was refused")


async def logout(args: argparse.Namespace, config: HeronConfig) -> int:
    """`heron mcp logout SERVER`: revoke, then delete the stored tokens."""
    auth = _auth(config, args.server)
    result = await auth.logout(args.server)
    revoked = ", ".join(k.replace("_", " ") for k in result.revoked) or "nothing revoked"
    deleted = "tokens deleted" if result.deleted else "no tokens were stored"
    out(f"logged out of {args.server}: {revoked}; {deleted}")
    for problem in result.problems:
        err(f"mcp: {problem}")
    return EXIT_ATTENTION if result.problems else EXIT_OK
