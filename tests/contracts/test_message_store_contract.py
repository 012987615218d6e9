"""`MessageStore`: messages kept oldest first with their deliveries, read and answered state,
references for matching answers, and deliveries that come due handed out once."""

from __future__ import annotations

import dataclasses

import pytest

from heron.collaboration.store import Attachment, Delivery, MessageStore, StoredMessage
from support.stores import StoreBackend


@pytest.fixture
def store(backend: StoreBackend) -> MessageStore:
    return backend.messages()


def message(n: int = 1, **fields: object) -> StoredMessage:
    base = StoredMessage(
        id=f"msg-{n:04d}",
        thread="session:ops",
        session="ops",
        kind="message",
        to="ana",
        text=f"message {n}",
        urgency="normal",
        sender="Heron <heron@example.com>",
        created=1000.0 + n,
    )
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


def test_a_message_is_stored_whole_and_read_back_by_another_store(
    store: MessageStore, backend: StoreBackend
) -> None:
    card = {"title": "Deploy?", "summary": "Build 1432 passed.", "blocks": [], "actions": []}
    stored = message(
        kind="card",
        card=card,
        attachments=(Attachment(path="reports/q3.csv", bytes=1200),),
        deliveries=(Delivery(channel="console", outcome="ok", at=1001.5),),
    )
    store.add(stored)
    assert backend.messages().get("msg-0001") == stored
    assert store.get("msg-none") is None


def test_listing_is_oldest_first_the_latest_limit_and_filters(store: MessageStore) -> None:
    for n in range(1, 5):
        store.add(message(n, thread="direct" if n == 4 else "session:ops"))
    assert [m.id for m in store.list()] == ["msg-0001", "msg-0002", "msg-0003", "msg-0004"]
    assert [m.id for m in store.list(limit=2)] == ["msg-0003", "msg-0004"]
    assert [m.id for m in store.list(thread="direct")] == ["msg-0004"]
    assert [m.id for m in store.list(session="other")] == []


def test_deliveries_are_added_in_order_and_found_by_their_reference(
    store: MessageStore, backend: StoreBackend
) -> None:
    store.add(message())
    store.record_delivery("msg-0001", Delivery(channel="console", outcome="ok", at=1.0))
    mail = Delivery(channel="mail", outcome="ok", at=2.0, ref="<heron.msg-0001@example.com>")
    store.record_delivery("msg-0001", mail)
    found = backend.messages().find_by_ref(["<other@x>", "<heron.msg-0001@example.com>"])
    assert found is not None and found.delivered() == {"console": "ok", "mail": "ok"}
    assert store.find_by_ref(["<unknown@x>"]) is None
    with pytest.raises(KeyError):
        store.record_delivery("msg-none", mail)


def test_read_and_answered_are_marked_once_and_answered_implies_read(
    store: MessageStore, backend: StoreBackend
) -> None:
    store.add(message(1))
    store.add(message(2))
    assert store.mark_read("msg-0001", via="console", at=5.0) is True
    assert store.mark_read("msg-0001", via="web", at=6.0) is False
    assert store.mark_read("msg-none", via="console", at=6.0) is False
    assert store.mark_answered("msg-0002", via="mail", at=7.0) is True
    assert store.mark_answered("msg-0002", via="mail", at=8.0) is False
    second = backend.messages().get("msg-0002")
    assert second is not None
    assert (second.read_at, second.read_via, second.answered_via) == (7.0, "mail", "mail")
    assert [m.id for m in store.list(unread_only=True)] == []


def test_due_deliveries_are_handed_out_once_and_never_for_a_read_message(
    store: MessageStore, backend: StoreBackend
) -> None:
    for n in (1, 2, 3):
        store.add(message(n, urgency="urgent"))
    store.schedule("msg-0001", pending=("im", "mail"), due_at=100.0)
    store.schedule("msg-0002", pending=("mail",), due_at=50.0)
    store.schedule("msg-0003", pending=("mail",), due_at=10.0)
    store.mark_read("msg-0003", via="console", at=5.0)
    assert store.next_due() == 50.0
    assert store.take_due(60.0)[0].id == "msg-0002"
    assert backend.messages().take_due(60.0) == []
    [due] = store.take_due(100.0)
    assert (due.id, due.pending) == ("msg-0001", ("im", "mail"))
    assert store.next_due() is None
    with pytest.raises(KeyError):
        store.schedule("msg-none", pending=("mail",), due_at=1.0)
