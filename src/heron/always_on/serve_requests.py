"""Requests to a human in `heron serve`: the store and desk it opens, with the console and
mail channels and any the server was given (`HeronServer.request_channels`: the gateway's),
and the outcome of a request published to the session that asked."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Literal

from heron._support.clock import timestamp
from heron._support.vocabulary import ACTIVE_STATUSES
from heron.always_on.bus.model import BusEvent, EventContent, EventContext
from heron.always_on.bus.routing import AGENT_SEGMENT
from heron.collaboration.mail_requests import MailRequestAnswers, MailRequestChannel
from heron.collaboration.webhook_requests import WebhookRequestChannel
from heron.connectors.mail.send import MailConfig
from heron.humans.approvers import describe
from heron.humans.config import ApprovalsConfig
from heron.humans.console import ConsoleChannel
from heron.humans.desk import Channel, RequestDesk
from heron.humans.outcomes import EndingReporter, RequestEnding, SessionAgent, awaiting_text
from heron.humans.signing import DecisionSigner
from heron.humans.sqlite_store import SqliteRequestStore
from heron.humans.store import HumanRequest
from heron.safety.idempotency import IdempotencyLedger, IdempotencyStore
from heron.safety.sqlite_idempotency import SqliteIdempotencyLedger
from heron.turn.signing_keys import key_store

if TYPE_CHECKING:
    from heron.always_on.server import HeronServer
    from heron.humans.postgres_store import PostgresRequestStore


def open_requests(server: HeronServer, approvals: ApprovalsConfig) -> None:
    """The durable requests of the server: store, desk with its channels, the reporter of
    their endings — in the state directory, or on the shared store (`server.shared`), where
    any worker and `heron approvals --store` list and answer them and the worker that holds
    the request's session runs the approved call."""
    cfg = server.config
    shared = server.shared
    store: SqliteRequestStore | PostgresRequestStore
    store = shared.requests() if shared is not None else SqliteRequestStore.open_dir(cfg.state_dir)
    server.requests = store
    announce = sys.stderr if cfg.approval_announce else None
    channels: list[Channel] = [ConsoleChannel(announce), *server.request_channels]
    mail = _mail_request_channel(server)
    if mail is not None:
        channels.append(mail)
    webhook = _webhook_request_channel(server, approvals)
    if webhook is not None:
        channels.append(webhook)
    server.desk = RequestDesk(
        store,
        signer=DecisionSigner(
            key_store("decision", state_dir=cfg.state_dir, store_url=cfg.store_url)
        ),
        config=approvals,
        channels=channels,
        approval_timeout_s=cfg.approval_timeout_s,
        clock=server.clock,
    )
    server._reporter = EndingReporter(
        store,
        sessions=lambda request: session_agent(server, request),
        idempotency=IdempotencyStore(_ledger(server), clock=server.clock.time),
        publish=lambda ending: publish_ending(server, ending),
        audit=server.approval_audit(),
        claims=(lambda request: holds(server, request)) if shared is not None else None,
    )


def _ledger(server: HeronServer) -> IdempotencyLedger:
    """The idempotency ledger of approved calls and mail answers: one for every worker on a
    shared store, so a call approved once runs once whichever worker reports it."""
    if server.shared is not None:
        return server.shared.ledger()
    return SqliteIdempotencyLedger(server.config.state_dir)


async def holds(server: HeronServer, request: HumanRequest) -> bool:
    """On a shared store: whether this worker holds the request's session (a sub-agent's:
    its root session, where the child runs), waking it when no worker does."""
    assert server.host is not None
    host = server.host
    session = request.session.partition(AGENT_SEGMENT)[0]
    if session in host.awake:
        return True
    if host.admit(session) is not None:
        return False
    host.claim(session)
    return await host.wake(session)  # False: another worker's lease holds it


def _webhook_request_channel(
    server: HeronServer, approvals: ApprovalsConfig
) -> WebhookRequestChannel | None:
    """Requests as signed webhooks to the webhook approvers (`[approvals.approvers]` or an
    escalation step), at their `webhook` URLs; their answers come back to `/approval`."""
    groups = [approvals.approvers, *(step.approvers for step in approvals.escalation)]
    if not any(group.get("webhook") for group in groups):
        return None
    assert server.messaging is not None and server.messaging.outbox.signer is not None
    messaging = server.config.messaging_config()
    addresses = {n: p.webhook for n, p in messaging.people.items() if p.webhook is not None}
    return WebhookRequestChannel(
        addresses,
        signer=server.messaging.outbox.signer,
        secret_env=messaging.channels.webhook.secret_env,
        timeout_s=messaging.channels.webhook.timeout_s,
        clock=server.clock,
    )


def _mail_request_channel(server: HeronServer) -> MailRequestChannel | None:
    """Requests by mail to the `[approvals.approvers] mail` identities, when mail goes
    out (`[channels.mail]`); their replies are answered by `MailRequestAnswers`."""
    assert server.messaging is not None
    messaging = server.config.messaging_config()
    smtp = messaging.channels.mail
    if smtp is None:
        return None
    identity = server.messaging.outbox.identity
    config = MailConfig(
        host=smtp.host,
        port=smtp.port,
        from_addr=identity.address,
        username_env=smtp.username_env,
        password_env=smtp.password_env,
        starttls=smtp.starttls,
        timeout_s=smtp.timeout_s,
    )
    assert server.messaging.outbox.signer is not None  # `open_outbox` gives it one
    channel = MailRequestChannel(
        config, identity=identity, signer=server.messaging.outbox.signer, clock=server.clock
    )
    server._mail_requests = lambda desk: MailRequestAnswers(
        desk,
        channel,
        ledger=_ledger(server),
        trusted_authserv_ids=smtp.trusted_authserv_ids,
    )
    return channel


async def publish_ending(server: HeronServer, ending: RequestEnding) -> None:
    """The outcome of a request, as a new event of the session that asked, bound to the
    call (stored once per request: the idempotency key)."""
    assert server.bus is not None
    request = ending.request
    if AGENT_SEGMENT in request.session and (
        server.subagents is None or server.subagents.runtime.agent_of(request.session) is None
    ):
        return  # the sub-agent that asked has ended: its session is closed, nobody reads it
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
        timestamp=timestamp(server.clock),
        content=EventContent(text=ending.text, data=dict(ending.data)),
        context=EventContext(call_id=request.call_id, related_task=request.id),
        idempotency_key=ending.idempotency_key,
    )
    await server.bus.publish(event)


def mail_answers(server: HeronServer) -> MailRequestAnswers | None:
    if server._mail_requests is None or server.desk is None:
        return None
    return server._mail_requests(server.desk)


def awaiting(server: HeronServer, session: str) -> dict[str, str]:
    """The placeholders of the session's calls that wait on an open request."""
    assert server.requests is not None
    server.requests.expire(server.clock.time())
    return {
        call_id: awaiting_text(request, describe(request.approvers))
        for request in server.requests.list(statuses=ACTIVE_STATUSES, session=session)
        for call_id in request.call_ids
    }


async def tend_requests(server: HeronServer) -> None:
    """Passed deadlines first (an ended request is not escalated), then the escalation
    steps that fell due."""
    assert server.desk is not None
    server.desk.expire()
    await server.desk.escalate()


async def session_agent(server: HeronServer, request: HumanRequest) -> SessionAgent | None:
    """The agent of the session an approved call waits in (woken if parked), and the
    session's event sink: the call runs and is seen like one of its turns. A sub-agent's call
    runs through the running child's own agent (`None` once it has ended)."""
    assert server.host is not None
    if AGENT_SEGMENT in request.session:
        child = server.subagents.runtime.agent_of(request.session) if server.subagents else None
        return None if child is None else SessionAgent(child)
    if request.session not in server.host.awake:
        await server.host.wake(request.session)
    runtime = server.session(request.session)
    return None if runtime is None else SessionAgent(runtime.loop.agent, runtime.loop.sink)
