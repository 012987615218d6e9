"""Opening `heron serve` (`HeronServer.start`, after its checks): the intake first — the bus
(`<state_dir>/heron.db`, or the shared PostgreSQL database of `store_url`) and the webhook
listener, `serve_accepting` (`heron.always_on.intake`; `heron serve` opens it ahead, before it
imports the agent side) — then the messaging, the requests to a human, the sub-agents and the
calendars, the `SessionHost` (which wakes the default session), the rest of the ingress and
the watchers; `serve_started` is announced last. What fails
here is closed by the caller (`HeronServer.aclose`)."""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any, cast

from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.always_on.channels.sqlite_mail_inbound import SqliteThreadIndex
from heron.always_on.ingress import start_ingress
from heron.always_on.intake import open_intake
from heron.always_on.messaging import ServeMessaging
from heron.always_on.serve_config import ServeError
from heron.always_on.serve_requests import awaiting, open_requests, tend_requests
from heron.always_on.sessions import HostConfig, HostIndex, SessionHost
from heron.always_on.shared_store import open_shared, reap_children, unowned_due
from heron.always_on.sqlite_workspaces import SqliteWorkspaceBindings
from heron.always_on.subagents.ownership import LeaseOwnership
from heron.always_on.subagents.service import open_subagents
from heron.always_on.triggers.sqlite_store import open_trigger_stores
from heron.connectors.mail.maildir import Maildir
from heron.sandbox import make_sandbox
from heron.sessions.lease import Fenced, LeaseStore
from heron.sessions.lock import SessionInUseError

if TYPE_CHECKING:
    from heron.always_on.bus.postgres_store import PostgresBusStore
    from heron.always_on.server import HeronServer


async def open_server(server: HeronServer, secret: bytes) -> None:
    cfg = server.config
    index: HostIndex
    leases: LeaseStore | None = None
    bus: SqliteBusStore | PostgresBusStore
    # Listener-first: accepting before anything else is built (`heron.always_on.intake`).
    intake = server.intake or await open_intake(
        cfg, secret=secret, clock=server.clock, announce=server.announce
    )
    server.intake = intake
    intake.hand_over()  # opened as the server's: `aclose` closes them
    if cfg.store_url is not None:
        index, leases = open_shared(server, intake)
        bus = intake.bus
    else:
        local = intake.bus
        assert isinstance(local, SqliteBusStore)
        server.bus, bus, index = local, local, intake.index
        # The triggers' stores, one set for the process: every session's runtime shares them.
        server._trigger_stores = open_trigger_stores(cfg.state_dir)
        server.workspaces = SqliteWorkspaceBindings(local.sessions.conn)
        if cfg.maildir is not None:
            server.maildir = Maildir(cfg.maildir)
            server.threads = SqliteThreadIndex(local.sessions.conn)
    server.http, server.webhook, server.smtp = intake.http, intake.webhook, intake.smtp
    server._workspace = workspace = (cfg.workspace or cfg.state_dir / "workspace").resolve()
    workspace.mkdir(parents=True, exist_ok=True)
    server._sandbox = make_sandbox(cfg.sandbox, workspace=workspace)
    server.messaging = ServeMessaging.open(
        cfg.messaging_config(),
        state_dir=cfg.state_dir,
        threads=server.threads,
        clock=server.clock,
        store_url=cfg.store_url,
    )
    if cfg.approvals is not None:
        open_requests(server, cfg.approvals)
    if cfg.subagents is not None:
        shared = None
        if server.shared is not None and leases is not None:
            # The children's histories are fenced by their root session's lease.
            ownership = LeaseOwnership(leases, fence=cast(Fenced, bus.sessions))
            shared = (server.shared.subagents(), ownership)
        server.subagents = open_subagents(
            cfg.subagents, state_dir=cfg.state_dir, bus=bus, deliver=True, shared=shared
        )
        desk = server.desk
        if desk is not None:  # what a lost child asked people can no longer run
            server.subagents.runtime.on_lost = lambda record: desk.withdraw(
                record.session, f"sub-agent {record.id} was lost"
            )
        # Children of a process that died (kill -9) end `lost`, each reported to its parent.
        server.subagents.runtime.recover()
    if cfg.calendars:
        from heron.connectors.calendar import CalendarConfig, calendar_tools

        calendars = CalendarConfig.from_files(cfg.calendars)
        server._calendar_tools = calendar_tools(calendars, offer="availability")
    for opened in server.on_open:
        opened()
    server.host = host = SessionHost(
        HostConfig(
            state_dir=cfg.state_dir,
            default=cfg.session,
            allowed=cfg.sessions,
            idle_timeout_s=cfg.idle_timeout_s,
            max_awake=cfg.max_awake,
            poll_interval_s=cfg.poll_interval_s,
        ),
        bus=bus,
        sessions=bus.sessions,
        index=index,
        build=server._build,
        dormant=server._dormant,
        prepare=intake.standing,
        clock=server.clock,
        announce=server.announce,
        awaiting=(lambda name: awaiting(server, name)) if server.desk is not None else None,
        leases=leases,
        unowned_due=unowned_due(server) if leases is not None else None,
        defer=server._pinned_elsewhere if leases is not None else None,
    )
    intake.attach(host)
    try:
        await host.start()  # wakes the default session: one writer per session
    except SessionInUseError as exc:
        raise ServeError(str(exc)) from exc
    await start_ingress(server, secret)
    if server._reporter is not None and server.desk is not None:
        watch = server._reporter.watch(
            expire=lambda: tend_requests(server), clock=server.clock, interval_s=cfg.poll_interval_s
        )
        server._tasks.append(asyncio.ensure_future(watch))
    if server.subagents is not None and server.shared is not None:
        sweep = reap_children(server.subagents.runtime, every_s=cfg.lease_s, clock=server.clock)
        server._tasks.append(asyncio.ensure_future(sweep))
    server._started = True
    default = server._default()
    assert default is not None  # woken by `host.start`
    webhook = server.webhook.url if server.webhook and cfg.webhook_port is not None else None
    started: dict[str, Any] = {
        "type": "serve_started",
        "pid": os.getpid(),
        "session": cfg.session,
        "webhook": webhook,
        "smtp": server.smtp.port if server.smtp else None,
        "tools": default.loop.agent.registry.names(),
    }
    if cfg.http_port is not None:
        started["http"] = server.http_url  # the gateway's address
    server.announce(started)
