"""`HeronServer`: the always-on agent behind `heron serve`.

One process hosts any number of sessions of the durable event bus
(`heron.always_on.sessions.SessionHost`: each awake session has its own writer lock, agent,
triggers and loop task; idle ones are parked and woken by their next event), and everything
that feeds them:

- per session, built when it wakes: the agent `make_agent` builds (so approval allow-list,
  activated tool set and receipt scope are the session's own), run as a `HookedAgent` (the
  lifecycle hooks run before and after every turn of every session) under an
  `EventDrivenAgent` (safe points, the three strategies, exactly-once consumption), and the
  session's triggers (`heron.always_on.triggers.runtime.TriggerRuntime`): detached background
  jobs, shell monitors, timers and the subscriptions that gate its inbound traffic. The
  default session also gets the heartbeat, the system events and the start and stop hooks;
- ingress, routed by one rule (`heron.always_on.bus.routing.route_session`): the webhook
  listener on the one HTTP front (`heron.always_on.ingress`; `/github`, `/im`, `/webhook`,
  and the same paths followed by `/<session>`, all
  signed with one secret; or the `X-Heron-Session` header) and the mail listener (SMTP into a
  Maildir, plus a periodic scan of `Maildir/new`; a reply goes to the session of its thread).
  Inbound third-party events wake a session only through a matching subscription of that
  session; the others are kept quietly (mail in the Maildir, webhooks in the session
  `<session>/quiet`);
- the tools that act on that world: mail triage over the Maildir, the calendar check, the
  messaging tools (`send_message`, `send_card`, `send_notification`: assistant text is
  private, so these are the only way to reach a person; an event needing a reply that a turn
  leaves unanswered gets one reminder turn), and the trigger tools;
- the outbox (`heron.always_on.messaging`): what comes due (quiet hours' end, the recall of
  unread urgent messages), answers by mail and through `/card`, the notices of long turns and
  jobs;
- polling, so events other processes write into the database are found too (one query for
  every session);
- requests to a human (`heron.humans`): a session whose agent has no operator gets the durable
  approver, so a call that needs approval waits on a request in the state directory with a
  placeholder result instead of being denied; `heron approvals` answers it from any terminal,
  and the watcher (`EndingReporter.watch`, one per process, polling like the bus) applies the
  deadlines, runs an approved call once and publishes the outcome to the call's session as a
  `tool.result` or `approval.answer` event (which wakes a parked session).

The server is where `heron serve`'s stores are built (at `start`, by
`heron.always_on.serve_open`), all in `<state_dir>/heron.db`: the SQLite
bus with its session store, the host index and the mail thread index on the bus's connection,
the message store (`heron.always_on.messaging`), and one set of triggers' stores for the
process, which every awake session's `TriggerRuntime` shares (`TriggerStores.shared()`;
closed once, by `aclose`). With `store_url` (`heron serve --store`) the bus, its sessions, the
host and thread indexes, the triggers' stores, the requests to a human with their ledger, both
audit trails and the sub-agent tasks are on the shared PostgreSQL database instead
(`heron.always_on.shared_store`), and every session is held by a fenced lease
(docs/deployment.md).

A stop request (an interrupt the router turns into `cancel`) also cancels the running
background jobs of its session: the engine cancels the tools it detached, jobs belong to the
session.

Shutdown: the first SIGTERM or SIGINT stops taking new turns and lets the running ones finish
(up to `shutdown_grace_s`), then cancels them; tools they detached are cancelled and that is
published, so the next start tells the model. Background jobs keep running and are re-attached
by the next start. A second signal cancels at once. Nothing is lost to a `kill -9` either:
events are durable before any sender is acknowledged, consumption is atomic, and a restart
closes tool calls the crash left open and answers what was left unanswered.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from heron._support.clock import Clock, RealClock
from heron._support.state import open_db
from heron.agent import Agent
from heron.always_on.bus.loop import EventDrivenAgent
from heron.always_on.bus.model import BusEvent
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.always_on.channels.mail_inbound import (
    MaildirSource,
    SmtpIngress,
    ThreadIndex,
)
from heron.always_on.channels.webhook import WebhookServer
from heron.always_on.hooks import HookedAgent, LifecycleHooks
from heron.always_on.intake import Intake, check_serve
from heron.always_on.jobs.manager import JobManager
from heron.always_on.messaging import ServeMessaging
from heron.always_on.serve_config import Announce, ServeConfig, ServeError
from heron.always_on.serve_open import open_server
from heron.always_on.served import ServedSession
from heron.always_on.sessions import SessionHost
from heron.always_on.shared_store import SharedRecords
from heron.always_on.subagents.service import Subagents
from heron.always_on.triggers.runtime import TriggerConfig, TriggerRuntime, TriggerStores
from heron.always_on.workspaces import WorkspaceBindings, bind_session, workspace_id
from heron.audit.executions import ExecutionAuditTrail, ExecutionStore
from heron.audit.sqlite_store import SqliteApprovalAudit, SqliteExecutionStore
from heron.collaboration.asking import DeskRequests, asking_tools
from heron.collaboration.mail_requests import MailRequestAnswers
from heron.collaboration.store import MessageStore
from heron.collaboration.tools import MESSAGE_TOOLS, messaging_tools
from heron.connectors.mail.maildir import Maildir, maildir_tools
from heron.humans.desk import Channel, RequestDesk
from heron.humans.gate import DurableApprover
from heron.humans.outcomes import EndingReporter
from heron.humans.sqlite_store import SqliteRequestStore
from heron.safety.command_policy import CommandPolicy
from heron.sandbox.base import Sandbox
from heron.sessions.writer import SessionWriter
from heron.tools.definition import Tool
from heron.turn.approval_audit import AuditLog
from heron.turn.context import TurnState
from heron.turn.events import BaseEvent, EventSink, ToolResultEvent, discard
from heron.turn.observer import FanOutObserver

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

    from heron.always_on.bus.postgres_store import PostgresBusStore
    from heron.always_on.http import HttpFront
    from heron.humans.postgres_store import PostgresRequestStore

__all__ = ["Announce", "HeronServer", "ServeConfig", "ServeError", "ServedSession"]


class HeronServer:
    """Assembles and runs the always-on agent: `start`, `serve` until `stop`; `serve` closes
    everything when it returns (`aclose` also works on its own after `start`)."""

    def __init__(
        self,
        config: ServeConfig,
        make_agent: Callable[[list[Tool]], Agent],
        *,
        sink: EventSink = discard,
        announce: Announce | None = None,
        clock: Clock | None = None,
        hooks: LifecycleHooks | None = None,
        session_sink: Callable[[str], EventSink] | None = None,
        http_routes: Sequence[BaseRoute] = (),
        request_channels: Sequence[Channel] = (),
        intake: Intake | None = None,
    ) -> None:
        """`make_agent` receives a session's tools and returns the agent to run with them; it
        is called each time a session wakes, so each session has its own. The server runs it
        as a `HookedAgent`, so `hooks` run before and after every turn (and the default
        session's trigger runtime runs the start and stop hooks). Turn events go to
        `session_sink(session)`, else to `sink`. `http_routes` are served on the HTTP front
        beside the webhooks (the gateway's API and console, an OAuth callback);
        `request_channels` reach approvers besides the console and mail (the gateway's).
        `intake`: the bus and webhook listener `heron serve` opened before building the agent
        side (`heron.always_on.intake.open_intake`, on the same store); `start`
        opens one itself otherwise, first."""
        self.config = config
        self.intake = intake
        self.hooks = hooks or LifecycleHooks()
        self._make_agent = make_agent
        self.sink = sink
        self._session_sink = session_sink
        self.announce = announce or (lambda _record: None)
        self.clock: Clock = clock or RealClock()
        self.bus: SqliteBusStore | PostgresBusStore | None = None
        self.shared: SharedRecords | None = None
        """The records beside the bus on the shared store (`store_url`), else `None`."""
        self.messaging: ServeMessaging | None = None
        self.host: SessionHost | None = None
        self.threads: ThreadIndex | None = None
        self.maildir: Maildir | None = None
        self.mail: MaildirSource | None = None
        self.webhook: WebhookServer | None = None
        self.http: HttpFront | None = None
        self.http_routes: list[BaseRoute] = list(http_routes)
        self.request_channels: list[Channel] = list(request_channels)
        self.on_open: list[Callable[[], None]] = []
        """Called once the stores are open, before any session wakes (the gateway joins the
        session store's appends, so the repairs a woken session needs are in its turn log)."""
        self.on_close: list[Callable[[], None]] = []
        """Called first when the server closes (the gateway ends its event streams, so the
        HTTP front is not held open by them)."""
        self.smtp: SmtpIngress | None = None
        self.requests: SqliteRequestStore | PostgresRequestStore | None = None
        self.desk: RequestDesk | None = None
        self._trigger_stores: TriggerStores | None = None
        self.workspaces: WorkspaceBindings | None = None
        """Which workspace each session last ran in (`heron.always_on.workspaces`)."""
        self._workspace = Path()
        self._workspace_key: str | None = None
        self._policy: CommandPolicy | None = None
        self._host = os.uname().nodename
        self._sandbox: Sandbox | None = None
        self._calendar_tools: list[Tool] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self._unwatch: Callable[[], None] | None = None
        self._reporter: EndingReporter | None = None
        self._mail_requests: Callable[[RequestDesk], MailRequestAnswers] | None = None
        self._audit_db: Any = None
        self._execution_store: ExecutionStore | None = None
        self._serving: asyncio.Task[None] | None = None
        self.subagents: Subagents | None = None
        self._grace: asyncio.TimerHandle | None = None
        self._signals = 0
        self._started = False

    def _default(self) -> ServedSession | None:
        if self.host is None or self.config.session not in self.host.awake:
            return None
        runtime = self.host.default.runtime
        assert isinstance(runtime, ServedSession)  # the host runs what `_build` builds
        return runtime

    def session(self, name: str) -> ServedSession | None:
        """The runtime of an awake session, or `None`."""
        awake = self.host.awake.get(name) if self.host is not None else None
        if awake is None:
            return None
        assert isinstance(awake.runtime, ServedSession)
        return awake.runtime

    @property
    def http_url(self) -> str | None:
        """Where the HTTP port (`http_port`) listens, once started."""
        if self.http is None or self.config.http_port is None:
            return None
        return self.http.url(len(self.http.addresses) - 1)

    @property
    def trigger_stores(self) -> TriggerStores | None:
        """The triggers' stores of the process (jobs, timers, monitors, subscriptions)."""
        return self._trigger_stores

    @property
    def messages(self) -> MessageStore | None:
        """The message store (every message the agents sent people), once started."""
        return self.messaging.store if self.messaging is not None else None

    @property
    def agent(self) -> EventDrivenAgent | None:
        """The default session's event loop."""
        default = self._default()
        return default.loop if default is not None else None

    @property
    def triggers(self) -> TriggerRuntime | None:
        """The default session's triggers."""
        default = self._default()
        return default.triggers if default is not None else None

    @property
    def jobs(self) -> JobManager | None:
        """The default session's background jobs."""
        default = self._default()
        return default.jobs if default is not None else None

    # -- assembly ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the intake (the bus and the webhook listener: accepting, `serve_accepting`)
        unless given, then the other stores, wake the default session (processing,
        `serve_started`) and start the other listeners. Raises `ServeError` (and leaves
        nothing open, the given intake included) for an impossible configuration."""
        secret = check_serve(self.config)
        try:
            await open_server(self, secret)
        except BaseException:
            await self.aclose()  # e.g. a port in use: close what was opened
            raise

    # -- requests to a human -----------------------------------------------------------------

    def _audit_conn(self) -> Any:
        """The state database's connection for the audits (approvals and executions), opened
        once."""
        if self._audit_db is None:
            self._audit_db = open_db(self.config.state_dir)
        return self._audit_db

    def approval_audit(self) -> AuditLog:
        """The approval audit trail: the shared store's, else the state directory's."""
        if self.shared is not None:
            return self.shared.approval_audit()
        return SqliteApprovalAudit(self._audit_conn())

    def _executions(self) -> ExecutionStore:
        """The execution audit's store, made once (every wake of a session records into it)."""
        if self._execution_store is None:
            shared = self.shared
            self._execution_store = (
                shared.executions()
                if shared is not None
                else SqliteExecutionStore(self._audit_conn())
            )
        return self._execution_store

    async def _build(self, name: str, writer: SessionWriter) -> ServedSession:
        """Everything one session runs while it is awake (`SessionHost` calls it at each
        wake)."""
        cfg = self.config
        stores = self._trigger_stores
        assert self.bus is not None and stores is not None and self._sandbox is not None
        assert self.workspaces is not None
        lost = bind_session(
            self.workspaces,
            name,
            root=self._workspace,
            workspace=self._workspace_id(),
            host=self._host,
            clock=self.clock,
        )
        if lost is not None:  # its files are in a workspace this worker cannot reach
            await self.bus.publish(lost)
        default = name == cfg.session
        triggers_config = cfg.triggers or TriggerConfig()
        if not default:
            triggers_config = dataclasses.replace(triggers_config, heartbeat=None, system=None)
        triggers = TriggerRuntime(
            state_dir=cfg.state_dir,
            stores=stores.shared(),  # closed once, by `aclose`, after every session
            bus=self.bus,
            workspace=self._workspace,
            sandbox=self._sandbox,
            policy=self._command_policy(),
            session=name,
            clock=self.clock,
            config=triggers_config,
            hooks=self.hooks if default else LifecycleHooks(),
        )
        assert self.messaging is not None
        hooks = self.messaging.notices(name, self.hooks)
        agent = HookedAgent.around(self._make_agent([*self._tools(name), *triggers.tools]), hooks)
        if self.desk is not None and not agent.approval.attended:
            # Nobody at a terminal: a call that needs approval waits on a durable request.
            agent.approval.approver = DurableApprover(self.desk, session=name)
        sink = self._session_sink(name) if self._session_sink is not None else self.sink
        # Every executed call of the session in the execution audit (`heron audit`), as in
        # `heron run` and `heron chat`; calls the last process left running are lost.
        trail = ExecutionAuditTrail(
            self._executions(),
            session=name,
            operator=f"serve:{cfg.session}",
            default_agent=agent.name or "default",
        )
        trail.mark_lost([r.call_id for r in writer.repaired])
        agent.observer = FanOutObserver(agent.observer, trail)
        sink = trail.watching(sink)
        if self.threads is not None:
            sink = _SentMail(sink, name, self.threads, self.clock)
        loop = EventDrivenAgent(
            agent,
            self.bus,
            self.bus.sessions,
            session=name,
            clock=self.clock,
            sink=triggers.sink(sink),
            writer=writer,
            watch=False,  # the host watches the store once for every session
            max_attempts=cfg.max_attempts,  # each session counts its own events' failures
            reply_tools=MESSAGE_TOOLS,  # assistant text is private: only these reach a person
            prepare=self._follow(name),
        )
        subagents = self.subagents
        if subagents is None:
            return ServedSession(loop, triggers)
        if self.shared is not None:
            # Woken here after another worker held it (it died, or was paused past its
            # lease): the children it ran there are gone, and end `lost`.
            subagents.runtime.recover(root_session=name)
        return ServedSession(loop, triggers, children=lambda: subagents.running(name))

    def _pinned_elsewhere(self, name: str) -> bool:
        """A session whose workspace a live worker holds is that worker's to wake."""
        assert self.workspaces is not None
        return self.workspaces.held_elsewhere(name, self._workspace_id(), now=self.clock.time())

    def _workspace_id(self) -> str:
        """The id of this server's workspace, read (or written) once: its root is fixed."""
        if self._workspace_key is None:
            self._workspace_key = workspace_id(self._workspace)
        return self._workspace_key

    def _command_policy(self) -> CommandPolicy:
        """The command policy of this server's workspace, made once for every session (it
        keeps no state between calls)."""
        if self._policy is None:
            self._policy = CommandPolicy(workspace=self._workspace)
        return self._policy

    def _follow(self, name: str) -> Callable[[TurnState], None] | None:
        """A stop of a session's turn reaches the session's sub-agents too."""
        subagents = self.subagents
        if subagents is None:
            return None
        return lambda state: subagents.runtime.follow_turn(name, state)

    def _dormant(self, name: str) -> tuple[bool, float | None]:
        """For a session not awake: an unfinished job (it must be awake to report it), and
        its next timer."""
        stores = self._trigger_stores
        assert stores is not None
        busy = any(True for _ in stores.jobs.open_jobs(name))
        return busy, stores.timers.next_fire(name)

    def _should_wake(self, event: BusEvent) -> bool:
        """The ingress's filter (`Intake.should_wake`)."""
        assert self.intake is not None
        return self.intake.should_wake(event)

    def _tools(self, session: str) -> list[Tool]:
        assert self.messaging is not None  # start() opens the stores first
        cfg = self.config
        tools: list[Tool] = []
        if self.maildir is not None:
            tools += maildir_tools(self.maildir, from_addr=cfg.mail_from)
        tools += self._calendar_tools
        outbox = self.messaging.outbox
        shared = outbox.identity.workspace
        workspace = shared if shared is not None and shared.is_dir() else self._workspace
        tools += messaging_tools(outbox, session=session, workspace=workspace)
        if self.desk is not None:  # the answers arrive as events for the asking call
            tools += asking_tools(DeskRequests(self.desk), session=session)
        if self.subagents is not None:
            tools += self.subagents.tools(session)
        return tools

    # -- running ----------------------------------------------------------------------------

    async def serve(self) -> None:
        """Process events until `stop()`, then shut down cleanly."""
        if self.host is None:
            await self.start()
        assert self.host is not None
        self._serving = asyncio.ensure_future(self.host.serve())
        try:
            # `wait` neither raises when the grace period cancels the turns nor cancels them
            # when this coroutine is cancelled: `aclose` decides.
            await asyncio.wait([self._serving])
            if not self._serving.cancelled():
                self._serving.result()
        finally:
            await self.aclose()

    def stop(self) -> None:
        """Stop taking new turns; the running ones may finish within the grace period."""
        if self.host is not None:
            self.host.stop()
        if self._grace is None:
            loop = asyncio.get_running_loop()
            self._grace = loop.call_later(self.config.shutdown_grace_s, self._cancel_turn)

    def _cancel_turn(self) -> None:
        if self.host is not None:
            self.host.cancel()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT: stop gracefully; the second one cancels the running turns at once."""
        loop = asyncio.get_running_loop()

        def on_signal() -> None:
            self._signals += 1
            if self._signals == 1:
                self.stop()
            else:
                self._cancel_turn()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)

    async def aclose(self) -> None:
        """Close listeners, stop every session (detached tools are cancelled and that is
        published; jobs keep running; locks are released last), close the stores."""
        if self._grace is not None:
            self._grace.cancel()
        if self.intake is not None:  # not handed over yet (opened ahead, failed since)
            await self.intake.aclose()
        for closing in self.on_close:
            closing()
        for server in (self.http, self.smtp):
            if server is not None:
                await server.aclose()
        self.http = self.webhook = self.smtp = None
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self._serving is not None and not self._serving.done():
            self._serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._serving
        if self.subagents is not None:  # children end (cancelled, reported) before the bus
            await self.subagents.aclose()
            self.subagents = None
        if self.host is not None:
            await self.host.aclose()
            self.host = None
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        if self.messaging is not None:
            await self.messaging.aclose()
            self.messaging = None
        for store in (self.bus, self._trigger_stores, self.requests):
            if store is not None:
                store.close()
        if self._audit_db is not None:
            self._audit_db.close()
        self.bus = self._trigger_stores = self.requests = self.shared = None
        self.desk = self._reporter = self._audit_db = self._execution_store = None
        if self._started:
            self._started = False
            self.announce({"type": "serve_stopped", "pid": os.getpid()})


class _SentMail:
    """A session's sink that also records the mail the agent sends (`send_mail`) as that
    session's, so the replies to it come back to the session."""

    def __init__(self, inner: EventSink, session: str, threads: ThreadIndex, clock: Clock):
        self._inner = inner
        self._session = session
        self._threads = threads
        self._clock = clock

    def __call__(self, event: BaseEvent) -> None:
        if isinstance(event, ToolResultEvent) and event.name == "send_mail" and event.success:
            data = event.data
            message_id = data.get("message_id") if isinstance(data, dict) else None
            if isinstance(message_id, str) and message_id:
                self._threads.record([(message_id, self._session)], now=self._clock.time())
        self._inner(event)
