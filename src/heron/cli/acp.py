"""`heron acp`: heron as an Agent Client Protocol agent on standard input and output, for
editors (Zed and others; docs/acp.md).

The editor starts `heron acp …` and speaks JSON-RPC on its pipes; heron's own messages go to
standard error (the editor's log). Each editor session is a stored heron session whose
workspace is the editor's working directory; approvals are durable requests, answered in the
editor or with `heron approvals` from any terminal, whichever comes first. Here the command
chooses the stores (SQLite in the state directory) and the approvers: `[approvals.approvers]`
when configured (the editor's user must be listed as `acp = ["NAME"]` to answer in the
editor), else the local operator — on the console and, as `acp:NAME`, in the editor.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from heron.cli import common
from heron.cli.common import EXIT_OK, UsageError

if TYPE_CHECKING:
    from heron.acp.agent import AgentOpener
    from heron.agent import Agent
    from heron.config import HeronConfig
    from heron.humans.approvers import Approvers
    from heron.mcp.config import McpServerConfig
    from heron.tools.definition import Tool
    from heron.turn.approval import Approver


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `acp` to the `heron` parser."""
    parser = sub.add_parser(
        "acp",
        help="serve the Agent Client Protocol on stdio, for editors (Zed, …)",
        description="Run heron as an ACP agent: an editor starts this command and drives it "
        "over standard input and output (docs/acp.md). Each editor session is a stored heron "
        "session; its workspace is the editor's working directory. Approvals are asked in the "
        "editor and can be answered from any terminal with `heron approvals`.",
    )
    parser.add_argument(
        "--as",
        dest="as_name",
        metavar="NAME",
        help="the editor user's approver name, acp:NAME (default: your login name)",
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=0.25,
        metavar="S",
        help="how often a waiting approval checks for an answer from another terminal "
        "(default 0.25 s)",
    )
    common.add_agent_flags(parser)
    parser.set_defaults(handler=cmd_acp)


def cmd_acp(args: argparse.Namespace) -> int:
    try:
        import acp  # noqa: F401  (the optional SDK: fail here with the way to get it)
    except ImportError:
        raise UsageError(
            "heron acp needs the Agent Client Protocol SDK: pip install 'heron[acp]'"
        ) from None
    from heron.acp.agent import HeronAcpAgent, serve_stdio
    from heron.humans.desk import RequestDesk
    from heron.humans.signing import DecisionKeyStore, DecisionSigner
    from heron.humans.sqlite_store import SqliteRequestStore

    name = _principal(args.as_name)
    if not args.poll_interval > 0:
        raise UsageError("--poll-interval must be a positive number of seconds")
    config = common.require_model(common.load_config(args))
    tools = common.user_tools(config)
    state_dir = config.state.path()
    approvers = _approvers(config, name)
    configured = config.tools.builtin.workspace
    root = Path(configured).expanduser().resolve() if configured else None

    async def serve() -> int:
        from heron.acp.approver import EditorChannel
        from heron.humans.console import ConsoleChannel

        asyncio.get_running_loop().set_default_executor(common.DaemonThreadExecutor())
        store = SqliteRequestStore.open_dir(state_dir)
        try:
            desk = RequestDesk(
                store,
                signer=DecisionSigner(DecisionKeyStore(state_dir)),
                approvers=approvers,
                channels=[ConsoleChannel(sys.stderr), EditorChannel()],
                config=config.approvals,
                approval_timeout_s=config.approval.timeout_s,
            )
            agent = HeronAcpAgent(
                open_agent=_opener(config, tools),
                state_dir=state_dir,
                desk=desk,
                name=name,
                workspace_root=root,
                configured_servers=config.mcp.servers,
                poll_interval_s=args.poll_interval,
                version=_version(),
            )
            await serve_stdio(agent, limits=config.limits.to_limits())
        finally:
            store.close()
        return EXIT_OK

    return asyncio.run(serve())


def _principal(given: str | None) -> str:
    if given is not None:
        if not given.strip() or given != given.strip() or ":" in given:
            raise UsageError(f"--as must be a plain name, not {given!r}")
        return given
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "editor"


def _approvers(config: HeronConfig, name: str) -> Approvers:
    """`[approvals.approvers]` when configured; else the local operator, on the console and
    as the editor's user."""
    from heron.humans.approvers import LOCAL_OPERATOR, Approvers

    if not config.approvals.approvers:
        return Approvers((LOCAL_OPERATOR, f"acp:{name}"))
    try:
        return Approvers.from_config(config.approvals.approvers)
    except ValueError as exc:
        raise UsageError(f"configuration error: [approvals.approvers]: {exc}") from exc


def _opener(config: HeronConfig, tools: list[Tool]) -> AgentOpener:
    """Each session's agent: the configured one, its workspace the editor's directory, with
    the editor's MCP servers beside those of the configuration."""

    @asynccontextmanager
    async def open_agent(
        workspace: Path, approver: Approver, servers: Mapping[str, McpServerConfig]
    ) -> AsyncIterator[Agent]:
        builtin = config.tools.builtin.model_copy(update={"workspace": str(workspace)})
        tools_config = config.tools.model_copy(update={"builtin": builtin})
        mcp = config.mcp.model_copy(update={"servers": {**servers, **config.mcp.servers}})
        session_config = config.model_copy(update={"tools": tools_config, "mcp": mcp})
        async with common.open_agent(session_config, approver=approver, tools=tools) as agent:
            yield agent

    return open_agent


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("heron")
    except PackageNotFoundError:
        return "0"
