"""Ingress of `heron serve`: the mail listener and scan, and the one HTTP front
(`heron.always_on.http.HttpFront`) carrying the signed webhooks and every route mounted on the
server (`HeronServer.http_routes`: the gateway's API and console, an OAuth callback)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from heron.always_on.bus.routing import quiet_session_name
from heron.always_on.channels.adapters import GenericAdapter, GitHubAdapter, ImAdapter
from heron.always_on.channels.answers import (
    CardActionAdapter,
    MailAnswers,
    RequestAnswerAdapter,
)
from heron.always_on.channels.mail_inbound import MaildirSource, MailIngressConfig, SmtpIngress
from heron.always_on.channels.webhook import WebhookRoute, WebhookServer
from heron.always_on.serve_config import ServeError
from heron.always_on.serve_requests import mail_answers

if TYPE_CHECKING:
    from heron.always_on.server import HeronServer


async def start_ingress(server: HeronServer, secret: bytes) -> None:
    """Start what feeds the server's sessions from outside: the outbox's loop, the mail
    listener and scan, and the HTTP front (webhooks and the routes mounted on it)."""
    cfg = server.config
    assert server.bus is not None and server.host is not None  # opened by start()
    assert server.messaging is not None and server._trigger_stores is not None
    messaging, jobs = server.messaging, server._trigger_stores.jobs
    server._tasks.append(asyncio.ensure_future(messaging.run(cfg.poll_interval_s)))
    server._unwatch = server.bus.watch(lambda event: messaging.job_ended(event, jobs))
    if server.maildir is not None:
        mail_config = MailIngressConfig(
            session=cfg.session,
            contacts=cfg.contacts,
            scan_interval_s=cfg.mail_scan_interval_s,
        )
        server.mail = MaildirSource(
            server.maildir,
            server.bus.publish_many,
            mail_config,
            clock=server.clock,
            wake=server._should_wake,
            threads=server.threads,
            admit=server.host.admit,
            answers=MailAnswers(
                messaging.outbox, requests=mail_answers(server), clock=server.clock
            ),
        )
        server._tasks.append(asyncio.ensure_future(server.mail.run()))
    if cfg.smtp_port is not None:
        assert server.mail is not None  # checked by start(): SMTP needs a Maildir
        server.smtp = SmtpIngress(
            server.mail, host=cfg.smtp_host, port=cfg.smtp_port, domains=cfg.mail_domains
        )
        await _listen("mail (SMTP)", cfg.smtp_host, cfg.smtp_port, server.smtp.start)
    await _start_http(server, secret)


async def _start_http(server: HeronServer, secret: bytes) -> None:
    """One front for the webhooks and the mounted routes, on the webhook port and the HTTP
    port (one socket when they are the same)."""
    from heron.always_on.http import HttpFront, ListenError

    cfg = server.config
    assert server.bus is not None and server.host is not None and server.messaging is not None
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
        return
    routes: list[Any] = []
    if secret:
        contacts = cfg.contacts
        server.webhook = WebhookServer(
            [
                WebhookRoute(
                    path="/github", adapter=GitHubAdapter(contacts=contacts), secret=secret
                ),
                WebhookRoute(path="/im", adapter=ImAdapter(contacts=contacts), secret=secret),
                WebhookRoute(path="/webhook", adapter=GenericAdapter(), secret=secret),
                WebhookRoute(
                    path="/card",
                    adapter=CardActionAdapter(server.messaging.outbox, clock=server.clock),
                    secret=secret,
                ),
                *_answer_route(server, secret),
            ],
            server.bus.publish,
            session=cfg.session,
            wake=server._should_wake,
            quiet_session=quiet_session_name,
            admit=server.host.admit,
            key_session=server.bus.key_session,
            clock=server.clock,
            host=cfg.webhook_host,
            port=cfg.webhook_port or 0,
            max_body=cfg.http_max_body,
        )
        routes += server.webhook.asgi_routes()
    routes += server.http_routes
    server.http = front = HttpFront(routes, addresses=addresses, max_body=cfg.http_max_body)
    try:
        await front.start()
    except ListenError as exc:
        raise ServeError(
            f"cannot listen for {names[exc.index]} on {exc.address}: {exc.reason}"
        ) from None
    if server.webhook is not None and cfg.webhook_port is not None:
        server.webhook.port = front.addresses[0][1]


def _answer_route(server: HeronServer, secret: bytes) -> list[WebhookRoute]:
    """`/approval`: the answers of webhook approvers (signed with the request's token)."""
    assert server.messaging is not None
    signer = server.messaging.outbox.signer
    if server.desk is None or signer is None:
        return []
    answers = RequestAnswerAdapter(server.desk, signer)
    return [WebhookRoute(path="/approval", adapter=answers, secret=secret)]


async def _listen(what: str, host: str, port: int, start: Callable[[], Any]) -> None:
    """Start a listener; a port in use (or any other refusal to bind) is a `ServeError`."""
    try:
        await start()
    except OSError as exc:
        # asyncio words it "error while attempting to bind on address …": say it once.
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise ServeError(f"cannot listen for {what} on {host}:{port}: {reason}") from None
