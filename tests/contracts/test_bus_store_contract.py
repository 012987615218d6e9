"""`BusStore`: durable idempotent publish, ordered pending, atomic consume into the session
store it comes with, watchers, the sessions with pending events, keys across sessions,
inspection."""

from __future__ import annotations

import pytest

from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.bus.store import AlreadyConsumedError, BusStore
from heron.messages import UserMessage
from heron.sessions.store import ConcurrentWriteError
from support.stores import StoreBackend


@pytest.fixture
def bus(backend: StoreBackend) -> BusStore:
    return backend.bus()


def event(
    text: str, *, key: str | None = None, session: str = "s", ts: str | None = None
) -> BusEvent:
    extra = {"timestamp": ts} if ts else {}
    return BusEvent(
        kind="user.input",
        source="user",
        channel="cli",
        content=EventContent(text=text),
        idempotency_key=key,
        session=session,
        **extra,  # type: ignore[arg-type]
    )


def texts(events: list[BusEvent]) -> list[str]:
    return [e.content.text for e in events]


async def test_a_duplicate_idempotency_key_is_stored_once(bus: BusStore) -> None:
    assert await bus.publish(event("first", key="mail-42")) is True
    assert await bus.publish(event("redelivered", key="mail-42")) is False
    assert await bus.publish(event("other session", key="mail-42", session="t")) is True
    assert texts(await bus.pending("s")) == ["first"]
    assert texts(await bus.pending("t")) == ["other session"]


async def test_republishing_the_same_event_is_a_duplicate(bus: BusStore) -> None:
    once = event("hello")
    assert await bus.publish(once) is True
    assert await bus.publish(once) is False
    assert len(await bus.pending("s")) == 1


async def test_publish_many_flags_each_event_and_dedups_within_the_burst(bus: BusStore) -> None:
    await bus.publish(event("old", key="k0"))
    flags = await bus.publish_many(
        [event("a", key="k1"), event("b", key="k0"), event("c", key="k1"), event("d")]
    )
    assert flags == [True, False, False, True]
    assert texts(await bus.pending("s")) == ["old", "a", "d"]


async def test_a_published_event_is_seen_by_another_store(
    bus: BusStore, backend: StoreBackend
) -> None:
    published = event("durable")
    await bus.publish(published)
    assert await backend.bus().pending("s") == [published]


async def test_pending_is_in_timestamp_order_then_arrival_order(bus: BusStore) -> None:
    await bus.publish(event("late", ts="2025-01-01T10:00:05.000Z"))
    await bus.publish(event("early, other zone", ts="2025-01-01T11:00:01.000+02:00"))
    await bus.publish(event("tie 1", ts="2025-01-01T10:00:03.000Z"))
    await bus.publish(event("tie 2", ts="2025-01-01T10:00:03.000Z"))
    assert texts(await bus.pending("s")) == ["early, other zone", "tie 1", "tie 2", "late"]
    assert texts(await bus.pending("s", limit=2)) == ["early, other zone", "tie 1"]


async def test_consume_appends_the_history_and_marks_the_events_together(
    bus: BusStore,
) -> None:
    a, b, c = event("a"), event("b"), event("c")
    await bus.publish_many([a, b, c])
    head = await bus.consume("s", [a.id, b.id], [UserMessage(content="a+b")])
    assert texts(await bus.pending("s")) == ["c"]
    assert bus.sessions.load("s") == [UserMessage(content="a+b")]
    assert head == bus.sessions.head("s")
    assert await bus.consumed_into(a.id) == head and await bus.consumed_into(b.id) == head
    assert await bus.consumed_into(c.id) is None
    assert await bus.consumed_into("no-such-event") is None


async def test_consuming_without_messages_marks_the_events_only(bus: BusStore) -> None:
    a = event("a")
    await bus.publish(a)
    assert await bus.consume("s", [a.id], []) == 0
    assert await bus.pending("s") == [] and bus.sessions.load("s") == []
    assert await bus.consumed_into(a.id) == 0


async def test_an_event_is_never_consumed_twice(bus: BusStore) -> None:
    a, b = event("a"), event("b")
    await bus.publish_many([a, b])
    await bus.consume("s", [a.id], [UserMessage(content="a")])
    with pytest.raises(AlreadyConsumedError) as refused:
        await bus.consume("s", [b.id, a.id], [UserMessage(content="a again")])
    assert refused.value.event_ids == (a.id,)
    # All or nothing: b is still pending and the history did not grow.
    assert texts(await bus.pending("s")) == ["b"]
    assert bus.sessions.load("s") == [UserMessage(content="a")]


async def test_consume_refuses_events_of_another_session(bus: BusStore) -> None:
    foreign = event("t's", session="t")
    await bus.publish(foreign)
    with pytest.raises(AlreadyConsumedError):
        await bus.consume("s", [foreign.id], [UserMessage(content="stolen")])
    assert bus.sessions.load("s") == []
    assert texts(await bus.pending("t")) == ["t's"]


async def test_a_stale_writer_consumes_nothing(bus: BusStore) -> None:
    a = event("a")
    await bus.publish(a)
    bus.sessions.append("s", [UserMessage(content="someone else")])
    with pytest.raises(ConcurrentWriteError):
        await bus.consume("s", [a.id], [UserMessage(content="a")], expected_last_entry=0)
    assert texts(await bus.pending("s")) == ["a"]
    assert bus.sessions.load("s") == [UserMessage(content="someone else")]


async def test_watchers_hear_each_new_event_published_through_their_store(
    bus: BusStore, backend: StoreBackend
) -> None:
    observer = backend.bus()
    heard: list[str] = []

    def on_event(e: BusEvent) -> None:
        heard.append(e.content.text)

    unwatch = bus.watch(on_event)
    await bus.publish(event("one", key="k"))
    await bus.publish(event("duplicate", key="k"))
    await bus.publish_many([event("two"), event("three")])
    unwatch()
    await bus.publish(event("unheard"))
    assert heard == ["one", "two", "three"]
    # Another store hears nothing (watchers are per store object) but sees every event.
    assert texts(await observer.pending("s")) == ["one", "two", "three", "unheard"]


async def test_events_lists_arrivals_with_their_state(bus: BusStore) -> None:
    a, b, c = event("a"), event("b", session="t"), event("c")
    await bus.publish_many([a, b, c])
    await bus.consume("s", [a.id], [UserMessage(content="a")])
    every = await bus.events()
    assert [(e.event.id, e.consumed) for e in every] == [(a.id, True), (b.id, False), (c.id, False)]
    assert [s.seq for s in every] == sorted({s.seq for s in every})
    assert [e.event for e in await bus.events(session="s")] == [a, c]
    assert [e.event for e in await bus.events(pending_only=True)] == [b, c]
    assert [e.event for e in await bus.events(limit=2)] == [b, c]
    assert [e.event for e in await bus.events(after=every[0].seq)] == [b, c]
    assert await bus.events(after=every[-1].seq) == []


async def test_pending_sessions_names_each_session_with_pending_events_once(
    bus: BusStore, backend: StoreBackend
) -> None:
    assert await bus.pending_sessions() == []
    a = event("a", session="beta")
    await bus.publish_many([a, event("b", session="alpha"), event("c", session="alpha")])
    await bus.publish(event("d", session="team/gamma"))
    assert await backend.bus().pending_sessions() == ["alpha", "beta", "team/gamma"]
    await bus.consume("beta", [a.id], [UserMessage(content="a")])
    assert await bus.pending_sessions() == ["alpha", "team/gamma"]


async def test_key_session_finds_the_first_session_that_holds_a_key(
    bus: BusStore, backend: StoreBackend
) -> None:
    assert await bus.key_session("webhook:k1") is None
    first = event("one", key="webhook:k1", session="alpha")
    await bus.publish(first)
    await bus.publish(event("copy", key="webhook:k1", session="beta"))
    await bus.publish(event("keyless", session="gamma"))
    assert await backend.bus().key_session("webhook:k1") == "alpha"
    # Consumed events keep their keys: a late copy is still a duplicate.
    await bus.consume("alpha", [first.id], [UserMessage(content="one")])
    assert await bus.key_session("webhook:k1") == "alpha"
    assert await bus.key_session("webhook:other") is None


# -- poison messages ------------------------------------------------------------------------


async def test_an_event_failing_max_attempts_times_is_quarantined_out_of_pending(
    bus: BusStore, backend: StoreBackend
) -> None:
    poison, fine = event("poison"), event("fine")
    await bus.publish_many([poison, fine])
    assert await bus.fail("s", [poison.id], "ValueError: first", max_attempts=3) == []
    # The count is durable: another store object (a restarted server) goes on counting.
    again = backend.bus()
    assert await again.fail("s", [poison.id], "ValueError: second", max_attempts=3) == []
    assert texts(await bus.pending("s")) == ["poison", "fine"]
    assert await again.fail("s", [poison.id], "ValueError: third", max_attempts=3) == [poison.id]
    assert texts(await bus.pending("s")) == ["fine"]
    [letter] = await bus.dead_letters()
    assert (letter.event_id, letter.session, letter.kind) == (poison.id, "s", "user.input")
    assert (letter.attempts, letter.error, letter.event) == (3, "ValueError: third", poison)
    assert letter.dead_at > 0 and poison.id in letter.body
    assert await backend.bus().dead_letters(session="s") == [letter]
    assert await bus.dead_letters(session="t") == []


async def test_a_quarantined_event_is_never_consumed(bus: BusStore) -> None:
    poison = event("poison")
    await bus.publish(poison)
    await bus.fail("s", [poison.id], "RecursionError: deep", max_attempts=1)
    with pytest.raises(AlreadyConsumedError):
        await bus.consume("s", [poison.id], [UserMessage(content="poison")])
    assert bus.sessions.load("s") == []
    assert await bus.consumed_into(poison.id) is None
    # It stays listed, marked dead, and is no longer pending.
    [stored] = await bus.events()
    assert (stored.event, stored.consumed, stored.dead) == (poison, False, True)
    assert await bus.events(pending_only=True) == []


async def test_a_consumed_event_starts_its_failure_count_afresh_and_others_are_ignored(
    bus: BusStore,
) -> None:
    a, b = event("a"), event("b")
    await bus.publish_many([a, b])
    await bus.fail("s", [a.id, b.id], "KeyError: x", max_attempts=2)
    await bus.consume("s", [a.id], [UserMessage(content="a")])
    # Consumed, unknown or foreign events are not counted (and never quarantined).
    assert await bus.fail("s", [a.id, "no-such-event"], "KeyError: x", max_attempts=1) == []
    assert await bus.fail("t", [b.id], "KeyError: x", max_attempts=1) == []
    assert await bus.fail("s", [b.id], "KeyError: y", max_attempts=2) == [b.id]
    assert [d.event_id for d in await bus.dead_letters()] == [b.id]


async def test_dead_letters_are_listed_in_arrival_order_with_after_and_limit(
    bus: BusStore,
) -> None:
    first, second, third = event("1"), event("2"), event("3")
    await bus.publish_many([first, second, third])
    await bus.fail("s", [third.id, first.id, second.id], "ValueError: no", max_attempts=1)
    letters = await bus.dead_letters()
    assert [d.event_id for d in letters] == [first.id, second.id, third.id]
    assert [d.event_id for d in await bus.dead_letters(limit=2)] == [second.id, third.id]
    assert [d.event_id for d in await bus.dead_letters(after=letters[0].seq)] == [
        second.id,
        third.id,
    ]


async def test_a_session_whose_only_pending_event_is_quarantined_is_no_longer_pending(
    bus: BusStore,
) -> None:
    # A host of many sessions wakes the sessions `pending_sessions` names: a dead letter must
    # not wake its session again and again.
    poison = event("poison", session="beta")
    await bus.publish_many([poison, event("fine", session="alpha")])
    await bus.fail("beta", [poison.id], "ValueError: no", max_attempts=1)
    assert await bus.pending_sessions() == ["alpha"]
    assert [d.session for d in await bus.dead_letters()] == ["beta"]
