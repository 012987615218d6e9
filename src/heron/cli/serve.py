"""`heron serve`: the always-on agent (listings of its bus, jobs and timers: `heron.cli.bus`).

Output is for machines first: one JSON object per line (its own `serve_accepting` /
`serve_started` / `serve_stopped` records and, with `--events jsonl`, every turn event).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from heron._support.terminal import terminal_safe
from heron.cli import common
from heron.cli.common import EXIT_OK, UsageError

if TYPE_CHECKING:
    from contextlib import AsyncExitStack

    from heron._support.clock import Clock
    from heron.agent import Agent
    from heron.always_on.intake import Intake
    from heron.always_on.serve_config import ServeConfig
    from heron.always_on.subagents.service import SubagentsSetup
    from heron.always_on.triggers.runtime import TriggerConfig
    from heron.collaboration.setup import MessagingConfig
    from heron.config.schema import HeronConfig
    from heron.mcp.assembly import McpAssembly
    from heron.mcp.shared import SharedMcp
    from heron.models.base import Model
    from heron.tools.definition import Tool
    from heron.turn.events import BaseEvent, EventSink


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `serve` to the `heron` parser."""
    serve = sub.add_parser("serve", help="run the always-on, event-driven agent")
    serve.add_argument(
        "--session",
        default="default",
        help="the default session: where events that name no session go",
    )
    serve.add_argument(
        "--sessions",
        nargs="+",
        default=["any"],
        metavar="NAME",
        help="the other sessions events may address, or `any` (the default)",
    )
    serve.add_argument(
        "--idle-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="park a session (other than the default) idle this long",
    )
    serve.add_argument(
        "--max-awake",
        type=int,
        default=100,
        metavar="N",
        help="at most N sessions awake: a wake past it parks the least recently active idle "
        "ones first, or waits (0: no bound; default 100)",
    )
    serve.add_argument("--events", choices=["jsonl", "none"], default="jsonl")
    serve.add_argument("--poll-interval", type=float, default=1.0, metavar="SECONDS")
    serve.add_argument("--webhook-port", type=int, metavar="PORT", help="0 picks a free port")
    serve.add_argument("--webhook-host", default="127.0.0.1")
    serve.add_argument("--webhook-secret-env", default="HERON_WEBHOOK_SECRET", metavar="VAR")
    serve.add_argument(
        "--http-port",
        type=int,
        metavar="PORT",
        help="serve the gateway (HTTP API and web console) here; 0 picks a free port "
        "(default: [gateway] port)",
    )
    serve.add_argument("--http-host", metavar="HOST", help="default: [gateway] host (loopback)")
    serve.add_argument(
        "--contact",
        action="append",
        default=[],
        metavar="ID",
        help="a known sender: mail address, GitHub login, IM id (repeatable)",
    )
    serve.add_argument("--maildir", type=Path, help="the mailbox to watch and triage")
    serve.add_argument("--smtp-port", type=int, metavar="PORT", help="receive mail over SMTP")
    serve.add_argument("--smtp-host", default="127.0.0.1")
    serve.add_argument("--mail-domain", action="append", default=[], metavar="DOMAIN")
    serve.add_argument("--mail-from", default="heron@localhost", metavar="ADDRESS")
    serve.add_argument("--calendar", action="append", default=[], type=Path, metavar="FILE.ics")
    serve.add_argument("--notify-webhook", metavar="URL")
    serve.add_argument("--notify-secret-env", metavar="VAR")
    serve.add_argument("--shutdown-grace", type=float, default=10.0, metavar="SECONDS")
    serve.add_argument(
        "--subscribe",
        action="append",
        default=[],
        choices=["any", "mail", "webhook", "im"],
        help="let every inbound event of this channel wake the agent (repeatable)",
    )
    serve.add_argument("--heartbeat", type=float, metavar="SECONDS", help="heartbeat interval")
    serve.add_argument(
        "--max-attempts",
        type=int,
        default=3,
        metavar="N",
        help="quarantine an event after N failed attempts to consume it (default 3)",
    )
    common.add_store_flag(serve)
    serve.add_argument(
        "--lease",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="on a shared store: how long this worker's hold on a session lasts unless "
        "renewed; a dead worker's sessions are taken over after it (default 15)",
    )
    common.add_agent_flags(serve)
    serve.set_defaults(handler=cmd_serve)


# -- serve ----------------------------------------------------------------------------------


def _emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def _session_events(session: str) -> EventSink:
    """A session's turn events as JSON lines, each led by its `session`."""
    head = "{" + json.dumps("session") + ":" + json.dumps(session) + ","

    def emit(event: BaseEvent) -> None:
        line = head + event.model_dump_json(exclude_none=True)[1:]
        sys.stdout.write(terminal_safe(line) + "\n")  # as `heron run --events jsonl`
        sys.stdout.flush()

    return emit


def _serve_config(config: HeronConfig) -> HeronConfig:
    """`config` for serve: the `events` and `collaboration` built-in sets are left out, since
    serve gives every session its own trigger and messaging tools (bound to that session)."""
    builtin = config.tools.builtin
    own = {"events", "collaboration"}
    if not own & set(builtin.sets):
        return config
    sets = [s for s in builtin.sets if s not in own]
    tools = config.tools.model_copy(update={"builtin": builtin.model_copy(update={"sets": sets})})
    return config.model_copy(update={"tools": tools})


def _shared_mcp(config: HeronConfig, shared: McpAssembly) -> SharedMcp:
    """The process's servers for every session (`heron.mcp.shared`): a server whose login
    completes while serve runs joins the sessions, with a line on stderr."""
    from heron.mcp.shared import SharedMcp

    a = config.agent
    return SharedMcp(
        shared,
        config.mcp,
        autonomy=a.autonomy,
        allowed_tools=a.allowed_tools,
        excluded_tools=a.excluded_tools,
        announce=lambda line: common.err(f"mcp: {line}"),
    )


def cmd_serve(args: argparse.Namespace) -> int:
    """Listener-first (`heron.always_on.intake`): the bus and the webhook listener are up,
    accepting, before the agent side is imported and built (off the event loop, which answers
    webhooks meanwhile); then the server starts processing what was accepted."""
    import asyncio
    import dataclasses
    from contextlib import AsyncExitStack

    from heron._support.clock import RealClock
    from heron._support.limits import set_input_limits
    from heron.always_on.intake import check_serve, open_intake
    from heron.always_on.serve_config import ServeConfig, ServeError
    from heron.errors import StoreError
    from heron.safety.secrets import known_secrets, register_secrets

    config = _serve_config(common.require_model(common.load_config(args)))
    gateway_config = config.gateway
    # Before anything is accepted: events are masked with the known secrets as they are
    # stored, and webhook bodies are held to `[limits]` (building an agent applies it too).
    known_secrets().add_env(
        [args.webhook_secret_env, args.notify_secret_env or "", gateway_config.token_env]
    )
    register_secrets(config)
    set_input_limits(config.limits.to_limits())
    http_port = args.http_port if args.http_port is not None else gateway_config.port
    # Background jobs run in the built-in tools' workspace when one is given.
    builtin_cfg = config.tools.builtin
    workspace = builtin_cfg.workspace_path() if builtin_cfg.workspace else None
    if workspace is not None and not workspace.is_dir():
        raise UsageError(f"--workspace {builtin_cfg.workspace} is not a directory")
    if args.idle_timeout <= 0:
        raise UsageError("--idle-timeout must be more than 0 seconds")
    if args.max_awake < 0:
        raise UsageError("--max-awake must be 0 (no bound) or more")
    sessions = None if "any" in args.sessions else frozenset(args.sessions)
    serve_config = ServeConfig(
        state_dir=config.state.path(),
        session=args.session,
        sessions=sessions,
        idle_timeout_s=args.idle_timeout,
        max_awake=args.max_awake or None,
        poll_interval_s=args.poll_interval,
        webhook_port=args.webhook_port,
        webhook_host=args.webhook_host,
        webhook_secret_env=args.webhook_secret_env,
        http_port=http_port,
        http_host=args.http_host or gateway_config.host,
        http_max_body=gateway_config.limits.max_body,
        http_max_connections=gateway_config.limits.max_connections,
        http_head_timeout_s=gateway_config.limits.head_timeout_s,
        http_body_timeout_s=gateway_config.limits.body_timeout_s,
        contacts=frozenset(args.contact),
        maildir=args.maildir,
        smtp_port=args.smtp_port,
        smtp_host=args.smtp_host,
        mail_domains=frozenset(args.mail_domain),
        mail_from=args.mail_from,
        calendars=tuple(args.calendar),
        notify_webhook=args.notify_webhook,
        notify_secret_env=args.notify_secret_env,
        workspace=workspace,
        sandbox=builtin_cfg.sandbox,
        shutdown_grace_s=args.shutdown_grace,
        max_attempts=args.max_attempts,
        store_url=common.store_url(args),
        lease_s=args.lease,
        subscribe=tuple(args.subscribe),
        approvals=config.approvals if config.approvals.durable else None,
        approval_timeout_s=config.approval.timeout_s,
        approval_announce=True,
    )
    try:
        secret = check_serve(serve_config)
    except ServeError as exc:
        raise UsageError(str(exc)) from exc
    session_sink = _session_events if args.events == "jsonl" else None

    async def run() -> int:
        asyncio.get_running_loop().set_default_executor(common.DaemonThreadExecutor())
        clock = RealClock()
        async with AsyncExitStack() as stack:
            try:
                intake = await open_intake(serve_config, secret=secret, clock=clock, announce=_emit)
            except (ServeError, StoreError) as exc:  # a port taken, a store out of reach
                raise UsageError(str(exc)) from exc
            stack.push_async_callback(intake.aclose)
            # Accepting from here: the agent side's imports and builds run off the event loop,
            # which takes the GIL back from them within 1 ms (not 5) to answer a webhook.
            gateway = serve_config.http_port is not None
            interval = sys.getswitchinterval()
            sys.setswitchinterval(min(interval, _LISTENER_SWITCH_S))
            try:
                side = await asyncio.to_thread(_agent_side, config, args.heartbeat, gateway)
            finally:
                sys.setswitchinterval(interval)
            server_config = dataclasses.replace(
                serve_config,
                messaging=side.messaging,
                triggers=side.triggers,
                subagents=side.subagents if side.subagents.enabled else None,
            )
            return await _serve(
                stack, config, server_config, side, intake, clock, session_sink, args
            )

    return asyncio.run(run())


_LISTENER_SWITCH_S = 0.001
"""The GIL's switch interval while the agent side loads in a thread beside the listener."""


@dataclass(frozen=True, slots=True)
class _AgentSide:
    """What `heron serve` builds while its intake already accepts: imported and read off the
    event loop (`_agent_side`)."""

    user_tools: list[Tool]
    model: Model
    messaging: MessagingConfig
    subagents: SubagentsSetup
    triggers: TriggerConfig | None


def _agent_side(config: HeronConfig, heartbeat: float | None, gateway: bool) -> _AgentSide:
    """The agent side's imports (most of a start: the server, the agent, providers, tools;
    the gateway's with an HTTP port) and what is built from the configuration alone, in a
    worker thread."""
    import heron.always_on.server  # imported here, off the event loop
    from heron.always_on.triggers.heartbeat import HeartbeatConfig
    from heron.always_on.triggers.runtime import TriggerConfig
    from heron.config.build import agent_model, messaging_config, subagents_setup

    user_tools = common.user_tools(config)
    with common.library_errors():
        model = agent_model(config)
    if gateway:
        import heron.gateway.app  # noqa: F401  # built on the event loop, imported here

    return _AgentSide(
        user_tools=user_tools,
        model=model,
        messaging=messaging_config(config),
        subagents=subagents_setup(config),
        triggers=TriggerConfig(heartbeat=HeartbeatConfig(every_s=heartbeat)) if heartbeat else None,
    )


async def _serve(
    stack: AsyncExitStack,
    config: HeronConfig,
    serve_config: ServeConfig,
    side: _AgentSide,
    intake: Intake,
    clock: Clock,
    session_sink: Callable[[str], EventSink] | None,
    args: argparse.Namespace,
) -> int:
    """The agent side on the event loop (built-in tools, MCP clients, the gateway), then the
    server, which takes the intake over and processes what it accepted."""
    from heron._support.state import open_db
    from heron.always_on.server import HeronServer, ServeError
    from heron.audit.sqlite_store import SqliteApprovalAudit
    from heron.config.build import build_agent, open_builtin, open_mcp
    from heron.turn.approval import NoApprover
    from heron.turn.events import discard

    user_tools, model = side.user_tools, side.model
    with common.library_errors():
        builtin = await open_builtin(config)
        if builtin is not None:
            stack.push_async_callback(builtin.aclose)
        # One set of MCP clients for the process, started lazily under their pins;
        # every session gets its own view of them.
        known = [*user_tools, *(builtin.all_tools() if builtin is not None else [])]
        # An OAuth login that becomes necessary asks once, on the durable desk.
        consent = common.serve_consent(config)
        # A server's request for user input becomes a durable question on the
        # server's desk (opened by `start`, looked up when a server asks). The
        # MCP SDK is imported only when there are servers: it is most of a start.
        human_input = None
        if config.mcp.enabled_servers():
            from heron.mcp.client.human_input import HumanInput

            human_input = HumanInput(lambda: server.desk, poll_s=args.poll_interval)
        mcp = await open_mcp(config, known, consent=consent, human_input=human_input)
    shared_mcp = None
    if mcp is not None:
        stack.push_async_callback(mcp.aclose)
        for problem in mcp.problems:
            common.err(f"mcp: {problem}")
        shared_mcp = _shared_mcp(config, mcp)

    # The browser's redirect of an OAuth login comes back here (`[gateway] public_url`
    # names this process), on the same HTTP front, with no token: the login's state
    # is its proof.
    callback: list[Any] = []
    if consent is not None:
        from heron.mcp.auth.callback import oauth_callback_routes

        callback = oauth_callback_routes(lambda: consent.desk)
    gateway, metrics = _gateway(
        config, serve_config.http_port, serve_config.http_host, args.poll_interval
    )
    if gateway is not None:
        stack.callback(gateway.close)

    # Every session's agent records its approvals on one connection (the secrets were
    # registered before the intake opened): an agent is built at each wake of a session.
    audit_db = open_db(config.state.path())
    stack.callback(audit_db.close)
    audit = SqliteApprovalAudit(audit_db)

    def make_agent(tools: list[Tool]) -> Agent:
        # A daemon has no terminal: the server gives each session the durable
        # approver (`heron approvals` answers), or with `[approvals] durable = false`
        # approval-required calls are denied by policy.
        return build_agent(
            config,
            approver=NoApprover(),
            tools=[*user_tools, *tools],
            model=model,
            builtin=builtin,
            mcp=shared_mcp.session() if shared_mcp is not None else None,
            metrics=metrics,
            audit=audit,
        )

    server = HeronServer(
        serve_config,
        make_agent,
        sink=discard,
        session_sink=gateway.sinks(session_sink) if gateway else session_sink,
        announce=_emit,
        clock=clock,
        http_routes=[*(gateway.routes() if gateway else ()), *callback],
        request_channels=[gateway.channel] if gateway else (),
        intake=intake,
    )
    if gateway is not None:
        gateway.server = server
        server.on_open.append(gateway.attach)
        server.on_close.append(gateway.end_streams)
    try:
        with common.library_errors():
            await server.start()
    except ServeError as exc:
        raise UsageError(str(exc)) from exc
    if consent is not None:
        assert server.desk is not None  # durable approvals: the server opened its desk
        consent.open_on(server.desk)
    server.install_signal_handlers()
    await server.serve()
    return EXIT_OK


def _gateway(config: HeronConfig, port: int | None, host: str, poll_s: float) -> tuple[Any, Any]:
    """The gateway and the process's one metrics registry, when an HTTP port is set; `host`
    is where it listens (`--http-host` too), one of the names it answers."""
    if port is None:
        return None, None
    from heron.gateway.app import Gateway
    from heron.telemetry.metrics import MetricsRegistry

    metrics = MetricsRegistry()
    gateway_config = config.gateway.model_copy(update={"host": host})
    gateway = Gateway(gateway_config, metrics=metrics, poll_interval_s=poll_s)
    if not len(gateway.guard.tokens):
        common.err(
            f"gateway: no token is configured, so every API request is refused (401); set "
            f"${config.gateway.token_env} or [[gateway.tokens]]"
        )
    return gateway, metrics
