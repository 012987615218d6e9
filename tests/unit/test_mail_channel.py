"""Inbound mail over real SMTP (aiosmtpd on 127.0.0.1) and from a Maildir, onto the bus."""

from __future__ import annotations

import asyncio
import logging
import smtplib
from collections.abc import AsyncIterator, Iterator
from email.message import EmailMessage
from pathlib import Path

import pytest

from heron._support.clock import FakeClock
from heron._support.state import open_db
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.always_on.channels.mail_inbound import MaildirSource, MailIngressConfig, SmtpIngress
from heron.always_on.channels.sqlite_mail_inbound import SqliteThreadIndex
from heron.always_on.triggers.sqlite_store import SqliteSubscriptionStore
from heron.always_on.triggers.subscriptions import SubscriptionFilter, Subscriptions
from heron.connectors.mail.maildir import (
    MAX_MIME_DEPTH,
    Maildir,
    MailFormatError,
    parse_message,
)
from support.waiting import until

BOUND = 5.0


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[SqliteBusStore]:
    store = SqliteBusStore.open(tmp_path / "state")
    yield store
    store.close()


@pytest.fixture
def box(tmp_path: Path) -> Maildir:
    return Maildir(tmp_path / "Maildir")


@pytest.fixture
def source(box: Maildir, bus: SqliteBusStore) -> MaildirSource:
    config = MailIngressConfig(session="main", contacts=frozenset({"Ana@Example.com"}))
    return MaildirSource(box, bus.publish_many, config)


@pytest.fixture
async def smtp(source: MaildirSource) -> AsyncIterator[SmtpIngress]:
    ingress = SmtpIngress(source.box, domains=frozenset({"home.test"}))
    ingress.attach(source)
    await ingress.start()
    yield ingress
    await ingress.aclose()


def message(
    subject: str = "Hello", sender: str = "ana@example.com", message_id: str | None = "<a1@x>"
) -> bytes:
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = "me@home.test"
    msg["Subject"] = subject
    if message_id:
        msg["Message-ID"] = message_id
    msg.set_content(f"Body of {subject}.")
    return msg.as_bytes()


async def send(port: int, raw: bytes, to: str = "me@home.test") -> None:
    def work() -> None:
        with smtplib.SMTP("127.0.0.1", port, local_hostname="client.test", timeout=BOUND) as s:
            s.sendmail("ana@example.com", [to], raw)

    await asyncio.to_thread(work)


def files(box: Maildir, sub: str) -> list[str]:
    return sorted(p.name for p in (box.root / sub).iterdir())


async def test_mail_sent_over_smtp_is_stored_and_on_the_bus_before_the_sender_hears_250(
    smtp: SmtpIngress, box: Maildir, bus: SqliteBusStore
) -> None:
    await send(smtp.port, message("Meeting on Friday"))
    [event] = await bus.pending("main")  # no waiting: 250 came after the publish
    assert (event.kind, event.channel, event.source) == ("mail.received", "mail", "contact")
    assert event.idempotency_key == "mail:<a1@x>"
    data = event.content.data
    assert data["subject"] == "Meeting on Friday" and data["from"] == "ana@example.com"
    assert files(box, "new") == [] and files(box, "cur") == [f"{data['id']}:2,"]
    assert "Body of Meeting on Friday." in event.content.text
    assert event.context.reply_to == "<a1@x>"
    stored = (box.root / "cur" / f"{data['id']}:2,").read_bytes()
    assert stored.startswith(b"Return-Path: <ana@example.com>\r\nReceived: from client.test")


async def test_mail_accepted_before_a_source_is_attached_waits_in_the_maildir_for_its_scan(
    box: Maildir, source: MaildirSource, bus: SqliteBusStore
) -> None:
    # `heron serve` listens for mail before its agent side (and the source) is up.
    early = SmtpIngress(Maildir(box.root), domains=frozenset({"home.test"}))
    await early.start()
    try:
        await send(early.port, message("Before the agent"))
        assert len(files(box, "new")) == 1 and await bus.pending("main") == []
        with pytest.raises(ValueError, match="another Maildir"):
            early.attach(MaildirSource(Maildir(box.root / "elsewhere"), bus.publish_many))
        early.attach(source)
        [first] = await source.scan()  # what the source's run does first
        assert first.content.data["subject"] == "Before the agent"
        await send(early.port, message("After", message_id="<a2@x>"))
        assert [e.content.data["subject"] for e in await bus.pending("main")] == [
            "Before the agent",
            "After",
        ]
        assert files(box, "new") == []
    finally:
        await early.aclose()


async def test_the_same_message_id_delivered_twice_is_published_once(
    smtp: SmtpIngress, source: MaildirSource, bus: SqliteBusStore
) -> None:
    await send(smtp.port, message())
    await send(smtp.port, message())
    assert len(await bus.pending("main")) == 1
    assert (source.published, source.duplicates) == (1, 1)


async def test_a_sender_not_in_contacts_is_a_stranger(
    smtp: SmtpIngress, bus: SqliteBusStore
) -> None:
    await send(smtp.port, message(sender="Eve <eve@evil.test>", message_id="<e1@x>"))
    [event] = await bus.pending("main")
    assert event.source == "stranger" and event.third_party


async def test_recipients_outside_the_local_domains_are_refused(
    smtp: SmtpIngress, box: Maildir, bus: SqliteBusStore
) -> None:
    with pytest.raises(smtplib.SMTPRecipientsRefused):
        await send(smtp.port, message(), to="someone@elsewhere.test")
    assert files(box, "new") == files(box, "cur") == []
    assert await bus.pending("main") == []


async def test_mail_dropped_into_the_maildir_by_another_program_is_taken_in_by_a_scan(
    source: MaildirSource, box: Maildir, bus: SqliteBusStore
) -> None:
    key = box.deliver(message("From fetchmail", message_id="<f1@x>"))
    assert files(box, "new") == [key]
    [event] = await source.scan()
    assert event.content.data["id"] == key and files(box, "cur") == [f"{key}:2,"]
    assert await source.scan() == []
    assert len(await bus.pending("main")) == 1


async def test_a_crash_between_publish_and_move_does_not_publish_twice(
    source: MaildirSource, box: Maildir, bus: SqliteBusStore
) -> None:
    key = box.deliver(message(message_id="<c1@x>"))
    # The first process published, then died before moving the file to cur/.
    [ref] = box.new_messages()
    assert await bus.publish(source.event_for(ref))
    assert await source.scan() == []
    assert files(box, "new") == [] and files(box, "cur") == [f"{key}:2,"]
    assert len(await bus.pending("main")) == 1


async def test_a_mail_without_a_message_id_is_keyed_by_its_content(
    source: MaildirSource, box: Maildir, bus: SqliteBusStore
) -> None:
    box.deliver(message(message_id=None))
    [event] = await source.scan()
    assert event.idempotency_key is not None
    assert event.idempotency_key.startswith("mail:sha256:")


async def test_the_periodic_scan_follows_the_clock(box: Maildir, bus: SqliteBusStore) -> None:
    clock = FakeClock()
    source = MaildirSource(
        box, bus.publish_many, MailIngressConfig(session="main", scan_interval_s=5), clock=clock
    )
    published = asyncio.Event()
    bus.watch(lambda _: published.set())
    task = asyncio.create_task(source.run())
    try:
        await until(lambda: clock.sleepers > 0, "the first scan to end in a sleep")
        box.deliver(message(message_id="<p1@x>"))
        assert await bus.pending("main") == []
        clock.advance(5)
        await asyncio.wait_for(published.wait(), BOUND)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert [e.idempotency_key for e in await bus.pending("main")] == ["mail:<p1@x>"]


async def test_mail_no_subscription_wants_waits_in_the_maildir_without_an_event(
    box: Maildir, bus: SqliteBusStore, tmp_path: Path
) -> None:
    conn = open_db(tmp_path / "state")
    try:
        subscriptions = Subscriptions(SqliteSubscriptionStore(conn), session="main")
        subscriptions.add("mail", SubscriptionFilter(sender="*@example.com"), now=0.0)
        source = MaildirSource(
            box, bus.publish_many, MailIngressConfig(session="main"), wake=subscriptions.should_wake
        )
        box.deliver(message("Win a prize", sender="eve@evil.test", message_id="<q1@x>"))
        box.deliver(message("Lunch", sender="ana@example.com", message_id="<q2@x>"))
        published = await source.scan()
    finally:
        conn.close()
    assert [e.idempotency_key for e in published] == ["mail:<q2@x>"]
    assert [e.idempotency_key for e in await bus.pending("main")] == ["mail:<q2@x>"]
    assert files(box, "new") == [] and len(files(box, "cur")) == 2
    assert source.quiet == 1


def test_sqlite_thread_records_join_a_transaction_the_caller_opened(tmp_path: Path) -> None:
    conn = open_db(tmp_path / "state")
    try:
        threads = SqliteThreadIndex(conn)
        conn.execute("BEGIN IMMEDIATE")
        threads.record([("<t1@x>", "alpha")], now=1.0)
        conn.execute("ROLLBACK")  # the record went with the caller's transaction
        assert threads.session_of(["<t1@x>"]) is None
        threads.record([("<t1@x>", "beta")], now=2.0)  # none open: committed on its own
        assert not conn.in_transaction and threads.session_of(["<t1@x>"]) == "beta"
    finally:
        conn.close()


def nested(depth: int, subject: str = "Deep") -> bytes:
    """A mail whose multipart parts nest `depth` levels deep (the attacker's shape)."""
    head = f"From: eve@evil.test\r\nTo: me@home.test\r\nSubject: {subject}\r\n".encode()
    parts = b"".join(
        b"--b%d\r\nContent-Type: multipart/mixed; boundary=b%d\r\n\r\n" % (i, i + 1)
        for i in range(depth)
    )
    return head + b"Content-Type: multipart/mixed; boundary=b0\r\n\r\n" + parts + b"x\r\n"


def test_mime_nesting_is_bounded_where_mail_is_parsed_not_left_to_recursion(
    box: Maildir,
) -> None:
    assert len(list(parse_message(nested(MAX_MIME_DEPTH)).walk())) == MAX_MIME_DEPTH + 1
    box.deliver(nested(MAX_MIME_DEPTH + 1))
    [ref] = box.new_messages()
    with pytest.raises(MailFormatError, match=f"more than {MAX_MIME_DEPTH} levels deep"):
        box.read(ref)
    with pytest.raises(MailFormatError):  # what used to end in RecursionError
        parse_message(nested(3000))


async def test_a_mail_that_cannot_be_read_is_quarantined_and_the_others_are_published(
    box: Maildir, bus: SqliteBusStore, caplog: pytest.LogCaptureFixture
) -> None:
    threads_conn = open_db(box.root.parent / "state")
    source = MaildirSource(
        box,
        bus.publish_many,
        MailIngressConfig(session="main"),
        threads=SqliteThreadIndex(threads_conn),
    )
    try:
        box.deliver(message("Before", message_id="<d1@x>"))
        bad = box.deliver(nested(3000))
        box.deliver(message("After", message_id="<d2@x>"))
        with caplog.at_level(logging.ERROR, logger="heron.alerts"):
            published = await source.scan()
        assert [e.content.data["subject"] for e in published] == ["Before", "After"]
        assert files(box, "new") == [] and len(files(box, "cur")) == 2
        assert files(box, "quarantine") == [bad]  # kept as it came, out of every folder
        assert (box.root / "quarantine" / bad).read_bytes() == nested(3000)
        [record] = [r for r in caplog.records if r.name == "heron.alerts"]
        assert bad in record.getMessage() and "MailFormatError" in record.getMessage()
        assert "100 levels deep" in record.getMessage()
        assert source.quarantined == 1 and box.folders() == ["INBOX"]
        box.deliver(message("Later", message_id="<d3@x>"))
        [later] = await source.scan()  # the next scan is not stuck on the bad mail
        assert later.content.data["subject"] == "Later"
        assert [e.idempotency_key for e in await bus.pending("main")] == [
            "mail:<d1@x>",
            "mail:<d2@x>",
            "mail:<d3@x>",
        ]
        assert len(caplog.records) == 1  # reported once, not at every scan
    finally:
        threads_conn.close()


async def test_a_mail_nested_too_deep_is_refused_over_smtp_and_the_next_one_goes_through(
    smtp: SmtpIngress, box: Maildir, bus: SqliteBusStore
) -> None:
    with pytest.raises(smtplib.SMTPDataError) as refused:
        await send(smtp.port, nested(3000))
    assert refused.value.smtp_code == 554
    assert b"more than 100 levels deep" in refused.value.smtp_error
    assert files(box, "new") == files(box, "cur") == []  # the sender keeps it and bounces it
    await send(smtp.port, message("Normal", message_id="<n1@x>"))
    assert [e.idempotency_key for e in await bus.pending("main")] == ["mail:<n1@x>"]


async def test_a_failing_periodic_scan_is_logged_and_the_next_scan_runs(
    box: Maildir, bus: SqliteBusStore, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    source = MaildirSource(
        box, bus.publish_many, MailIngressConfig(session="main", scan_interval_s=5), clock=clock
    )
    key = box.deliver(message(message_id="<r1@x>"))
    (box.root / "cur").rmdir()  # taking the mail in fails: the whole scan raises
    task = asyncio.create_task(source.run())
    try:
        with caplog.at_level(logging.ERROR, logger="heron.always_on.channels.mail"):
            await until(lambda: clock.sleepers > 0 or task.done(), "the failed scan to end")
        assert not task.done()
        [record] = caplog.records
        assert "mail scan of" in record.getMessage() and record.exc_info is not None
        assert files(box, "new") == [key]  # nothing lost: it is still there
        (box.root / "cur").mkdir()
        clock.advance(5)
        await until(lambda: files(box, "new") == [], "the next scan to take the mail in")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert files(box, "cur") == [f"{key}:2,"]
    assert [e.idempotency_key for e in await bus.pending("main")] == ["mail:<r1@x>"]
