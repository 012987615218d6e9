"""`HeronServer`: the always-on agent behind `heron serve`.

One process owns one session of the durable event bus and everything that feeds it:

- the `EventDrivenAgent` (safe points, the three strategies, exactly-once consumption), over
  the agent `make_agent` builds run as a `HookedAgent`: the lifecycle hooks (`hooks`) run
  before and after every turn;
- the triggers (`heron.always_on.triggers.runtime.TriggerRuntime`): detached background
  jobs, shell monitors, timers, the heartbeat, system events and the subscriptions that gate
  inbound traffic;
- ingress: the webhook listener (`/github`, `/im`, `/webhook`, all signed with one secret) and
  the mail listener (SMTP into a Maildir, plus a periodic scan of `Maildir/new`). Inbound
  third-party events wake the agent only through a matching subscription; the others are kept
  quietly (mail in the Maildir, webhooks in the session `<session>/quiet`);
- the tools that act on that world: mail triage over the Maildir, the calendar check, user
  notifications, and the trigger tools;
- polling, so events other processes write into the database are found too.

The server is where `heron serve`'s stores are built: the SQLite bus with its session store,
the notification store and the triggers' stores, all in `<state_dir>/heron.db`.

A stop request (an interrupt the router turns into `cancel`) also cancels the running
background jobs: the engine cancels the tools it detached, jobs belong to this server.

Shutdown: the first SIGTERM or SIGINT stops taking new turns and lets the running one finish (up
to `shutdown_grace_s`), then cancels it; tools it detached are cancelled and that is published,
so the next start tells the model. Background jobs keep running and are re-attached by the next
start. A second signal cancels at once. Nothing is lost to a `kill -9` either: events are
durable before any sender is acknowledged, consumption is atomic, and a restart closes tool
calls the crash left open and answers what was left unanswered.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from heron._support.clock import Clock, RealClock
from heron.agent import Agent
from heron.always_on.bus.loop import EventDrivenAgent
from heron.always_on.bus.model import BusEvent
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.always_on.channels.adapters import GenericAdapter, GitHubAdapter, ImAdapter
from heron.always_on.channels.mail_inbound import MaildirSource, MailIngressConfig, SmtpIngress
from heron.always_on.channels.webhook import WebhookRoute, WebhookServer
from heron.always_on.hooks import HookedAgent, LifecycleHooks
from heron.always_on.jobs.manager import JobManager
from heron.always_on.triggers.runtime import TriggerConfig, TriggerRuntime
from heron.always_on.triggers.sqlite_store import open_trigger_stores
from heron.always_on.triggers.subscriptions import SubscriptionFilter, SubscriptionSource
from heron.collaboration.notify import NotifyConfig, notify_tools
from heron.collaboration.sqlite_store import SqliteNotificationStore
from heron.connectors.mail.maildir import Maildir, maildir_tools
from heron.errors import HeronError
from heron.safety.command_policy import CommandPolicy
from heron.sandbox import make_sandbox
from heron.sessions.lock import SessionInUseError, SessionLock
from heron.tools.definition import Tool
from heron.turn.events import EventSink, discard

Announce = Callable[[dict[str, Any]], None]
"""Receives the server's own lifecycle records (`serve_started`, `serve_stopped`)."""


class ServeError(HeronError, RuntimeError):
    """The server cannot start as configured; nothing was started."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ServeConfig:
    """What `heron serve` listens to and which tools it gives the agent."""

    state_dir: Path
    session: str = "default"
    poll_interval_s: float = 1.0
    """How often to look for events written by other processes."""
    workspace: Path | None = None
    """Where background jobs run; default `<state_dir>/workspace`."""
    sandbox: Literal["process", "bwrap"] = "process"
    triggers: TriggerConfig | None = None
    """Jobs, timers, heartbeat and system-event settings; `None`: the defaults."""
    subscribe: tuple[SubscriptionSource, ...] = ()
    """Channels whose every inbound event wakes the agent (a standing subscription each)."""
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
    notify_secret_env: str | None = None
    shutdown_grace_s: float = 10.0
    max_attempts: int = 3
    """Failed attempts to consume an event before it is quarantined (a dead letter)."""


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
    ) -> None:
        """`make_agent` receives the server's tools and returns the agent to run with them;
        the server runs it as a `HookedAgent`, so `hooks` (also the trigger runtime's start
        and stop hooks) run before and after every turn."""
        self.config = config
        self.hooks = hooks or LifecycleHooks()
        self._make_agent = make_agent
        self.sink = sink
        self.announce = announce or (lambda _record: None)
        self.clock: Clock = clock or RealClock()
        self.bus: SqliteBusStore | None = None
        self.notifications: SqliteNotificationStore | None = None
        self.triggers: TriggerRuntime | None = None
        self.maildir: Maildir | None = None
        self.mail: MaildirSource | None = None
        self.agent: EventDrivenAgent | None = None
        self.webhook: WebhookServer | None = None
        self.smtp: SmtpIngress | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._stopping_jobs: set[asyncio.Task[None]] = set()
        self._serving: asyncio.Task[None] | None = None
        self._grace: asyncio.TimerHandle | None = None
        self._unwatch: Callable[[], None] | None = None
        self._signals = 0
        self._started = False
        self._lock: SessionLock | None = None

    @property
    def jobs(self) -> JobManager | None:
        return self.triggers.jobs if self.triggers is not None else None

    # -- assembly ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the stores, build the agent, start triggers and listeners. Raises `ServeError`
        (and leaves nothing open) for an impossible configuration."""
        cfg = self.config
        secret = self._secret() if cfg.webhook_port is not None else b""
        if cfg.smtp_port is not None and cfg.maildir is None:
            raise ServeError("the SMTP listener needs a Maildir to deliver into (--maildir)")
        try:
            await self._open(secret)
        except BaseException:
            await self.aclose()  # e.g. a port in use: close what was opened
            raise

    async def _open(self, secret: bytes) -> None:
        cfg = self.config
        # One writer per session: a `heron run`/`heron chat` on this session is refused while
        # the server runs (and the kernel drops the lock if the server dies).
        lock = SessionLock(cfg.state_dir, cfg.session)
        try:
            lock.acquire()
        except SessionInUseError as exc:
            raise ServeError(str(exc)) from exc
        self._lock = lock
        workspace = (cfg.workspace or cfg.state_dir / "workspace").resolve()
        workspace.mkdir(parents=True, exist_ok=True)
        self.bus = bus = SqliteBusStore.open(cfg.state_dir)
        self.notifications = SqliteNotificationStore.open(cfg.state_dir)
        self.triggers = triggers = TriggerRuntime(
            state_dir=cfg.state_dir,
            stores=open_trigger_stores(cfg.state_dir),
            bus=bus,
            workspace=workspace,
            sandbox=make_sandbox(cfg.sandbox, workspace=workspace),
            policy=CommandPolicy(workspace=workspace),
            session=cfg.session,
            clock=self.clock,
            config=cfg.triggers,
            hooks=self.hooks,
        )
        self._standing_subscriptions(triggers)
        if cfg.maildir is not None:
            self.maildir = Maildir(cfg.maildir)
        agent = HookedAgent.around(self._make_agent([*self._tools(), *triggers.tools]), self.hooks)
        self.agent = EventDrivenAgent(
            agent,
            bus,
            bus.sessions,
            session=cfg.session,
            clock=self.clock,
            sink=triggers.sink(self.sink),
            poll_interval=cfg.poll_interval_s,
            max_attempts=cfg.max_attempts,
        )
        self._unwatch = bus.watch(self._on_published)
        await triggers.start()  # re-attach jobs, resume timers: what fell due meanwhile fires
        await self._start_ingress(secret)
        self._started = True
        self.announce(
            {
                "type": "serve_started",
                "pid": os.getpid(),
                "session": cfg.session,
                "webhook": self.webhook.url if self.webhook else None,
                "smtp": self.smtp.port if self.smtp else None,
                "tools": agent.registry.names(),
            }
        )

    def _secret(self) -> bytes:
        secret = os.environ.get(self.config.webhook_secret_env, "")
        if not secret:
            raise ServeError(
                f"webhooks need a signing secret in ${self.config.webhook_secret_env}; "
                "heron never accepts unsigned webhooks"
            )
        return secret.encode()

    def _standing_subscriptions(self, triggers: TriggerRuntime) -> None:
        have = {s.source for s in triggers.subscriptions.list() if s.note == _STANDING}
        for source in dict.fromkeys(self.config.subscribe):
            if source not in have:
                rule = SubscriptionFilter()
                triggers.subscriptions.add(source, rule, note=_STANDING, now=self.clock.time())

    def _tools(self) -> list[Tool]:
        assert self.notifications is not None  # start() opens the stores first
        cfg = self.config
        tools: list[Tool] = []
        if self.maildir is not None:
            tools += maildir_tools(self.maildir, from_addr=cfg.mail_from)
        if cfg.calendars:
            from heron.connectors.calendar import CalendarConfig, calendar_tools

            tools += calendar_tools(CalendarConfig.from_files(cfg.calendars), offer="availability")
        notify = NotifyConfig(
            webhook_url=cfg.notify_webhook, webhook_secret_env=cfg.notify_secret_env
        )
        return [*tools, *notify_tools(notify, self.notifications)]

    async def _start_ingress(self, secret: bytes) -> None:
        cfg = self.config
        assert self.agent is not None and self.triggers is not None  # built by start()
        wake = self.triggers.subscriptions.should_wake
        if self.maildir is not None:
            mail_config = MailIngressConfig(
                session=cfg.session,
                contacts=cfg.contacts,
                scan_interval_s=cfg.mail_scan_interval_s,
            )
            self.mail = MaildirSource(
                self.maildir, self.agent.publish_many, mail_config, clock=self.clock, wake=wake
            )
            self._tasks.append(asyncio.ensure_future(self.mail.run()))
        if cfg.smtp_port is not None:
            assert self.mail is not None  # checked by start(): SMTP needs a Maildir
            self.smtp = SmtpIngress(
                self.mail, host=cfg.smtp_host, port=cfg.smtp_port, domains=cfg.mail_domains
            )
            await self.smtp.start()
        if cfg.webhook_port is not None:
            contacts = cfg.contacts
            routes = [
                WebhookRoute(
                    path="/github", adapter=GitHubAdapter(contacts=contacts), secret=secret
                ),
                WebhookRoute(path="/im", adapter=ImAdapter(contacts=contacts), secret=secret),
                WebhookRoute(path="/webhook", adapter=GenericAdapter(), secret=secret),
            ]
            assert self.bus is not None
            self.webhook = WebhookServer(
                routes,
                self.bus.publish,
                session=cfg.session,
                wake=wake,
                quiet_session=f"{cfg.session}/quiet",
                clock=self.clock,
                host=cfg.webhook_host,
                port=cfg.webhook_port,
            )
            await self.webhook.start()

    def _on_published(self, event: BusEvent) -> None:
        """A stop request also stops the background jobs (see the module docstring); their
        ends are published as `job.exit` events."""
        jobs = self.jobs
        if self.agent is None or jobs is None or event.session != self.config.session:
            return
        route = self.agent.router.route_now(event)
        if route is None or route.strategy != "cancel" or route.cancel_mode != "cancel":
            return
        task = asyncio.ensure_future(_cancel_jobs(jobs))
        self._stopping_jobs.add(task)
        task.add_done_callback(self._stopping_jobs.discard)

    # -- running ----------------------------------------------------------------------------

    async def serve(self) -> None:
        """Process events until `stop()`, then shut down cleanly."""
        if self.agent is None:
            await self.start()
        assert self.agent is not None
        self._serving = asyncio.ensure_future(self.agent.serve())
        try:
            # `wait` neither raises when the grace period cancels the turn nor cancels it
            # when this coroutine is cancelled: `aclose` decides.
            await asyncio.wait([self._serving])
            if not self._serving.cancelled():
                self._serving.result()
        finally:
            await self.aclose()

    def stop(self) -> None:
        """Stop taking new turns; the running one may finish within the grace period."""
        if self.agent is not None:
            self.agent.stop()
        if self._grace is None:
            loop = asyncio.get_running_loop()
            self._grace = loop.call_later(self.config.shutdown_grace_s, self._cancel_turn)

    def _cancel_turn(self) -> None:
        if self._serving is not None and not self._serving.done():
            self._serving.cancel()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT: stop gracefully; the second one cancels the running turn at once."""
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
        """Close listeners, cancel detached tools (publishing that), stop the triggers (jobs
        keep running), close the stores."""
        if self._grace is not None:
            self._grace.cancel()
        for server in (self.webhook, self.smtp):
            if server is not None:
                await server.aclose()
        self.webhook = self.smtp = None
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._stopping_jobs, return_exceptions=True)
        self._tasks.clear()
        if self._serving is not None and not self._serving.done():
            self._serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._serving
        if self.agent is not None:
            await self.agent.aclose()
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        if self.triggers is not None:
            await self.triggers.aclose()
            self.triggers = None
        for store in (self.bus, self.notifications):
            if store is not None:
                store.close()
        self.bus = self.notifications = None
        if self._lock is not None:
            self._lock.release()  # last: everything that writes the session has stopped
            self._lock = None
        if self._started:
            self._started = False
            self.announce({"type": "serve_stopped", "pid": os.getpid()})


_STANDING = "standing subscription of heron serve"


async def _cancel_jobs(jobs: JobManager) -> None:
    for job in jobs.jobs():
        if not job.finished:
            await jobs.cancel(job.id)
