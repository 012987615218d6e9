"""The intake of `heron serve`: what durably accepts events, up before the agent side.

`heron serve` starts listener-first, on the embedded SQLite store and on a shared PostgreSQL
one alike. The intake is the bus (with the host index and the triggers' stores on its
database) and the one HTTP front (`heron.always_on.http.HttpFront`)
with the signed webhooks — `/github`, `/im`, `/webhook`, and below each `/<session>` — and
this module imports only what those take. Once `listen` returns, a webhook is answered as
always: a 4xx for a bad request, `202` once the event is durable in the bus; `serve_accepting`
is announced then. The agent side (the other stores, the agents, providers, tools and MCP
clients, the gateway) is built afterwards, and its routes (`/card`, `/approval`, the
gateway's) are `mount`ed on the same front when it is up; until then a path not mounted yet is
answered 503 `starting`. `serve_started` says the sessions run (the default one is awake).

An event accepted before the sessions run waits in the bus exactly like one a crashed process
left behind: `SessionHost.start` wakes every session of its index with pending events, and
consumption is exactly-once. So nothing accepted is lost (a `kill -9` included: the event is
durable before the `202`) nor processed twice. What the intake does for the host before the
host exists is `claim`: a session an event is routed to is this server's from its first event —
in the host index, with its standing subscriptions, which `SessionHost.start` reads — and
once the host is built (`attach`), `claim` is the host's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from heron.always_on.bus.routing import check_hosted_name, hosting_refusal, quiet_session_name
from heron.always_on.serve_config import Announce, ServeConfig, ServeError
from heron.always_on.triggers.subscriptions import (
    SubscriptionFilter,
    Subscriptions,
    SubscriptionStore,
)

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

    from heron._support.clock import Clock
    from heron.always_on.bus.model import BusEvent
    from heron.always_on.bus.postgres_store import PostgresBusStore
    from heron.always_on.bus.sqlite_store import SqliteBusStore
    from heron.always_on.channels.mail_inbound import SmtpIngress
    from heron.always_on.channels.webhook import WebhookRoute, WebhookServer
    from heron.always_on.http import HttpFront
    from heron.always_on.sessions import HostIndex, SessionHost
    from heron.always_on.triggers.runtime import TriggerStores

_STANDING = "standing subscription of heron serve"


class Intake:
    """The bus and the HTTP front of a server, accepting events before its sessions run. See
    the module docstring."""

    def __init__(
        self,
        config: ServeConfig,
        *,
        bus: SqliteBusStore | PostgresBusStore,
        index: HostIndex,
        subscriptions: SubscriptionStore,
        clock: Clock,
        announce: Announce | None = None,
        triggers: TriggerStores | None = None,
    ) -> None:
        self.config = config
        self.bus = bus
        self.index = index
        self.subscriptions = subscriptions
        """The subscriptions' store (on the bus's connection with SQLite)."""
        self.triggers = triggers
        """On a shared store: the triggers' stores, `subscriptions` among them (the server
        takes them over with the bus)."""
        self.clock = clock
        self.announce = announce or (lambda _record: None)
        self.webhook: WebhookServer | None = None
        self.http: HttpFront | None = None
        self.smtp: SmtpIngress | None = None
        self.host: SessionHost | None = None
        """The sessions' host, once `attach`ed: `claim` is its own from then on."""
        self._claimed: set[str] = set()
        self._owned = True

    # -- which sessions ---------------------------------------------------------------------

    def admit(self, name: str) -> str | None:
        """Why `name` cannot be hosted here, or `None` (`SessionHost.admit`'s rule)."""
        cfg = self.config
        return hosting_refusal(name, default=cfg.session, allowed=cfg.sessions)

    def claim(self, name: str) -> None:
        """An event is routed to `name`: from now on it is one of this server's sessions."""
        if self.host is not None:
            self.host.claim(name)
            return
        if name in self._claimed:
            return
        problem = self.admit(name)
        if problem is not None:
            raise ValueError(problem)
        self.index.add(self.config.session, name, now=self.clock.time())
        self.standing(name)
        self._claimed.add(name)

    def should_wake(self, event: BusEvent) -> bool:
        """The ingress's filter: the event's session becomes one of this server's (created on
        its first event), and its subscriptions decide."""
        self.claim(event.session)
        return Subscriptions(self.subscriptions, session=event.session).should_wake(event)

    def standing(self, session: str) -> None:
        """The session's standing subscriptions (`heron serve --subscribe`), added once."""
        if not self.config.subscribe:
            return
        store = Subscriptions(self.subscriptions, session=session)
        have = {s.source for s in store.list() if s.note == _STANDING}
        for source in dict.fromkeys(self.config.subscribe):
            if source not in have:
                store.add(source, SubscriptionFilter(), note=_STANDING, now=self.clock.time())

    def attach(self, host: SessionHost) -> None:
        """The host is built: claims are its own from now on (it reads what was claimed
        before from the index when it starts)."""
        self.host = host

    # -- listening --------------------------------------------------------------------------

    async def listen(self, secret: bytes) -> None:
        """Start the SMTP listener (with `smtp_port`), the HTTP front on the webhook port and
        the HTTP port (one socket when they are the same) with the webhooks (when `secret` is
        set), then, with webhooks or SMTP, announce `serve_accepting`. A port that cannot be
        bound is a `ServeError`."""
        cfg = self.config
        if cfg.smtp_port is not None and cfg.maildir is not None:
            await self._listen_for_mail(cfg.maildir, cfg.smtp_port)
        webhook, http = await self._listen_http(secret)
        if self.webhook is not None or self.smtp is not None:
            # Without either, nothing is accepted before processing.
            accepting = {"type": "serve_accepting", "pid": os.getpid()}
            smtp = self.smtp.port if self.smtp is not None else None
            self.announce({**accepting, "webhook": webhook, "http": http, "smtp": smtp})

    async def _listen_for_mail(self, maildir: Path, port: int) -> None:
        """Mail accepted now is stored in the Maildir; the server's source, attached when the
        agent side is up, publishes it (`heron.always_on.channels.mail_inbound`)."""
        from heron.always_on.channels.mail_inbound import SmtpIngress
        from heron.connectors.mail.maildir import Maildir

        cfg = self.config
        smtp = SmtpIngress(
            Maildir(maildir), host=cfg.smtp_host, port=port, domains=cfg.mail_domains
        )
        try:
            await smtp.start()
        except OSError as exc:
            # asyncio words it "error while attempting to bind on address …": say it once.
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise ServeError(
                f"cannot listen for mail (SMTP) on {cfg.smtp_host}:{port}: {reason}"
            ) from None
        self.smtp = smtp

    async def _listen_http(self, secret: bytes) -> tuple[str | None, str | None]:
        """The HTTP front, if a port is configured; its webhook and gateway URLs."""
        from heron.always_on.http import HttpFront, ListenError

        cfg = self.config
        addresses: list[tuple[str, int]] = []
        names: list[str] = []
        for what, host, port in (
            ("webhooks", cfg.webhook_host, cfg.webhook_port),
            ("HTTP (the gateway)", cfg.http_host, cfg.http_port),
        ):
            if port is not None and (port == 0 or (host, port) not in addresses):
                addresses.append((host, port))
                names.append(what)
        if not addresses:
            return None, None
        routes: list[Any] = []
        if secret:
            self.webhook = self._webhooks(secret)
            routes += self.webhook.asgi_routes()
        # WebSockets are the gateway's, which only an HTTP port carries.
        front = HttpFront(
            routes,
            addresses=addresses,
            max_body=cfg.http_max_body,
            head_timeout=cfg.http_head_timeout_s,
            body_timeout=cfg.http_body_timeout_s,
            max_connections=cfg.http_max_connections,
            starting=True,
            websockets=cfg.http_port is not None,
        )
        try:
            await front.start()
        except ListenError as exc:
            raise ServeError(
                f"cannot listen for {names[exc.index]} on {exc.address}: {exc.reason}"
            ) from None
        self.http = front
        webhook = None
        if self.webhook is not None and cfg.webhook_port is not None:
            self.webhook.port = front.addresses[0][1]
            webhook = self.webhook.url
        http = front.url(len(front.addresses) - 1) if cfg.http_port is not None else None
        return webhook, http

    def _webhooks(self, secret: bytes) -> WebhookServer:
        from heron.always_on.channels.adapters import GenericAdapter, GitHubAdapter, ImAdapter
        from heron.always_on.channels.webhook import WebhookRoute, WebhookServer

        cfg = self.config
        contacts = cfg.contacts
        return WebhookServer(
            [
                WebhookRoute(
                    path="/github", adapter=GitHubAdapter(contacts=contacts), secret=secret
                ),
                WebhookRoute(path="/im", adapter=ImAdapter(contacts=contacts), secret=secret),
                WebhookRoute(path="/webhook", adapter=GenericAdapter(), secret=secret),
            ],
            self.bus.publish,
            session=cfg.session,
            wake=self.should_wake,
            quiet_session=quiet_session_name,
            admit=self.admit,
            key_session=self.bus.key_session,
            clock=self.clock,
            host=cfg.webhook_host,
            port=cfg.webhook_port or 0,
            max_body=cfg.http_max_body,
        )

    def mount(self, webhooks: list[WebhookRoute], routes: list[BaseRoute]) -> None:
        """The agent side is up: its webhook routes and its other routes join the front, and
        a path none takes is 404 from now on."""
        if self.http is None:
            return
        added = self.webhook.add_routes(webhooks) if self.webhook is not None else []
        self.http.mount([*added, *routes])

    # -- closing ----------------------------------------------------------------------------

    def hand_over(self) -> None:
        """The server owns the bus and the front from now on, and closes them."""
        self._owned = False

    async def aclose(self) -> None:
        """Close the front, then the bus (unless `hand_over` gave them to the server)."""
        if not self._owned:
            return
        self._owned = False
        if self.http is not None:
            await self.http.aclose()
        if self.smtp is not None:
            await self.smtp.aclose()
        if self.triggers is not None:
            self.triggers.close()
        self.bus.close()


async def open_intake(
    config: ServeConfig, *, secret: bytes, clock: Clock, announce: Announce | None = None
) -> Intake:
    """The intake, listening: on `<state_dir>/heron.db` (SQLite: the bus, the host index and
    the subscriptions on one connection), or on the shared PostgreSQL database of
    `store_url`. Raises `ServeError` (and leaves nothing open) when the default session is
    held by another process or a port cannot be bound; a shared store that cannot be opened
    raises `StoreError`."""
    if config.store_url is not None:
        intake = _shared_intake(config, config.store_url, clock, announce)
    else:
        intake = _local_intake(config, clock, announce)
    try:
        await intake.listen(secret)
    except BaseException:
        await intake.aclose()
        raise
    return intake


def _local_intake(config: ServeConfig, clock: Clock, announce: Announce | None) -> Intake:
    from heron.always_on.bus.sqlite_store import SqliteBusStore
    from heron.always_on.sqlite_sessions import SqliteHostIndex
    from heron.always_on.triggers.sqlite_subscriptions import SqliteSubscriptionStore
    from heron.sessions.lock import SessionInUseError, SessionLock

    bus = SqliteBusStore.open(config.state_dir)
    conn = bus.sessions.conn
    try:
        # A second server on the same default session fails before it listens: a look at
        # the lock, released at once (the host takes it for good when it wakes the session).
        probe = SessionLock(config.state_dir, config.session)
        try:
            probe.acquire()
        except SessionInUseError as exc:
            raise ServeError(str(exc)) from exc
        probe.release()
        return Intake(
            config,
            bus=bus,
            index=SqliteHostIndex(conn),
            subscriptions=SqliteSubscriptionStore(conn),
            clock=clock,
            announce=announce,
        )
    except BaseException:
        bus.close()
        raise


def _shared_intake(
    config: ServeConfig, url: str, clock: Clock, announce: Announce | None
) -> Intake:
    """The bus and the host index on one pool to `url`, the triggers' stores (subscriptions
    among them) on a pool of their own, as the server goes on to use them."""
    from heron._support.postgres import open_pool
    from heron.always_on.bus.postgres_store import PostgresBusStore
    from heron.always_on.postgres_sessions import PostgresHostIndex
    from heron.always_on.triggers.postgres_store import open_pg_trigger_stores
    from heron.sessions.postgres_store import PostgresSessionStore

    pool = open_pool(url, max_size=16)
    bus = PostgresBusStore(PostgresSessionStore(pool))
    try:
        triggers = open_pg_trigger_stores(url, fence=bus.sessions)
    except BaseException:
        bus.close()
        raise
    return Intake(
        config,
        bus=bus,
        index=PostgresHostIndex(pool),
        subscriptions=triggers.subscriptions,
        clock=clock,
        announce=announce,
        triggers=triggers,
    )


def check_serve(config: ServeConfig) -> bytes:
    """What `heron serve` can refuse before it opens anything: the webhooks' signing secret
    (from `webhook_secret_env`, returned; required with a webhook port: heron never accepts
    unsigned webhooks), SMTP without a Maildir, a session name it cannot host. Raises
    `ServeError`."""
    secret = os.environ.get(config.webhook_secret_env, "")
    if not secret and config.webhook_port is not None:
        raise ServeError(
            f"webhooks need a signing secret in ${config.webhook_secret_env}; "
            "heron never accepts unsigned webhooks"
        )
    if config.smtp_port is not None and config.maildir is None:
        raise ServeError("the SMTP listener needs a Maildir to deliver into (--maildir)")
    for name in (config.session, *(config.sessions or ())):
        try:
            check_hosted_name(name)
        except ValueError as exc:
            raise ServeError(str(exc)) from None
    return secret.encode()
