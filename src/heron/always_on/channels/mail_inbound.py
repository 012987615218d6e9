"""Inbound mail: a Maildir source and an SMTP listener, both ending as `mail.received` events.

`MaildirSource` watches `Maildir/new`: each file there becomes one `mail.received` event, and
once the event is durable the file moves to `cur/` (the Maildir way of saying "taken in").
Publish first, move second: a crash in between leaves the file in `new/`, the next scan
publishes it again, and the bus drops the duplicate by its idempotency key (`mail:<Message-ID>`,
or a digest of the raw message when it has none). So each mail is published exactly once, and
anything that delivers into the Maildir (fetchmail, an MDA, a test) feeds the agent.

Mail that no subscription wants (`wake`) is taken in without an event: it waits in the Maildir.

One bad mail never stops the intake: a file that cannot be read or turned into its event (parts
nested deeper than `maildir.MAX_MIME_DEPTH`, anything else that raises but a store failure) is
set aside on its own into the Maildir's `quarantine/`, logged once on `heron.alerts`, and the
rest of the scan is published. `run` logs a scan that fails as a whole and runs the next one.

Which session a mail is for (`route_session` of `heron.always_on.bus.routing`, with the thread
as the address): a reply goes to the session of the thread it answers — the first of its
`In-Reply-To` and `References` (newest first) that names a message this server received or
sent before (`ThreadIndex`, table `mail_threads`) — and a new thread to the default session.
Every mail taken in is recorded with its session, so the replies to it follow; so is mail the
agent sends (`record`).

`SmtpIngress` is a real SMTP server (aiosmtpd, on the caller's event loop): it refuses with
`554` a message that cannot be parsed (the sender keeps it), stores each accepted message in the
Maildir, then — once a source is `attach`ed — runs a scan before
answering `250`, so a sender that got `250` knows its mail is on the bus. `heron serve` starts
it with its intake, before the agent side (listener-first): a message accepted before the
source is attached is already durable in the Maildir, and the source's first scan publishes it.

Mail is third-party content: events say `source="contact"` for a sender address in `contacts`
and `"stranger"` otherwise — never `"user"` (a From header is trivially forged).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from email.message import EmailMessage, Message
from email.utils import getaddresses
from typing import Any, Protocol

from aiosmtpd.smtp import SMTP, Envelope, Session

from heron._support.clock import Clock, RealClock, timestamp
from heron.always_on.bus.model import BusEvent, EventContent, EventContext
from heron.always_on.bus.quarantine import describe_failure
from heron.always_on.bus.routing import SessionAddress, route_session
from heron.connectors.mail.maildir import (
    INBOX,
    Maildir,
    MailFormatError,
    MailRef,
    mail_summary,
    message_text,
    parse_message,
)
from heron.errors import StoreError
from heron.sessions.store import ConcurrentWriteError

log = logging.getLogger("heron.always_on.channels.mail")
alerts = logging.getLogger("heron.alerts")

Publish = Callable[[list[BusEvent]], Awaitable[list[bool]]]
"""Publishes a burst with one durable write (`BusStore.publish_many`)."""
Answers = Callable[[Message, BusEvent], Awaitable[BusEvent | None]]
"""Sees a mail and its event before it is published; returns the event to publish, or `None`."""

_MESSAGE_ID = re.compile(r"<[^<>\s]+>")


def thread_ids(message: Message) -> list[str]:
    """The Message-IDs a mail answers, most direct first: `In-Reply-To`, then `References`
    from the newest to the oldest."""
    replied = _MESSAGE_ID.findall(str(message.get("In-Reply-To", "")))
    references = _MESSAGE_ID.findall(str(message.get("References", "")))
    return list(dict.fromkeys([*replied, *reversed(references)]))


class ThreadIndex(Protocol):
    """Which session each mail heron received or sent belongs to, by Message-ID (synchronous;
    a back-end failure raises `heron.errors.StoreError`). The SQLite implementation is
    `heron.always_on.channels.sqlite_mail_inbound.SqliteThreadIndex`."""

    def session_of(self, message_ids: Sequence[str]) -> str | None:
        """The session of the first of `message_ids` that is known, or `None`."""
        ...

    def record(self, pairs: Iterable[tuple[str, str]], *, now: float) -> None:
        """Remember `(message_id, session)` pairs, atomically; a Message-ID keeps its first
        session, and an empty Message-ID is skipped."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class MailIngressConfig:
    """Where mail lands and how it becomes events."""

    session: str = "default"
    """The default session: where a mail that answers no known thread goes."""
    contacts: frozenset[str] = frozenset()
    """Sender addresses (any case) that count as known contacts."""
    scan_interval_s: float = 5.0
    """How often `MaildirSource.run` looks into `new/` for mail delivered by others."""
    max_text_chars: int = 8_000


class MaildirSource:
    """Publishes each new message of the INBOX once and moves it to `cur/`."""

    def __init__(
        self,
        box: Maildir,
        publish: Publish,
        config: MailIngressConfig | None = None,
        *,
        clock: Clock | None = None,
        wake: Callable[[BusEvent], bool] | None = None,
        threads: ThreadIndex | None = None,
        admit: Callable[[str], str | None] | None = None,
        answers: Answers | None = None,
    ) -> None:
        """`wake` (trigger subscriptions) decides which mail wakes the agent; the rest is only
        taken in: it stays in the Maildir for `list_mail`. `threads` routes replies to the
        session of their thread (without it, all mail goes to the default session); a
        thread's session that `admit` refuses falls back to the default. `answers` sees each
        mail with its event first and returns the event to publish instead (a reply to one
        of heron's messages: `heron.always_on.channels.answers.MailAnswers`), or `None` when
        the mail was an answer that needs no event."""
        self.box = box
        self.publish = publish
        self.config = config or MailIngressConfig()
        self.clock: Clock = clock or RealClock()
        self.contacts = frozenset(c.casefold() for c in self.config.contacts)
        self.wake = wake
        self.threads = threads
        self.admit = admit
        self.answers = answers
        self.published = 0
        self.duplicates = 0
        self.quiet = 0
        self.quarantined = 0
        self._lock = asyncio.Lock()

    async def scan(self) -> list[BusEvent]:
        """Take in everything in `new/`; returns the events that were new on the bus. A mail
        that cannot be taken in is set aside on its own (`set_aside`); the others go on."""
        async with self._lock:  # concurrent scans must not publish or move a file twice
            refs = self.box.new_messages(INBOX)
            if not refs:
                return []
            taken: list[MailRef] = []
            events: list[BusEvent] = []
            for ref in refs:
                try:
                    event = await self._take(ref)
                except (StoreError, ConcurrentWriteError):
                    raise  # the store failed, not the mail: the whole scan is tried again
                except Exception as exc:
                    self.set_aside(ref, exc)
                    continue
                taken.append(ref)
                if event is not None:
                    events.append(event)
            waking = [e for e in events if self.wake is None or self.wake(e)]
            stored = await self.publish(waking) if waking else []
            if self.threads is not None:  # before `new/` is left: a crash publishes again
                pairs = [(e.content.data.get("message_id") or "", e.session) for e in events]
                self.threads.record(pairs, now=self.clock.time())
            for ref in taken:
                self.box.take_in(ref)
        fresh = [e for e, new in zip(waking, stored, strict=True) if new]
        self.published += len(fresh)
        self.duplicates += len(waking) - len(fresh)
        self.quiet += len(events) - len(waking)
        return fresh

    async def _take(self, ref: MailRef) -> BusEvent | None:
        """The event for one mail (after `answers`), or `None` for an answer that needs none."""
        message = self.box.read(ref)
        event = self.event_for(ref, message)
        return event if self.answers is None else await self.answers(message, event)

    def set_aside(self, ref: MailRef, exc: BaseException) -> None:
        """Quarantine a mail that cannot be read or taken in: out of `new/` (so it never
        stops a scan again) into the Maildir's `quarantine/`, kept as it came; logged once.
        One that cannot be moved either (gone meanwhile) is left where it is: the rest of the
        scan goes on."""
        why = describe_failure(exc)
        try:
            place = self.box.quarantine(ref)
        except OSError as moving:
            alerts.error("mail %s cannot be taken in (%s) nor set aside: %s", ref.path, why, moving)
            return
        self.quarantined += 1
        alerts.error("mail %s cannot be taken in (%s): set aside as %s", ref.path.name, why, place)

    async def run(self) -> None:
        """Scan now and every `scan_interval_s` until cancelled. A scan that fails is logged
        and the next one runs: the loop never ends on its own."""
        while True:
            try:
                await self.scan()
            except Exception:
                log.exception(
                    "mail scan of %s failed; the next one in %g s",
                    self.box.root / "new",
                    self.config.scan_interval_s,
                )
            await self.clock.sleep(self.config.scan_interval_s)

    def event_for(self, ref: MailRef, message: EmailMessage | None = None) -> BusEvent:
        """The `mail.received` event for a stored message (`message`: it parsed already)."""
        if message is None:
            message = self.box.read(ref)
        summary = mail_summary(ref, message)
        summary.pop("flags")
        summary["folder"] = INBOX
        message_id = summary["message_id"]
        if message_id:
            key = f"mail:{message_id}"
        else:
            key = "mail:sha256:" + hashlib.sha256(ref.path.read_bytes()).hexdigest()[:32]
        references = str(message.get("References", "")).split()
        header = [
            f"From: {message.get('From', '')}",
            f"To: {message.get('To', '')}",
            f"Subject: {summary['subject']}",
            f"Date: {summary['date']}",
        ]
        body = message_text(message, self.config.max_text_chars)
        return BusEvent(
            kind="mail.received",
            source="contact" if summary["from"].casefold() in self.contacts else "stranger",
            channel="mail",
            session=self.session_for(message),
            timestamp=timestamp(self.clock),
            content=EventContent(text="\n".join([*header, "", body]), data=summary),
            context=EventContext(
                thread=references[0] if references else message_id,
                reply_to=message_id,
            ),
            idempotency_key=key,
        )

    def session_for(self, message: Message) -> str:
        """The session of the thread `message` answers, else the default session."""
        thread = None
        if self.threads is not None:
            thread = self.threads.session_of(thread_ids(message))
            if thread is not None and self.admit is not None and self.admit(thread) is not None:
                thread = None
        return route_session(SessionAddress(thread=thread), self.config.session)


class _Handler:
    """aiosmtpd hooks: which recipients to accept, and where DATA goes."""

    def __init__(self, box: Maildir, domains: frozenset[str]) -> None:
        self.box = box
        self.domains = domains
        self.source: MaildirSource | None = None
        """Scans after each delivery, once attached (`SmtpIngress.attach`)."""

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: Any
    ) -> str:
        domain = address.rpartition("@")[2].casefold()
        if self.domains and domain not in self.domains:
            return "550 5.7.1 relaying denied: not a local domain"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        raw = envelope.original_content or envelope.content
        if not isinstance(raw, bytes):
            return "554 5.6.0 message content unavailable"
        _, sender = (getaddresses([envelope.mail_from or ""]) or [("", "")])[0]
        received = f"Received: from {session.host_name or 'unknown'} ({session.peer!s})"
        trace = f"Return-Path: <{sender}>\r\n{received}\r\n\tby heron; envelope\r\n".encode()
        try:  # refused now, the sender still has it and bounces it: nothing is lost
            parse_message(raw)
        except Exception as exc:
            why = str(exc) if isinstance(exc, MailFormatError) else "it cannot be parsed"
            log.warning("mail from %s refused: %s", session.peer, describe_failure(exc))
            return f"554 5.6.0 message refused: {why}"
        key = self.box.deliver(trace + raw)
        if self.source is None:
            return f"250 2.0.0 stored as {key}"  # the source's first scan publishes it
        try:
            await self.source.scan()
        except Exception:
            # The message is safe on disk and the periodic scan publishes it; refusing now
            # would only make the sender deliver a second copy.
            log.exception("mail %s stored but not yet published", key)
        return f"250 2.0.0 stored as {key}"


class SmtpIngress:
    """An SMTP listener delivering into a `MaildirSource`'s Maildir. Loopback by default."""

    def __init__(
        self,
        box: Maildir,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        hostname: str = "heron.local",
        domains: frozenset[str] = frozenset(),
        max_size: int = 10 * 1024 * 1024,
    ) -> None:
        """`domains`: recipient domains accepted (empty: any, for a private loopback relay)."""
        self.box = box
        self.host = host
        self.port = port
        self.hostname = hostname
        self.max_size = max_size
        self._handler = _Handler(box, frozenset(d.casefold() for d in domains))
        self._server: asyncio.Server | None = None

    def attach(self, source: MaildirSource) -> None:
        """From now on each delivery is scanned by `source` (on the same Maildir) before the
        `250`."""
        if source.box.root != self.box.root:
            raise ValueError("the source watches another Maildir than the listener fills")
        self._handler.source = source

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: SMTP(
                self._handler,
                hostname=self.hostname,
                data_size_limit=self.max_size,
                loop=loop,
            ),
            self.host,
            self.port,
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
