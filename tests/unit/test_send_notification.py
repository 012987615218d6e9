"""send_notification (formerly notify_user): recorded first, on the console at once, pushed to
the user's signed webhook by urgency, read/unread in the one message store; and send_message
with attachments passed by reference. Real peers: an HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from heron.collaboration.channels import ConsoleChannel, WebhookChannel
from heron.collaboration.config import PersonConfig
from heron.collaboration.identity import AgentIdentity
from heron.collaboration.outbox import Outbox
from heron.collaboration.sqlite_store import SqliteMessageStore
from heron.collaboration.tools import messaging_tools
from heron.tools.definition import Tool, ToolContext, ToolResult
from support.peers import HttpReceiver, http_receiver

CTX = ToolContext(call_id="c1", turn_id="t1")
SECRET = "notify-secret"
IDENTITY = AgentIdentity(name="Heron", address="heron@example.com", signature="Heron, an AI agent")


@pytest.fixture
def receiver() -> Iterator[HttpReceiver]:
    with http_receiver() as r:
        yield r


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteMessageStore]:
    s = SqliteMessageStore.open(tmp_path)
    yield s
    s.close()


def make(
    store: SqliteMessageStore,
    console: io.StringIO,
    url: str | None = None,
    *,
    workspace: Path | None = None,
) -> dict[str, Tool]:
    user = PersonConfig(channels=["console", "webhook"], webhook=url) if url else PersonConfig()
    outbox = Outbox(
        store,
        identity=IDENTITY,
        people={"ana": user},
        user="ana",
        channels=[ConsoleChannel(console), WebhookChannel(secret_env="HERON_TEST_NOTIFY")],
    )
    tools = messaging_tools(outbox, session="ops", workspace=workspace)
    return {t.spec.name: t for t in tools}


async def run(t: Tool, **arguments: Any) -> ToolResult:
    return await t.execute(t.validate(arguments), CTX)


async def test_a_normal_notification_goes_to_the_console_and_is_kept_unread(
    store: SqliteMessageStore, receiver: HttpReceiver
) -> None:
    console = io.StringIO()
    result = await run(make(store, console, receiver.url)["send_notification"], text="Build done.")
    assert result.success
    note_id = result.data["id"]
    assert console.getvalue().splitlines()[:2] == [
        f"[heron notification {note_id} • normal • unread] from Heron <heron@example.com> to ana",
        "Build done.",
    ]
    assert console.getvalue().splitlines()[-1] == "— Heron, an AI agent"
    assert receiver.requests == []  # console first in ana's list: a normal one stays there
    [note] = store.list(unread_only=True)
    assert (note.id, note.text, note.delivered(), note.read, note.session) == (
        note_id,
        "Build done.",
        {"console": "ok"},
        False,
        "ops",
    )
    assert store.mark_read(note_id, via="console", at=1.0)
    assert not store.mark_read(note_id, via="console", at=2.0)
    assert store.list(unread_only=True) == [] and store.list()[0].read


async def test_a_high_notification_also_goes_to_the_webhook_signed_with_the_identity(
    store: SqliteMessageStore, receiver: HttpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERON_TEST_NOTIFY", SECRET)
    tools = make(store, io.StringIO(), receiver.url)
    result = await run(tools["send_notification"], text="Angry customer.", urgency="high")
    assert result.data["delivered"] == {"console": "ok", "webhook": "ok"}
    [(headers, body)] = receiver.requests
    payload = json.loads(body)
    assert (payload["id"], payload["text"], payload["urgency"], payload["kind"]) == (
        result.data["id"],
        "Angry customer.",
        "high",
        "notification",
    )
    assert payload["from"] == {
        "name": "Heron",
        "address": "heron@example.com",
        "signature": "Heron, an AI agent",
    }
    assert headers["idempotency-key"] == result.data["id"]
    stamp = headers["x-heron-timestamp"]
    expected = hmac.new(SECRET.encode(), f"{stamp}.".encode() + body, hashlib.sha256)
    assert headers["x-heron-signature"] == "sha256=" + expected.hexdigest()
    assert SECRET not in result.output


async def test_a_failing_webhook_is_recorded_while_the_console_still_delivers(
    store: SqliteMessageStore, receiver: HttpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERON_TEST_NOTIFY", SECRET)
    receiver.status = 500
    tools = make(store, io.StringIO(), receiver.url)
    mixed = await run(tools["send_notification"], text="Disk almost full.", urgency="urgent")
    assert mixed.success
    assert mixed.data["delivered"] == {"console": "ok", "webhook": "failed: HTTP 500"}
    [stored] = store.list()
    assert [d.channel for d in stored.deliveries] == ["console", "webhook"]


async def test_without_the_secret_nothing_is_sent_unsigned(
    store: SqliteMessageStore, receiver: HttpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HERON_TEST_NOTIFY", raising=False)
    tools = make(store, io.StringIO(), receiver.url)
    result = await run(tools["send_notification"], text="x", urgency="high")
    assert receiver.requests == []
    assert (
        result.data["delivered"]["webhook"]
        == "failed: $HERON_TEST_NOTIFY is not set; nothing was sent"
    )


async def test_a_person_who_is_not_configured_is_refused_before_recording(
    store: SqliteMessageStore,
) -> None:
    tools = make(store, io.StringIO())
    result = await run(tools["send_notification"], text="x", to="bob")
    assert not result.success and "nobody called 'bob'" in (result.error or "")
    assert store.list() == []


async def test_an_empty_notification_or_message_is_refused(store: SqliteMessageStore) -> None:
    tools = make(store, io.StringIO())
    for name, field in (("send_notification", "text"), ("send_message", "text")):
        result = await run(tools[name], **{field: "   "})
        assert not result.success
    assert store.list() == []


async def test_attachments_travel_by_path_and_must_be_files_inside_the_workspace(
    store: SqliteMessageStore,
    receiver: HttpReceiver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HERON_TEST_NOTIFY", SECRET)
    workspace = tmp_path / "shared"
    (workspace / "reports").mkdir(parents=True)
    (workspace / "reports" / "q3.csv").write_text("quarter,revenue\nq3,1200\n" * 100)
    (tmp_path / "secret.txt").write_text("not yours")
    console = io.StringIO()
    tools = make(store, console, receiver.url, workspace=workspace)
    sent = await run(tools["send_message"], text="The Q3 numbers.", attachments=["reports/q3.csv"])
    assert sent.success
    [message] = store.list()
    assert [(a.path, a.bytes) for a in message.attachments] == [("reports/q3.csv", 2400)]
    assert "Attachment: reports/q3.csv (2 KB)" in console.getvalue()
    assert "q3,1200" not in console.getvalue()  # by reference: never inlined
    for bad in ("../secret.txt", "/etc/passwd", "reports", "reports/missing.csv"):
        refused = await run(tools["send_message"], text="x", attachments=[bad])
        assert not refused.success, bad
    assert len(store.list()) == 1
