"""The SQLite bus store: what SQLite adds to the `BusStore` contract
(`tests/contracts/test_bus_store_contract.py`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.always_on.bus.store import BusStore


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[SqliteBusStore]:
    store = SqliteBusStore.open(tmp_path)
    yield store
    store.close()


def event(text: str) -> BusEvent:
    return BusEvent(
        kind="user.input", source="user", channel="cli", content=EventContent(text=text)
    )


def test_the_sqlite_store_implements_the_protocol(bus: SqliteBusStore) -> None:
    store: BusStore = bus  # checked by mypy; the assertion keeps the test meaningful at runtime
    assert callable(store.publish) and callable(store.consume)


async def test_a_published_event_survives_reopening_the_database(
    bus: SqliteBusStore, tmp_path: Path
) -> None:
    await bus.publish(event("durable"))
    reopened = SqliteBusStore.open(tmp_path, synchronous="FULL")
    try:
        assert [e.content.text for e in await reopened.pending("default")] == ["durable"]
    finally:
        reopened.close()


async def test_a_watcher_runs_after_the_commit(bus: SqliteBusStore, tmp_path: Path) -> None:
    observer = SqliteBusStore.open(tmp_path)
    counts: list[int] = []

    def on_event(e: BusEvent) -> None:
        # Committed before the callback runs: another connection already sees the event.
        row = observer.sessions.conn.execute(
            "SELECT COUNT(*) FROM bus_events WHERE id = ?", (e.id,)
        ).fetchone()
        counts.append(row[0])

    try:
        bus.watch(on_event)
        await bus.publish(event("one"))
        await bus.publish_many([event("two"), event("three")])
        assert counts == [1, 1, 1]
    finally:
        observer.close()


async def test_a_stored_event_that_cannot_be_read_is_quarantined_at_once(
    bus: SqliteBusStore,
) -> None:
    before, damaged, after = event("before"), event("damaged"), event("after")
    await bus.publish_many([before, damaged, after])
    # What another heron version (an unknown kind) or a damaged file leaves behind.
    body = damaged.model_dump_json().replace('"user.input"', '"user.telepathy"')
    bus.sessions.conn.execute("UPDATE bus_events SET body = ? WHERE id = ?", (body, damaged.id))
    assert [e.content.text for e in await bus.pending("default")] == ["before", "after"]
    [letter] = await bus.dead_letters()
    assert (letter.event_id, letter.attempts, letter.event, letter.body) == (
        damaged.id,
        0,
        None,
        body,
    )
    assert letter.error.startswith("the stored event cannot be read: ")
    assert "user.telepathy" in letter.error
    assert [s.event.id for s in await bus.events()] == [before.id, after.id]


async def test_text_that_is_not_unicode_is_stored_with_the_documented_replacement(
    bus: SqliteBusStore, tmp_path: Path
) -> None:
    # A mail header's undecodable byte, as Python's email parser keeps it (surrogateescape).
    mail = BusEvent(
        kind="mail.received",
        source="stranger",
        channel="mail",
        content=EventContent(text="Subject: caf\udce9", data={"subject": "caf\udce9"}),
        idempotency_key="mail:<\udce9@example>",
    )
    assert await bus.publish(mail)
    reopened = SqliteBusStore.open(tmp_path)
    try:
        [stored] = await reopened.pending("default")
    finally:
        reopened.close()
    assert stored.content.text == "Subject: caf\\xe9"
    assert stored.content.data == {"subject": "caf\\xe9"}
    assert stored.idempotency_key == "mail:<\\xe9@example>"
