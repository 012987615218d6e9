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
  listener (`/github`, `/im`, `/webhook`, and the same paths followed by `/<session>`, all
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

The server is where `heron serve`'s stores are built, all in `<state_dir>/heron.db`: the SQLite
bus with its session store, the host index and the mail thread index on the bus's connection,
the message store (`heron.always_on.messaging`), and one set of triggers' stores for the
process, which every awake session's `TriggerRuntime` shares (`TriggerStores.shared()`;
closed once, by `aclose`). With `store_url` (`heron serve --store`) the bus, its sessions, the
host and thread indexes and the triggers' stores are on the shared PostgreSQL database instead,
and every session is held by a fenced lease (docs/deployment.md).

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
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from heron._support.clock import Clock, RealClock, timestamp
from heron._support.state import open_db
from heron._support.vocabulary import ACTIVE_STATUSES
from heron.agent import Agent
from heron.always_on.bus.loop import EventDrivenAgent
from heron.always_on.bus.model import BusEvent, EventContent, EventContext
from heron.always_on.bus.routing import check_hosted_name, quiet_session_name
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.always_on.channels.adapters import GenericAdapter, GitHubAdapter, ImAdapter
from heron.always_on.channels.answers import CardActionAdapter, MailAnswers, RequestAnswerAdapter
from heron.always_on.channels.mail_inbound import (
    MaildirSource,
    MailIngressConfig,
    SmtpIngress,
    ThreadIndex,
)
from heron.always_on.channels.sqlite_mail_inbound import SqliteThreadIndex
from heron.always_on.channels.webhook import WebhookRoute, WebhookServer
from heron.always_on.hooks import HookedAgent, LifecycleHooks
from heron.always_on.jobs.manager import JobManager
from heron.always_on.messaging import MessagingConfig, ServeMessaging
from heron.always_on.sessions import HostConfig, HostIndex, SessionHost
from heron.always_on.sqlite_sessions import SqliteHostIndex
from heron.always_on.subagents.service import Subagents, SubagentsSetup, open_subagents
from heron.always_on.triggers.runtime import TriggerConfig, TriggerRuntime, TriggerStores
from heron.always_on.triggers.sqlite_store import open_trigger_stores
from heron.always_on.triggers.subscriptions import (
    SubscriptionFilter,
    Subscriptions,
    SubscriptionSource,
)
from heron.audit.executions import ExecutionAuditTrail
from heron.audit.sqlite_store import SqliteApprovalAudit, SqliteExecutionStore
from heron.collaboration.asking import DeskRequests, asking_tools
from heron.collaboration.config import PersonConfig, SignedPostConfig
from heron.collaboration.mail_requests import MailRequestAnswers, MailRequestChannel
from heron.collaboration.store import MessageStore
from heron.collaboration.tools import MESSAGE_TOOLS, messaging_tools
from heron.collaboration.webhook_requests import WebhookRequestChannel
from heron.connectors.mail.maildir import Maildir, maildir_tools
from heron.connectors.mail.send import MailConfig
from heron.errors import HeronError
from heron.humans.approvers import describe
from heron.humans.config import ApprovalsConfig
from heron.humans.console import ConsoleChannel
from heron.humans.desk import Channel, RequestDesk
from heron.humans.gate import DurableApprover
from heron.humans.outcomes import EndingReporter, RequestEnding, SessionAgent, awaiting_text
from heron.humans.signing import DecisionKeyStore, DecisionSigner
from heron.humans.sqlite_store import SqliteRequestStore
from heron.humans.store import HumanRequest
from heron.safety.command_policy import CommandPolicy
from heron.safety.idempotency import IdempotencyStore
from heron.safety.sqlite_idempotency import SqliteIdempotencyLedger
from heron.sandbox import make_sandbox
from heron.sandbox.base import Sandbox
from heron.sessions.lease import LeaseStore
from heron.sessions.lock import SessionInUseError
from heron.sessions.writer import SessionWriter
from heron.tools.definition import Tool
from heron.turn.context import TurnState
from heron.turn.events import BaseEvent, EventSink, ToolResultEvent, discard
from heron.turn.observer import FanOutObserver

if TYPE_CHECKING:
    from heron.always_on.bus.postgres_store import PostgresBusStore

Announce = Callable[[dict[str, Any]], None]
"""Receives the server's own lifecycle records (`serve_started`, `session_woken`,
`session_parked`, `session_failed`, `session_lost`, `serve_stopped`)."""


class ServeError(HeronError, RuntimeError):
    """The server cannot start as configured; nothing was started."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ServeConfig:
    """What `heron serve` listens to, which sessions it hosts and which tools it gives them."""

    state_dir: Path
    session: str = "default"
    """The default session: where an event that names no session goes; never parked."""
    sessions: frozenset[str] | None = None
    """The other sessions events may address (`None`: any valid name, created on its first
    event)."""
    idle_timeout_s: float = 300.0
    """How long a session other than the default stays awake with nothing to do."""
    poll_interval_s: float = 1.0
    """How often to look for events written by other processes."""
    workspace: Path | None = None
    """Where background jobs run; default `<state_dir>/workspace`."""
    sandbox: Literal["process", "bwrap"] = "process"
    triggers: TriggerConfig | None = None
    """Jobs, timers, heartbeat and system-event settings; `None`: the defaults. The heartbeat
    and the system events are the default session's only."""
    subscribe: tuple[SubscriptionSource, ...] = ()
    """Channels whose every inbound event wakes the session it is for (a standing
    subscription of each session)."""
    webhook_port: int | None = None
    """Listen for webhooks on this port (0: any free one); `None`: no webhook listener."""
    webhook_host: str = "127.0.0.1"
    webhook_secret_env: str = "HERON_WEBHOOK_SECRET"
    """Environment variable with the shared signing secret; required for webhooks."""
    contacts: frozenset[str] = frozenset()
    """Known third parties: mail addresses, GitHub logins, IM sender ids."""
    maildir: Path | None = None
    """The mailbox to triage; required for `smtp_port`."""
    smtp_port: int | None = None
    smtp_host: str = "127.0.0.1"
    mail_domains: frozenset[str] = frozenset()
    """Recipient domains the SMTP listener accepts (empty: any)."""
    mail_from: str = "heron@localhost"
    """The From address of drafted replies."""
    mail_scan_interval_s: float = 5.0
    calendars: tuple[Path, ...] = ()
    notify_webhook: str | None = None
    """The user's webhook (heron's signed JSON): added to `[user] channels`."""
    notify_secret_env: str | None = None
    shutdown_grace_s: float = 10.0
    max_attempts: int = 3
    """Failed attempts to consume an event before it is quarantined (a dead letter)."""
    messaging: MessagingConfig = dataclasses.field(default_factory=MessagingConfig)
    """The agent's identity, the people it writes to, the channels and notices."""
    store_url: str | None = None
    """A PostgreSQL store shared with other workers (`None`: SQLite in `state_dir`); see
    docs/deployment.md."""
    lease_s: float = 15.0
    """On a shared store: how long a worker's hold on a session lasts unless renewed (a dead
    worker's sessions are taken over after it)."""

    def messaging_config(self) -> MessagingConfig:
        """`messaging` with `notify_webhook` folded into the user's channels."""
        m = self.messaging
        if self.notify_webhook is None:
            return m
        user = m.people.get(m.user, PersonConfig())
        channels = [*user.channels, *(["webhook"] if "webhook" not in user.channels else [])]
        people = {
            **m.people,
            m.user: user.model_copy(update={"webhook": self.notify_webhook, "channels": channels}),
        }
        posts = m.channels.model_copy(
            update={"webhook": SignedPostConfig(secret_env=self.notify_secret_env)}
        )
        return dataclasses.replace(m, people=people, channels=posts)

    approvals: ApprovalsConfig | None = field(default_factory=ApprovalsConfig)
    """`[approvals]`: who answers requests to a human (by default the local operator with
    `heron approvals`); `None`: no durable requests, calls that need approval are denied."""
    approval_timeout_s: float = 300.0
    """`[approval] timeout_s`: how long a request waits; then it ends as no answer."""
    approval_announce: bool = False
    """Write one line per new request to standard error (the console channel's announce)."""
    subagents: SubagentsSetup | None = None
    """`[subagents]` and the agent definitions: every session gets the sub-agent tools, and
    each child runs as a session on this server's bus; `None`: no sub-agents."""


class ServedSession:
    """What runs while one session is awake (`heron.always_on.sessions.SessionRuntime`): its
    event loop over its own agent, and its triggers."""

    def __init__(self, loop: EventDrivenAgent, triggers: TriggerRuntime) -> None:
        self._loop = loop
        self.triggers = triggers
        self._stopping_jobs: set[asyncio.Task[None]] = set()

    @property
    def loop(self) -> EventDrivenAgent:
        return self._loop

    @property
    def jobs(self) -> JobManager:
        return self.triggers.jobs

    def notify(self, event: BusEvent) -> None:
        """A stop request also stops the session's background jobs (see the module
        docstring); their ends are published as `job.exit` events."""
        route = self._loop.router.route_now(event)
        if route is not None and route.strategy == "cancel" and route.cancel_mode == "cancel":
            task = asyncio.ensure_future(_cancel_jobs(self.jobs))
            self._stopping_jobs.add(task)
            task.add_done_callback(self._stopping_jobs.discard)
        self._loop.notify(event)

    def busy(self) -> str | None:
        for job in self.jobs.store.open_jobs(self.jobs.session):
            return f"background job {job.id} is {job.state}"
        return None

    def next_alarm(self) -> float | None:
        timers = self.triggers.timers.timers()
        return timers[0].next_fire if timers else None

    async def start(self) -> None:
        await self.triggers.start()  # re-attach jobs, resume timers: what fell due fires

    async def aclose(self) -> None:
        await self._loop.aclose()
        await asyncio.gather(*self._stopping_jobs, return_exceptions=True)
        await self.triggers.aclose()


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
    ) -> None:
        """`make_agent` receives a session's tools and returns the agent to run with them; it
        is called each time a session wakes, so each session has its own. The server runs it
        as a `HookedAgent`, so `hooks` run before and after every turn (and the default
        session's trigger runtime runs the start and stop hooks). Turn events go to
        `session_sink(session)`, else to `sink`."""
        self.config = config
        self.hooks = hooks or LifecycleHooks()
        self._make_agent = make_agent
        self.sink = sink
        self._session_sink = session_sink
        self.announce = announce or (lambda _record: None)
        self.clock: Clock = clock or RealClock()
        self.bus: SqliteBusStore | PostgresBusStore | None = None
        self.messaging: ServeMessaging | None = None
        self.host: SessionHost | None = None
        self.threads: ThreadIndex | None = None
        self.maildir: Maildir | None = None
        self.mail: MaildirSource | None = None
        self.webhook: WebhookServer | None = None
        self.smtp: SmtpIngress | None = None
        self.requests: SqliteRequestStore | None = None
        self.desk: RequestDesk | None = None
        self._trigger_stores: TriggerStores | None = None
        self._workspace = Path()
        self._sandbox: Sandbox | None = None
        self._calendar_tools: list[Tool] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self._unwatch: Callable[[], None] | None = None
        self._reporter: EndingReporter | None = None
        self._mail_requests: Callable[[RequestDesk], MailRequestAnswers] | None = None
        self._audit_db: Any = None
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
        """Open the stores, wake the default session, start the listeners. Raises
        `ServeError` (and leaves nothing open) for an impossible configuration."""
        cfg = self.config
        secret = self._secret() if cfg.webhook_port is not None else b""
        if cfg.smtp_port is not None and cfg.maildir is None:
            raise ServeError("the SMTP listener needs a Maildir to deliver into (--maildir)")
        for name in (cfg.session, *(cfg.sessions or ())):
            try:
                check_hosted_name(name)
            except ValueError as exc:
                raise ServeError(str(exc)) from None
        try:
            await self._open(secret)
        except BaseException:
            await self.aclose()  # e.g. a port in use: close what was opened
            raise

    async def _open(self, secret: bytes) -> None:
        cfg = self.config
        self._workspace = workspace = (cfg.workspace or cfg.state_dir / "workspace").resolve()
        workspace.mkdir(parents=True, exist_ok=True)
        self._sandbox = make_sandbox(cfg.sandbox, workspace=workspace)
        index: HostIndex
        leases: LeaseStore | None = None
        bus: SqliteBusStore | PostgresBusStore
        if cfg.store_url is not None:
            bus, index, leases = self._open_shared(cfg.store_url)
        else:
            self.bus = local = SqliteBusStore.open(cfg.state_dir)
            bus, index = local, SqliteHostIndex(local.sessions.conn)
            # The triggers' stores, one set for the process: every session's runtime shares them.
            self._trigger_stores = open_trigger_stores(cfg.state_dir)
            if cfg.maildir is not None:
                self.maildir = Maildir(cfg.maildir)
                self.threads = SqliteThreadIndex(local.sessions.conn)
        self.messaging = ServeMessaging.open(
            cfg.messaging_config(), state_dir=cfg.state_dir, threads=self.threads, clock=self.clock
        )
        if cfg.approvals is not None:
            self._open_requests(cfg.approvals)
        if cfg.subagents is not None:
            if not isinstance(bus, SqliteBusStore):
                raise ServeError(
                    "sub-agents keep their tasks in the worker's SQLite database: a shared store "
                    "(--store) does not run them yet; serve them from a single SQLite worker"
                )
            self.subagents = open_subagents(
                cfg.subagents, state_dir=cfg.state_dir, bus=bus, deliver=True
            )
            # Children of a process that died (kill -9) end `lost`, each reported to its parent.
            self.subagents.runtime.recover()
        if cfg.calendars:
            from heron.connectors.calendar import CalendarConfig, calendar_tools

            calendars = CalendarConfig.from_files(cfg.calendars)
            self._calendar_tools = calendar_tools(calendars, offer="availability")
        self.host = host = SessionHost(
            HostConfig(
                state_dir=cfg.state_dir,
                default=cfg.session,
                allowed=cfg.sessions,
                idle_timeout_s=cfg.idle_timeout_s,
                poll_interval_s=cfg.poll_interval_s,
            ),
            bus=bus,
            sessions=bus.sessions,
            index=index,
            build=self._build,
            dormant=self._dormant,
            prepare=self._standing_subscriptions,
            clock=self.clock,
            announce=self.announce,
            awaiting=self._awaiting if self.desk is not None else None,
            leases=leases,
        )
        try:
            await host.start()  # wakes the default session: one writer per session
        except SessionInUseError as exc:
            raise ServeError(str(exc)) from exc
        await self._start_ingress(secret)
        if self._reporter is not None and self.desk is not None:
            watch = self._reporter.watch(
                expire=self._tend_requests, clock=self.clock, interval_s=cfg.poll_interval_s
            )
            self._tasks.append(asyncio.ensure_future(watch))
        self._started = True
        default = self._default()
        assert default is not None  # woken by `host.start`
        self.announce(
            {
                "type": "serve_started",
                "pid": os.getpid(),
                "session": cfg.session,
                "webhook": self.webhook.url if self.webhook else None,
                "smtp": self.smtp.port if self.smtp else None,
                "tools": default.loop.agent.registry.names(),
            }
        )

    def _open_shared(self, url: str) -> tuple[PostgresBusStore, HostIndex, LeaseStore]:
        """The stores on the shared PostgreSQL database, with this worker's leases. Requests to
        a human stay in this worker's state directory (docs/deployment.md)."""
        from heron._support.postgres import open_pool
        from heron.always_on.bus.postgres_store import PostgresBusStore
        from heron.always_on.channels.postgres_mail_inbound import PostgresThreadIndex
        from heron.always_on.postgres_sessions import PostgresHostIndex
        from heron.always_on.triggers.postgres_store import open_pg_trigger_stores
        from heron.sessions.postgres_leases import PostgresLeases
        from heron.sessions.postgres_store import PostgresSessionStore

        cfg = self.config
        pool = open_pool(url, max_size=16)
        if cfg.maildir is not None:
            self.maildir = Maildir(cfg.maildir)
            self.threads = PostgresThreadIndex(pool)
        self.bus = bus = PostgresBusStore(PostgresSessionStore(pool))
        self._trigger_stores = open_pg_trigger_stores(url, fence=bus.sessions)
        owner = f"{os.uname().nodename}:{os.getpid()}:{os.urandom(3).hex()}"
        return bus, PostgresHostIndex(pool), PostgresLeases(pool, owner=owner, ttl_s=cfg.lease_s)

    # -- requests to a human -----------------------------------------------------------------

    def _open_requests(self, approvals: ApprovalsConfig) -> None:
        cfg = self.config
        self.requests = store = SqliteRequestStore.open_dir(cfg.state_dir)
        announce = sys.stderr if cfg.approval_announce else None
        channels: list[Channel] = [ConsoleChannel(announce)]
        mail = self._mail_request_channel()
        if mail is not None:
            channels.append(mail)
        webhook = self._webhook_request_channel(approvals)
        if webhook is not None:
            channels.append(webhook)
        self.desk = RequestDesk(
            store,
            signer=DecisionSigner(DecisionKeyStore(cfg.state_dir)),
            config=approvals,
            channels=channels,
            approval_timeout_s=cfg.approval_timeout_s,
            clock=self.clock,
        )
        audit_db = self._executions_db()
        self._reporter = EndingReporter(
            store,
            sessions=self._session_agent,
            idempotency=IdempotencyStore(
                SqliteIdempotencyLedger(cfg.state_dir), clock=self.clock.time
            ),
            publish=self._publish_ending,
            audit=SqliteApprovalAudit(audit_db),
        )

    async def _tend_requests(self) -> None:
        """Passed deadlines first (an ended request is not escalated), then the escalation
        steps that fell due."""
        assert self.desk is not None
        self.desk.expire()
        await self.desk.escalate()

    def _executions_db(self) -> Any:
        """The state database's connection for the audits (approvals and executions), opened
        once."""
        if self._audit_db is None:
            self._audit_db = open_db(self.config.state_dir)
        return self._audit_db

    def _webhook_request_channel(self, approvals: ApprovalsConfig) -> WebhookRequestChannel | None:
        """Requests as signed webhooks to the webhook approvers (`[approvals.approvers]` or an
        escalation step), at their `webhook` URLs; their answers come back to `/approval`."""
        groups = [approvals.approvers, *(step.approvers for step in approvals.escalation)]
        if not any(group.get("webhook") for group in groups):
            return None
        assert self.messaging is not None and self.messaging.outbox.signer is not None
        messaging = self.config.messaging_config()
        addresses = {n: p.webhook for n, p in messaging.people.items() if p.webhook is not None}
        return WebhookRequestChannel(
            addresses,
            signer=self.messaging.outbox.signer,
            secret_env=messaging.channels.webhook.secret_env,
            timeout_s=messaging.channels.webhook.timeout_s,
            clock=self.clock,
        )

    def _mail_request_channel(self) -> MailRequestChannel | None:
        """Requests by mail to the `[approvals.approvers] mail` identities, when mail goes
        out (`[channels.mail]`); their replies are answered by `MailRequestAnswers`."""
        assert self.messaging is not None
        messaging = self.config.messaging_config()
        smtp = messaging.channels.mail
        if smtp is None:
            return None
        identity = self.messaging.outbox.identity
        config = MailConfig(
            host=smtp.host,
            port=smtp.port,
            from_addr=identity.address,
            username_env=smtp.username_env,
            password_env=smtp.password_env,
            starttls=smtp.starttls,
            timeout_s=smtp.timeout_s,
        )
        assert self.messaging.outbox.signer is not None  # `open_outbox` gives it one
        channel = MailRequestChannel(
            config, identity=identity, signer=self.messaging.outbox.signer, clock=self.clock
        )
        self._mail_requests = lambda desk: MailRequestAnswers(
            desk,
            channel,
            ledger=SqliteIdempotencyLedger(self.config.state_dir),
            trusted_authserv_ids=smtp.trusted_authserv_ids,
        )
        return channel

    def _awaiting(self, session: str) -> dict[str, str]:
        """The placeholders of the session's calls that wait on an open request."""
        assert self.requests is not None
        self.requests.expire(self.clock.time())
        return {
            call_id: awaiting_text(request, describe(request.approvers))
            for request in self.requests.list(statuses=ACTIVE_STATUSES, session=session)
            for call_id in request.call_ids
        }

    async def _session_agent(self, request: HumanRequest) -> SessionAgent | None:
        """The agent of the session an approved call waits in (woken if parked), and the
        session's event sink: the call runs and is seen like one of its turns."""
        assert self.host is not None
        if request.session not in self.host.awake:
            await self.host.wake(request.session)
        runtime = self.session(request.session)
        return None if runtime is None else SessionAgent(runtime.loop.agent, runtime.loop.sink)

    async def _publish_ending(self, ending: RequestEnding) -> None:
        """The outcome of a request, as a new event of the session that asked, bound to the
        call (stored once per request: the idempotency key)."""
        assert self.bus is not None
        request = ending.request
        by_person = request.answered_by not in (None, "policy")
        source: Literal["tool", "user", "system"] = "user" if by_person else "system"
        channel: Literal["async_tool", "cli", "system"] = "cli" if by_person else "system"
        if ending.kind == "tool.result":
            source, channel = "tool", "async_tool"
        event = BusEvent(
            kind=ending.kind,
            source=source,
            channel=channel,
            session=request.session,
            timestamp=timestamp(self.clock),
            content=EventContent(text=ending.text, data=dict(ending.data)),
            context=EventContext(call_id=request.call_id, related_task=request.id),
            idempotency_key=ending.idempotency_key,
        )
        await self.bus.publish(event)

    def _mail_answers(self) -> MailRequestAnswers | None:
        if self._mail_requests is None or self.desk is None:
            return None
        return self._mail_requests(self.desk)

    def _secret(self) -> bytes:
        secret = os.environ.get(self.config.webhook_secret_env, "")
        if not secret:
            raise ServeError(
                f"webhooks need a signing secret in ${self.config.webhook_secret_env}; "
                "heron never accepts unsigned webhooks"
            )
        return secret.encode()

    async def _build(self, name: str, writer: SessionWriter) -> ServedSession:
        """Everything one session runs while it is awake (`SessionHost` calls it at each
        wake)."""
        cfg = self.config
        stores = self._trigger_stores
        assert self.bus is not None and stores is not None and self._sandbox is not None
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
            policy=CommandPolicy(workspace=self._workspace),
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
            SqliteExecutionStore(self._executions_db()),
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
        return ServedSession(loop, triggers)

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

    def _standing_subscriptions(self, session: str) -> None:
        if not self.config.subscribe:
            return
        assert self._trigger_stores is not None
        store = Subscriptions(self._trigger_stores.subscriptions, session=session)
        have = {s.source for s in store.list() if s.note == _STANDING}
        for source in dict.fromkeys(self.config.subscribe):
            if source not in have:
                store.add(source, SubscriptionFilter(), note=_STANDING, now=self.clock.time())

    def _should_wake(self, event: BusEvent) -> bool:
        """The ingress's filter: the event's session becomes one of this server's (created on
        its first event), and its subscriptions decide."""
        assert self.host is not None and self._trigger_stores is not None
        self.host.claim(event.session)
        subscriptions = Subscriptions(self._trigger_stores.subscriptions, session=event.session)
        return subscriptions.should_wake(event)

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

    async def _start_ingress(self, secret: bytes) -> None:
        cfg = self.config
        assert self.bus is not None and self.host is not None  # opened by start()
        assert self.messaging is not None and self._trigger_stores is not None
        messaging, jobs = self.messaging, self._trigger_stores.jobs
        self._tasks.append(asyncio.ensure_future(messaging.run(cfg.poll_interval_s)))
        self._unwatch = self.bus.watch(lambda event: messaging.job_ended(event, jobs))
        if self.maildir is not None:
            mail_config = MailIngressConfig(
                session=cfg.session,
                contacts=cfg.contacts,
                scan_interval_s=cfg.mail_scan_interval_s,
            )
            self.mail = MaildirSource(
                self.maildir,
                self.bus.publish_many,
                mail_config,
                clock=self.clock,
                wake=self._should_wake,
                threads=self.threads,
                admit=self.host.admit,
                answers=MailAnswers(
                    messaging.outbox, requests=self._mail_answers(), clock=self.clock
                ),
            )
            self._tasks.append(asyncio.ensure_future(self.mail.run()))
        if cfg.smtp_port is not None:
            assert self.mail is not None  # checked by start(): SMTP needs a Maildir
            self.smtp = SmtpIngress(
                self.mail, host=cfg.smtp_host, port=cfg.smtp_port, domains=cfg.mail_domains
            )
            await _listen("mail (SMTP)", cfg.smtp_host, cfg.smtp_port, self.smtp.start)
        if cfg.webhook_port is not None:
            contacts = cfg.contacts
            routes = [
                WebhookRoute(
                    path="/github", adapter=GitHubAdapter(contacts=contacts), secret=secret
                ),
                WebhookRoute(path="/im", adapter=ImAdapter(contacts=contacts), secret=secret),
                WebhookRoute(path="/webhook", adapter=GenericAdapter(), secret=secret),
                WebhookRoute(
                    path="/card",
                    adapter=CardActionAdapter(messaging.outbox, clock=self.clock),
                    secret=secret,
                ),
            ]
            if self.desk is not None and messaging.outbox.signer is not None:
                answers = RequestAnswerAdapter(self.desk, messaging.outbox.signer)
                routes.append(WebhookRoute(path="/approval", adapter=answers, secret=secret))
            self.webhook = WebhookServer(
                routes,
                self.bus.publish,
                session=cfg.session,
                wake=self._should_wake,
                quiet_session=quiet_session_name,
                admit=self.host.admit,
                key_session=self.bus.key_session,
                clock=self.clock,
                host=cfg.webhook_host,
                port=cfg.webhook_port,
            )
            await _listen("webhooks", cfg.webhook_host, cfg.webhook_port, self.webhook.start)

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
        for server in (self.webhook, self.smtp):
            if server is not None:
                await server.aclose()
        self.webhook = self.smtp = None
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
        self.bus = self._trigger_stores = self.requests = None
        self.desk = self._reporter = self._audit_db = None
        if self._started:
            self._started = False
            self.announce({"type": "serve_stopped", "pid": os.getpid()})


_STANDING = "standing subscription of heron serve"


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


async def _listen(what: str, host: str, port: int, start: Callable[[], Any]) -> None:
    """Start a listener; a port in use (or any other refusal to bind) is a `ServeError`."""
    try:
        await start()
    except OSError as exc:
        # asyncio words it "error while attempting to bind on address …": say it once.
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise ServeError(f"cannot listen for {what} on {host}:{port}: {reason}") from None


async def _cancel_jobs(jobs: JobManager) -> None:
    for job in jobs.jobs():
        if not job.finished:
            await jobs.cancel(job.id)
