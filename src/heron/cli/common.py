"""What every `heron` command shares: the usage error and exit codes, the agent flags (defined
once, for every command that builds an agent), configuration and state directory from the
flags, the library's errors as usage errors, the output helpers, and the session helpers of
`heron run` and `heron chat`.

Only the standard library is imported at load time: `heron --help` builds every parser and
must stay fast. Command modules import this module and `heron.cli.render`, never each other.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TextIO, TypeVar

from heron._support.terminal import terminal_safe
from heron.errors import HeronError

if TYPE_CHECKING:
    from heron._support.postgres import Pool
    from heron.agent import Agent
    from heron.always_on.bus.store import BusStore
    from heron.always_on.subagents.service import Subagents
    from heron.config import HeronConfig
    from heron.humans.desk import RequestDesk
    from heron.mcp.auth.desk_consent import DeskConsent
    from heron.models.base import Model
    from heron.sessions.session import CliSession
    from heron.sessions.store import SessionStore
    from heron.tools.definition import Tool
    from heron.turn.approval import Approver

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_CANCELLED = 0, 1, 2, 130
EXIT_BROKEN_PIPE = 141
"""What a shell reports for a process killed by SIGPIPE (128 + 13): the reader went away."""

_P = ParamSpec("_P")
_T = TypeVar("_T")


class UsageError(HeronError):
    """A mistake in how heron was invoked or configured (exit status 2)."""


# -- flags --------------------------------------------------------------------------------

BUILTIN_SETS = ("perception", "execution", "connectors", "events", "planning", "collaboration")


def add_agent_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of every command that builds an agent (`run`, `chat`, `serve`, `sessions
    resume`, `tools list|show`): one group, one order, documented once in
    docs/configuration.md#flags. Each overrides its `heron.toml` key."""
    g = parser.add_argument_group(
        "agent", "how the agent is built; each flag overrides heron.toml (docs/configuration.md)"
    )
    g.add_argument(
        "--model",
        metavar="PROVIDER:MODEL",
        help="openai:M, anthropic:M, ollama:M, openai-compatible:M or scripted:FILE (default: "
        "[agent] model, else one heron can reach: OPENAI_API_KEY, ANTHROPIC_API_KEY, a local "
        "Ollama)",
    )
    g.add_argument(
        "--base-url", metavar="URL", help="endpoint for ollama: and openai-compatible: models"
    )
    g.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="FILE.py",
        help="load every @heron.tool in FILE.py (repeatable; adds to [tools] modules)",
    )
    g.add_argument(
        "--builtin",
        action="append",
        default=[],
        choices=BUILTIN_SETS,
        metavar="SET",
        help="give the agent heron's SET tools: perception, execution, connectors, events, "
        "planning "
        "(repeatable; replaces [tools.builtin] sets)",
    )
    g.add_argument(
        "--workspace",
        type=Path,
        metavar="DIR",
        help="root of the built-in tools and of serve's background jobs (default: the current "
        "directory; serve's jobs: STATE_DIR/workspace)",
    )
    g.add_argument(
        "--sandbox",
        choices=["process", "bwrap"],
        help="where shell, run_python and background jobs run (default: process)",
    )
    g.add_argument("--autonomy", choices=["read-only", "supervised", "full"])
    g.add_argument("--parallel", choices=["off", "read-only", "all"])
    g.add_argument("--no-parallel", action="store_true", help="same as --parallel off")
    g.add_argument(
        "--receipts",
        action="store_true",
        default=None,
        help="sign successful tool results with HMAC receipts",
    )
    g.add_argument("--max-iterations", type=int, metavar="N", help="model calls per turn")
    g.add_argument(
        "--max-tool-result-chars",
        type=int,
        metavar="N",
        help="longest tool result the model sees (0: no limit)",
    )
    g.add_argument(
        "--exclude-tool",
        action="append",
        default=[],
        metavar="NAME",
        help="remove a tool from the agent (repeatable; adds to [agent] excluded_tools)",
    )
    add_config_flags(g)


def add_config_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """`--config` and `--state-dir`, for every command that reads either."""
    parser.add_argument(
        "--config", type=Path, metavar="FILE", help="configuration file (default ./heron.toml)"
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        metavar="DIR",
        help="state directory (default: [state] dir, else $HERON_STATE_DIR, else "
        "~/.local/state/heron)",
    )


def add_store_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """`--store`, for every command that reads or writes state."""
    parser.add_argument(
        "--store",
        metavar="URL",
        help="a shared PostgreSQL store (postgresql://…; default: [store] url, else the "
        "state directory's SQLite database)",
    )


def store_url(args: argparse.Namespace) -> str | None:
    """`--store`, else `[store] url` of the configuration; `None`: SQLite in `state_dir`."""
    import importlib.util

    url = vars(args).get("store") or load_config(args).store.url
    if url is None:
        return None
    if not url.startswith(("postgresql://", "postgres://")):
        raise UsageError("--store must be a postgresql:// URL")
    if importlib.util.find_spec("psycopg") is None:
        raise UsageError("a PostgreSQL store needs its driver: pip install 'heron[postgresql]'")
    return str(url)


def shared_pool(args: argparse.Namespace) -> Pool | None:
    """A connection pool to the shared store `--store` names (the caller closes it); `None`:
    the state directory's SQLite database."""
    url = store_url(args)
    if url is None:
        return None
    from heron._support.postgres import open_pool

    return open_pool(url, max_size=2)


def open_session_store(args: argparse.Namespace) -> SessionStore:
    """The session store `--store` names (or the state directory's); the caller closes it."""
    url = store_url(args)
    if url is not None:
        from heron.sessions.postgres_store import PostgresSessionStore

        return PostgresSessionStore.open(url)
    from heron.sessions.sqlite_store import SqliteSessionStore

    return SqliteSessionStore.open(state_dir(args))


def open_bus(args: argparse.Namespace) -> BusStore:
    """The event bus `--store` names (or the state directory's); closed with `.sessions`."""
    url = store_url(args)
    if url is not None:
        from heron.always_on.bus.postgres_store import PostgresBusStore

        return PostgresBusStore.open(url)
    from heron.always_on.bus.sqlite_store import SqliteBusStore

    return SqliteBusStore.open(state_dir(args))


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The configuration keys the flags in `args` set (a command has all agent flags, or
    only `--state-dir`)."""
    flag = vars(args).get
    agent: dict[str, Any] = {}
    if flag("model"):
        agent["model"] = args.model
    if flag("base_url"):
        agent["base_url"] = args.base_url
    if flag("autonomy"):
        agent["autonomy"] = args.autonomy
    if flag("no_parallel"):
        agent["parallel"] = "off"
    elif flag("parallel"):
        agent["parallel"] = args.parallel
    if flag("receipts"):
        agent["receipts"] = True
    if flag("max_iterations") is not None:
        agent["max_iterations"] = args.max_iterations
    if flag("max_tool_result_chars") is not None:
        agent["max_tool_result_chars"] = args.max_tool_result_chars
    overrides: dict[str, Any] = {"agent": agent} if agent else {}
    if flag("state_dir"):
        overrides["state"] = {"dir": str(args.state_dir)}
    if flag("store"):
        overrides["store"] = {"url": args.store}
    builtin: dict[str, Any] = {}
    if flag("builtin"):
        builtin["sets"] = list(dict.fromkeys(args.builtin))
    if flag("workspace"):
        builtin["workspace"] = str(Path(args.workspace).resolve())
    if flag("sandbox"):
        builtin["sandbox"] = args.sandbox
    if builtin:
        overrides["tools"] = {"builtin": builtin}
    return overrides


# -- configuration ------------------------------------------------------------------------


def load_config(args: argparse.Namespace) -> HeronConfig:
    """The configuration files, then the flags in `args`; `--tools` and `--exclude-tool` add
    to their lists instead of replacing them."""
    from heron.config import ConfigError
    from heron.config import load_config as load

    try:
        config = load(config_file=vars(args).get("config"), overrides=_overrides(args))
    except ConfigError as exc:
        raise UsageError(f"configuration error: {exc}") from exc
    modules, excluded = vars(args).get("tools") or [], vars(args).get("exclude_tool") or []
    if not modules and not excluded:
        return config
    tools = config.tools.model_copy(update={"modules": [*config.tools.modules, *modules]})
    agent = config.agent.model_copy(
        update={"excluded_tools": [*config.agent.excluded_tools, *excluded]}
    )
    return config.model_copy(update={"tools": tools, "agent": agent})


def state_dir(args: argparse.Namespace) -> Path:
    """`--state-dir`, else the `[state] dir` of the configuration (`--config`), else the
    default (`StateConfig.path`)."""
    if vars(args).get("state_dir") is not None:
        return Path(args.state_dir)
    return load_config(args).state.path()


@contextmanager
def library_errors() -> Iterator[None]:
    """The library's configuration and build errors, as usage errors."""
    from heron.always_on.subagents.definitions import AgentFileError
    from heron.config import BuildError, ConfigError

    try:
        yield
    except (BuildError, AgentFileError) as exc:
        raise UsageError(str(exc)) from exc
    except ConfigError as exc:
        raise UsageError(f"configuration error: {exc}") from exc


NO_MODEL = (
    "no model configured, and none to pick (no OPENAI_API_KEY or ANTHROPIC_API_KEY is set, "
    "no Ollama answers at {ollama}).\n"
    "  Choose one with --model PROVIDER:MODEL (e.g. --model openai:gpt-4o-mini) or with "
    '`[agent] model = "…"` in heron.toml;\n'
    "  `heron demo` plays the scripted tour."
)


def require_model(config: HeronConfig) -> HeronConfig:
    """`config` with a model heron can really reach: the configured one, else one found in
    the environment (said on stderr), else a usage error naming the ways to choose one."""
    if config.agent.model is not None:
        return config
    if config.agent.base_url is not None:
        # An endpoint without a model: never send a key heron found to it.
        raise UsageError(
            "--base-url (or [agent] base_url) needs a model too: add --model "
            "openai-compatible:NAME or --model ollama:NAME"
        )
    from heron.config.build import detect_model, ollama_root, with_model

    choice = detect_model()
    if choice is None:
        raise UsageError(NO_MODEL.format(ollama=ollama_root()))
    err(f"no model configured; using {choice.model} because {choice.reason}")
    return with_model(config, choice)


def configured_model(spec: str, *, base_url: str | None = None) -> Model:
    """The model `spec` names (`/model` in the chat)."""
    from heron.config.build import configured_model as resolve

    with library_errors():
        return resolve(spec, base_url=base_url)


def user_tools(config: HeronConfig) -> list[Tool]:
    """Every `@heron.tool` of `[tools] modules` (with the `--tools` files)."""
    from heron.config.build import load_user_tools

    with library_errors():
        return load_user_tools(config)


@asynccontextmanager
async def open_agent(
    config: HeronConfig,
    *,
    approver: Approver,
    tools: list[Tool],
    model: Model | None = None,
) -> AsyncIterator[Agent]:
    """The configured agent with its built-in sets and MCP servers, closed on exit; MCP
    servers left out are reported on stderr."""
    from heron.config.build import open_agent as open_library_agent

    async with AsyncExitStack() as stack:
        with library_errors():
            agent = await stack.enter_async_context(
                open_library_agent(
                    config,
                    approver=approver,
                    tools=tools,
                    model=model,
                    on_problem=lambda problem: err(f"mcp: {problem}"),
                    on_notice=err,
                )
            )
        yield agent


def open_children(config: HeronConfig) -> Subagents | None:
    """The sub-agent runtime of a `heron run` or `heron chat` (`None` when no agent is
    defined and `[subagents] enabled` is not set). Nothing consumes the session's events
    there, so an async child's result is handed over by `get_subagent_status` and the report
    at the end of the run."""
    from heron.always_on.subagents.service import open_subagents
    from heron.config.build import subagents_setup

    setup = subagents_setup(config)
    if not setup.enabled:
        return None
    with library_errors():
        return open_subagents(setup, state_dir=config.state.path(), deliver=False)


async def settle_children(children: Subagents, deadline_s: float) -> None:
    """The end of a run: wait up to `deadline_s` for children still working, cancel the
    rest, and report each on stderr — none is left running or lost silently."""
    if not children.runtime.live:
        return
    err(f"waiting up to {deadline_s:g} s for {len(children.runtime.live)} sub-agent(s)")
    for record in await children.runtime.settle(deadline_s):
        outcome = f", {record.outcome}" if record.outcome else ""
        detail = record.result or record.error
        err(f"sub-agent {record.id} ({record.agent}): {record.status}{outcome}: {detail[:200]}")


# -- output -------------------------------------------------------------------------------


def out(text: str = "") -> None:
    """One line on stdout, with no control character a terminal would act on."""
    sys.stdout.write(terminal_safe(text) + "\n")


def err(text: str) -> None:
    """One `heron: …` line on stderr, flushed, as safe as `out`."""
    sys.stderr.write(f"heron: {terminal_safe(text)}\n")
    sys.stderr.flush()


def when(epoch: float) -> str:
    """A moment for people: local time, ISO 8601, to the second."""
    return datetime.fromtimestamp(epoch).astimezone().isoformat(timespec="seconds")


def stdout_is_gone() -> bool:
    """Whether stdout is a pipe or socket whose reader has gone (`heron … | head -1`)."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):
        return False
    if not hasattr(select, "poll"):
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def parse_since(text: str, *, now: float | None = None) -> float:
    """`--since` as seconds since the epoch.

    Accepts a span back from now (`90s`, `15m`, `2h`, `3d`, `1w`) or an ISO 8601 date or time
    (`2024-05-01`, `2024-05-01T14:30`, `2024-05-01T14:30:00Z`); a time without an offset is
    local time. Raises `ValueError` with the accepted forms otherwise.
    """
    import re
    import time

    text = text.strip()
    relative = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhdw])", text)
    if relative:
        unit_s = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}[relative.group(2)]
        return (time.time() if now is None else now) - float(relative.group(1)) * unit_s
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"cannot read {text!r} as a time: use a span back from now (90s, 15m, 2h, 3d, 1w) "
            "or an ISO date/time (2024-05-01, 2024-05-01T14:30, 2024-05-01T14:30:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time, as a person at the terminal means it
    return moment.astimezone(UTC).timestamp()


# -- running ------------------------------------------------------------------------------


def has_tty() -> bool:
    """Whether this process can open its controlling terminal (to ask for approval)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True


class DaemonThreadExecutor(ThreadPoolExecutor):
    """Runs each job (a sync tool, a terminal read) in its own daemon thread.

    A thread cannot be interrupted, so a sync tool cancelled by Ctrl-C or a timeout keeps
    running. Pool threads are joined when the event loop and the interpreter shut down, which
    would keep `heron run` alive until such a tool returned; daemon threads are left behind.
    """

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        future: Future[_T] = Future()

        def work() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:
                future.set_exception(exc)

        threading.Thread(target=work, name="heron-worker", daemon=True).start()
        return future


# -- sessions (`heron run --session`, `heron chat`, `heron sessions resume`) ----------------


def open_session(state_dir: Path, name: str | None, *, must_exist: bool = False) -> CliSession:
    """Take session `name` (new when None) for this process, and report a repair on stderr.

    Raises `UsageError` for a bad or unknown name; `SessionInUseError` and
    `SessionRepairError` pass through (see `session_failed`).
    """
    from heron.sessions.session import CliSession

    try:
        session = CliSession.open(state_dir, name, must_exist=must_exist)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if session.repaired:
        names = ", ".join(f"{r.name} ({r.call_id})" for r in session.repaired)
        err(
            f"session {session.name!r} ended mid-turn last time; closed "
            f"{len(session.repaired)} open tool call(s) as interrupted: {names}"
        )
    return session


def session_errors() -> tuple[type[BaseException], ...]:
    """What `open_session` and a turn in a session raise that `session_failed` reports."""
    from heron.sessions.lock import SessionInUseError
    from heron.sessions.repair import SessionRepairError
    from heron.sessions.store import ConcurrentWriteError

    return (SessionInUseError, SessionRepairError, ConcurrentWriteError)


def session_failed(exc: BaseException) -> int:
    """Report a session error on stderr; the exit code."""
    from heron.sessions.repair import SessionRepairError

    hint = ""
    if isinstance(exc, SessionRepairError):
        hint = (
            " (`heron sessions show NAME` lists its entries; `heron sessions fork NAME NEW "
            "--at ENTRY` copies its valid start into a new session)"
        )
    err(f"{exc}{hint}")
    return EXIT_ERROR


def announce_session(session: CliSession, *, always: bool) -> None:
    """Tell the operator where the conversation is stored (stderr, so stdout stays clean):
    always for people (`always`), else only when stderr is a terminal; never when nothing
    was stored (the run failed before its first message)."""
    if session.writer.head and (always or sys.stderr.isatty()):
        err(f"session {session.name} — continue it with `heron chat --session {session.name}`")


# -- requests to a human and MCP logins ------------------------------------------------


def open_desk(
    config: HeronConfig, stack: AsyncExitStack, announce: TextIO | None = None
) -> RequestDesk:
    """The desk over the state directory's request store (closed with `stack`); its console
    channel is the store itself (`heron approvals`, the web console), `announce` also shows
    each request."""
    from heron.humans.console import ConsoleChannel
    from heron.humans.desk import RequestDesk
    from heron.humans.signing import DecisionSigner
    from heron.humans.sqlite_store import SqliteRequestStore
    from heron.turn.signing_keys import key_store

    state_dir = config.state.path()
    store = SqliteRequestStore.open_dir(state_dir)
    stack.callback(store.close)
    return RequestDesk(
        store,
        signer=DecisionSigner(
            key_store("decision", state_dir=state_dir, store_url=config.store.url)
        ),
        config=config.approvals,
        channels=[ConsoleChannel(announce)],
    )


def serve_consent(config: HeronConfig) -> DeskConsent | None:
    """The consent channel of `heron serve`: a request on the server's own desk (with every
    channel it delivers on: the console's stderr line, mail, the gateway), given to it with
    `open_on` once the server is started, answered by the callback route, a paste or a mail
    reply (None without OAuth servers, or with `[approvals] durable = false`: then the server
    waits for `heron mcp login`)."""
    oauth = [n for n, c in config.mcp.enabled_servers().items() if c.auth == "oauth"]
    if not oauth or not config.approvals.durable:
        return None
    from heron.mcp.auth.desk_consent import DeskConsent  # the MCP SDK: only with OAuth servers

    return DeskConsent(
        None,
        redirect_uri=mcp_redirect_uri(config, None),
        timeout_s=config.approvals.questions.max_timeout_s,
    )


def mcp_redirect_uri(config: HeronConfig, server: str | None) -> str:
    """Where the browser is sent: the server's `redirect_uri`, else the gateway's callback
    at `[gateway] public_url`, else the loopback default."""
    from heron.mcp.auth.callback import callback_uri
    from heron.mcp.auth.provider import DEFAULT_REDIRECT_URI

    configured = config.mcp.servers[server].oauth.redirect_uri if server is not None else None
    if configured is not None:
        return configured
    if config.gateway.public_url is not None:
        return callback_uri(config.gateway.public_url)
    return DEFAULT_REDIRECT_URI
