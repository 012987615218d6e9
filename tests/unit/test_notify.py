"""notify_user: console and signed webhook delivery, recorded with read/unread state."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from heron.collaboration.notify import NotificationStore, NotifyConfig, notify_tools
from heron.collaboration.sqlite_store import SqliteNotificationStore
from heron.tools.definition import Tool, ToolContext, ToolResult

CTX = ToolContext(call_id="c1", turn_id="t1")
SECRET = "notify-secret"


class Receiver:
    """A real HTTP endpoint on 127.0.0.1 that records what it receives."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.status = 204
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                """Silence the default stderr log."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/notify"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[NotificationStore]:
    s = SqliteNotificationStore.open(tmp_path)
    yield s
    s.close()


def make(store: NotificationStore, console: io.StringIO, url: str | None = None) -> Tool:
    config = NotifyConfig(console=console, webhook_url=url, webhook_secret_env="HERON_TEST_NOTIFY")
    [notify_user] = notify_tools(config, store)
    return notify_user


async def run(t: Tool, **arguments: Any) -> ToolResult:
    return await t.execute(t.validate(arguments), CTX)


async def test_a_normal_notification_goes_to_the_console_and_is_kept_unread(
    store: NotificationStore, receiver: Receiver
) -> None:
    console = io.StringIO()
    result = await run(make(store, console, receiver.url), text="Build finished.")
    assert result.success
    note_id = result.data["id"]
    assert console.getvalue() == f"[heron notification {note_id} • normal] Build finished.\n"
    assert receiver.requests == []  # below the webhook's priority
    [note] = store.notifications(unread_only=True)
    assert (note.id, note.text, note.delivered, note.read) == (
        note_id,
        "Build finished.",
        {"console": "ok"},
        False,
    )
    assert store.mark_read(note_id) and not store.mark_read(note_id)
    assert store.notifications(unread_only=True) == []
    assert store.notifications()[0].read


async def test_a_high_priority_notification_also_goes_to_the_webhook_signed(
    store: NotificationStore, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERON_TEST_NOTIFY", SECRET)
    result = await run(
        make(store, io.StringIO(), receiver.url), text="Angry customer.", priority="high"
    )
    assert result.data["delivered"] == {"console": "ok", "webhook": "ok"}
    [(headers, body)] = receiver.requests
    payload = json.loads(body)
    assert (payload["id"], payload["text"], payload["priority"]) == (
        result.data["id"],
        "Angry customer.",
        "high",
    )
    stamp = headers["x-heron-timestamp"]
    expected = hmac.new(SECRET.encode(), f"{stamp}.".encode() + body, hashlib.sha256)
    assert headers["x-heron-signature"] == "sha256=" + expected.hexdigest()
    assert SECRET not in result.output


async def test_a_failing_webhook_is_recorded_while_the_console_still_delivers(
    store: NotificationStore, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERON_TEST_NOTIFY", SECRET)
    receiver.status = 500
    notify_user = make(store, io.StringIO(), receiver.url)
    mixed = await run(notify_user, text="Disk almost full.", priority="urgent")
    assert mixed.success
    assert mixed.data["delivered"] == {"console": "ok", "webhook": "failed: HTTP 500"}
    only_webhook = await run(notify_user, text="Again.", channel="webhook")
    assert not only_webhook.success and "could not be delivered" in (only_webhook.error or "")
    assert [n.delivered for n in store.notifications()][1] == {"webhook": "failed: HTTP 500"}


async def test_without_the_secret_nothing_is_sent_unsigned(
    store: NotificationStore, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HERON_TEST_NOTIFY", raising=False)
    result = await run(make(store, io.StringIO(), receiver.url), text="x", channel="webhook")
    assert not result.success and receiver.requests == []
    assert "$HERON_TEST_NOTIFY is not set" in result.output


async def test_asking_for_a_webhook_that_is_not_configured_fails_before_recording(
    store: NotificationStore,
) -> None:
    result = await run(make(store, io.StringIO()), text="x", channel="all")
    assert not result.success and "no notification webhook" in (result.error or "")
    assert store.notifications() == []


async def test_an_empty_notification_is_refused(store: NotificationStore) -> None:
    result = await run(make(store, io.StringIO()), text="   ")
    assert not result.success and store.notifications() == []
