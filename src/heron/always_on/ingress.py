"""Ingress of `heron serve` once its agent side is up: the mail listener and scan, and the
routes that join the intake's HTTP front (`heron.always_on.intake`, already listening with the
signed webhooks): `/card`, `/approval` and every route mounted on the server
(`HeronServer.http_routes`: the gateway's API and console, an OAuth callback)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from heron.always_on.channels.answers import (
    CardActionAdapter,
    MailAnswers,
    RequestAnswerAdapter,
)
from heron.always_on.channels.mail_inbound import MaildirSource, MailIngressConfig
from heron.always_on.channels.webhook import WebhookRoute
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
    if server.smtp is not None:  # listening since the intake: from now on it publishes too
        assert server.mail is not None  # checked by start(): SMTP needs a Maildir
        server.smtp.attach(server.mail)
    _mount(server, secret)


def _mount(server: HeronServer, secret: bytes) -> None:
    """The routes that need the agent side join the intake's front: `/card`, `/approval`
    and the mounted ones (`HeronServer.http_routes`)."""
    assert server.intake is not None and server.messaging is not None
    webhooks: list[WebhookRoute] = []
    if secret:
        card = CardActionAdapter(server.messaging.outbox, clock=server.clock)
        webhooks = [WebhookRoute(path="/card", adapter=card, secret=secret)]
        webhooks += _answer_route(server, secret)
    server.intake.mount(webhooks, server.http_routes)


def _answer_route(server: HeronServer, secret: bytes) -> list[WebhookRoute]:
    """`/approval`: the answers of webhook approvers (signed with the request's token)."""
    assert server.messaging is not None
    signer = server.messaging.outbox.signer
    if server.desk is None or signer is None:
        return []
    answers = RequestAnswerAdapter(server.desk, signer)
    return [WebhookRoute(path="/approval", adapter=answers, secret=secret)]
