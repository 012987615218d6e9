"""What the PostgreSQL store adds to the contracts: ownership with fencing across workers,
exactly-once consumption under a race, wake-ups by LISTEN/NOTIFY, claiming with SKIP LOCKED,
a server restart survived, and versioned migrations. Every test runs against the test
process's real PostgreSQL server (`support.postgres`); two store objects on their own pools
stand for two workers, and a fake clock moves their leases on."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from heron._support import postgres
from heron._support.clock import FakeClock
from heron._support.migrations import POSTGRESQL, latest
from heron._support.postgres import Pool, applied_versions, apply_migrations, open_pool
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.bus.postgres_store import PostgresBusStore
from heron.always_on.bus.store import AlreadyConsumedError
from heron.always_on.triggers.postgres_store import PostgresTimerStore
from heron.always_on.triggers.timers import TimerScheduler
from heron.errors import StoreError
from heron.messages import AssistantMessage, ToolCallPart, ToolResultMessage, UserMessage
from heron.sessions.lease import Lease, StaleEpochError
from heron.sessions.postgres_leases import PostgresLeases
from heron.sessions.postgres_store import PostgresSessionStore
from heron.sessions.repair import INTERRUPTED_RESULT, check_history
from heron.sessions.writer import SessionWriter
from support.postgres import PostgresServer, postgres_server, postgres_url
from support.waiting import poll_until

__all__ = ["postgres_server", "postgres_url"]  # fixtures, found by pytest here

TTL = 30.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def worker_pools(postgres_url: str) -> Iterator[list[Pool]]:
    """Two pools on one fresh database: two workers."""
    opened = [open_pool(postgres_url, max_size=4) for _ in range(2)]
    yield opened
    for pool in opened:
        pool.close()


def event(text: str, *, session: str = "s", key: str | None = None) -> BusEvent:
    return BusEvent(
        kind="user.input",
        source="user",
        channel="cli",
        content=EventContent(text=text),
        idempotency_key=key,
        session=session,
    )


CALL = AssistantMessage(tool_calls=(ToolCallPart(id="c1", name="deploy", arguments={}),))


def test_a_paused_worker_cannot_write_a_session_another_worker_took_over(
    worker_pools: list[Pool],
) -> None:
    clock = Clock()
    pool_a, pool_b = worker_pools
    leases_a = PostgresLeases(pool_a, owner="worker-a", ttl_s=TTL, now=clock)
    leases_b = PostgresLeases(pool_b, owner="worker-b", ttl_s=TTL, now=clock)
    store_a, store_b = PostgresSessionStore(pool_a), PostgresSessionStore(pool_b)

    lease_a = leases_a.acquire("s")
    assert lease_a is not None and lease_a.epoch == 1
    store_a.fence(lease_a)
    head = store_a.append("s", [UserMessage(content="deploy it"), CALL])
    assert leases_b.acquire("s") is None  # A's lease is alive

    clock.now += TTL + 1  # A is paused past its lease
    lease_b = leases_b.acquire("s")
    assert lease_b is not None and lease_b.epoch == 2 and lease_b.taken_over
    store_b.fence(lease_b)
    # The takeover opens the session as a restart does: the call A left open is answered.
    writer = SessionWriter.wake(store_b, "s")
    assert [r.content for r in writer.repaired] == [INTERRUPTED_RESULT]

    # A comes back and writes what its tool returned: refused, nothing written.
    late = ToolResultMessage(call_id="c1", name="deploy", content="done")
    with pytest.raises(StaleEpochError) as refused:
        store_a.append("s", [late], expected_last_entry=head)
    assert (refused.value.epoch, refused.value.current) == (1, 2)
    assert leases_a.renew(lease_a) is None

    history = store_b.load("s")
    assert history[-1].content == INTERRUPTED_RESULT  # type: ignore[union-attr]
    check_history(history)  # valid for a provider


async def test_a_stale_consume_is_refused_and_the_event_stays_pending(
    worker_pools: list[Pool],
) -> None:
    clock = Clock()
    pool_a, pool_b = worker_pools
    bus_a = PostgresBusStore(PostgresSessionStore(pool_a))
    bus_b = PostgresBusStore(PostgresSessionStore(pool_b))
    leases_a = PostgresLeases(pool_a, owner="a", ttl_s=TTL, now=clock)
    leases_b = PostgresLeases(pool_b, owner="b", ttl_s=TTL, now=clock)
    await bus_a.publish(one := event("hello"))
    (lease_a,) = leases_a.claim(10)
    bus_a.sessions.fence(lease_a)
    clock.now += TTL + 1
    (lease_b,) = leases_b.claim(10)
    bus_b.sessions.fence(lease_b)

    with pytest.raises(StaleEpochError):
        await bus_a.consume("s", [one.id], [UserMessage(content="hello")])
    assert [e.id for e in await bus_b.pending("s")] == [one.id]
    await bus_b.consume("s", [one.id], [UserMessage(content="hello")])
    assert await bus_b.pending("s") == []


async def test_a_worker_stopped_inside_a_transaction_does_not_hold_its_locks_for_ever(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A process stopped (SIGSTOP, a paused VM) between two statements of its consume keeps
    # the event rows, the session head and its lease row locked: the other workers' claim
    # skips that lease for as long as the process stays stopped, so the server must end it.
    monkeypatch.setattr(postgres, "IDLE_IN_TRANSACTION_S", 0.5)
    clock, entered, resume = Clock(), threading.Event(), threading.Event()

    def stopped_clock() -> float:  # called inside the append's transaction, locks held
        entered.set()
        resume.wait()
        return clock.now

    pool_a, pool_b = open_pool(postgres_url, max_size=2), open_pool(postgres_url, max_size=2)
    try:
        bus_a = PostgresBusStore(PostgresSessionStore(pool_a, now=stopped_clock))
        bus_b = PostgresBusStore(PostgresSessionStore(pool_b))
        leases_a = PostgresLeases(pool_a, owner="a", ttl_s=TTL, now=clock)
        leases_b = PostgresLeases(pool_b, owner="b", ttl_s=TTL, now=clock)
        await bus_a.publish(one := event("hello"))
        (lease_a,) = leases_a.claim(10)
        bus_a.sessions.fence(lease_a)
        stopped = asyncio.ensure_future(
            bus_a.consume("s", [one.id], [UserMessage(content="hello")])
        )
        await asyncio.to_thread(entered.wait)
        clock.now += TTL + 1  # A's lease runs out while it is stopped
        taken: list[Lease] = []

        def taken_over() -> bool:
            taken.extend(leases_b.claim(10))
            return bool(taken)

        await poll_until(taken_over, "the stopped worker's session claimed", within_s=30)
        bus_b.sessions.fence(taken[0])
        await bus_b.consume("s", [one.id], [UserMessage(content="hello")])

        resume.set()  # A runs on: its connection is gone, nothing of it is written
        with pytest.raises(StoreError):
            await stopped
        assert bus_b.sessions.load("s") == [UserMessage(content="hello")]
        assert leases_a.renew(lease_a) is None  # A's pool serves a new connection
    finally:
        resume.set()
        pool_a.close()
        pool_b.close()


def test_workers_claiming_at_once_split_the_sessions(worker_pools: list[Pool]) -> None:
    clock = Clock()
    bus = PostgresBusStore(PostgresSessionStore(worker_pools[0]))
    asyncio.run(bus.publish_many([event(str(i), session=f"s{i}") for i in range(20)]))
    workers = [
        PostgresLeases(p, owner=f"w{i}", ttl_s=TTL, now=clock) for i, p in enumerate(worker_pools)
    ]
    claimed: list[list[str]] = [[], []]
    start = threading.Barrier(2)

    def claim(i: int) -> None:
        start.wait()
        while leases := workers[i].claim(3):
            claimed[i] += [lease.session for lease in leases]

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = claimed[0] + claimed[1]
    assert sorted(everything) == sorted(f"s{i}" for i in range(20))  # each exactly once


async def test_two_workers_racing_to_consume_one_event_consume_it_once(
    worker_pools: list[Pool],
) -> None:
    buses = [PostgresBusStore(PostgresSessionStore(p)) for p in worker_pools]
    await buses[0].publish(one := event("once"))

    async def consume(bus: PostgresBusStore) -> str:
        try:
            await bus.consume("s", [one.id], [UserMessage(content="once")])
        except AlreadyConsumedError:
            return "refused"
        return "consumed"

    outcomes = await asyncio.gather(*(consume(b) for b in buses))
    assert sorted(outcomes) == ["consumed", "refused"]
    assert buses[1].sessions.load("s") == [UserMessage(content="once")]


async def test_another_workers_publish_wakes_a_watcher_through_notify(
    worker_pools: list[Pool],
) -> None:
    listener = PostgresBusStore(PostgresSessionStore(worker_pools[0]))
    publisher = PostgresBusStore(PostgresSessionStore(worker_pools[1]))
    arrived: asyncio.Queue[BusEvent] = asyncio.Queue()
    unwatch = listener.watch(arrived.put_nowait)
    try:
        # The listener subscribes on its own thread: publish until the first one is heard.
        async with asyncio.timeout(10):
            sent = 0
            while arrived.empty():
                await publisher.publish(event(f"ping {sent}", key=f"k{sent}"))
                sent += 1
                try:
                    await asyncio.wait_for(arrived.get(), timeout=0.2)
                    break
                except TimeoutError:
                    continue
            await publisher.publish(last := event("hello from b"))
            while (got := await arrived.get()).id != last.id:
                pass
        assert got.content.text == "hello from b"
    finally:
        unwatch()
        listener.close()


async def test_the_store_survives_a_server_restart(
    postgres_server: PostgresServer, worker_pools: list[Pool]
) -> None:
    bus = PostgresBusStore(PostgresSessionStore(worker_pools[0]))
    await bus.publish(before := event("before"))
    postgres_server.restart()  # every pooled connection is now dead
    await bus.publish(after := event("after"))
    assert [e.id for e in await bus.pending("s")] == [before.id, after.id]


def test_migrations_bring_an_empty_database_to_the_latest_version(
    postgres_server: PostgresServer,
) -> None:
    import psycopg

    url = postgres_server.empty_database()
    with pytest.raises(StoreError, match="heron db migrate"):
        open_pool(url).close()
    with psycopg.connect(url, autocommit=True) as conn:
        assert [m.version for m in apply_migrations(conn)] == [m.version for m in POSTGRESQL]
        assert apply_migrations(conn) == []  # idempotent
        assert max(applied_versions(conn)) == latest(POSTGRESQL)
    open_pool(url).close()


async def test_a_timer_fires_each_slot_once_across_a_takeover_and_keeps_its_misfire_policy(
    worker_pools: list[Pool],
) -> None:
    clock = FakeClock()
    sessions = [PostgresSessionStore(p) for p in worker_pools]
    leases = [
        PostgresLeases(p, owner=name, ttl_s=TTL, now=clock.time)
        for p, name in zip(worker_pools, "ab", strict=True)
    ]
    timers = [
        TimerScheduler(
            PostgresTimerStore(p, fence=store),
            publish=PostgresBusStore(store).publish,
            session="ops",
            clock=clock,
        )
        for p, store in zip(worker_pools, sessions, strict=True)
    ]
    lease_a = leases[0].acquire("ops")
    assert lease_a is not None
    sessions[0].fence(lease_a)
    every = timers[0].add(message="check the queue", every_s=60.0, misfire="fire_once")
    clock.advance(60)
    assert await timers[0].fire_due() == 1  # worker A fires the first slot
    first = timers[0].get(every.id)

    clock.advance(5 * 60)  # A is paused past its lease; B takes the session over
    lease_b = leases[1].acquire("ops")
    assert lease_b is not None and lease_b.taken_over
    sessions[1].fence(lease_b)
    assert await timers[1].fire_due() == 1  # the five missed slots as one fire: `fire_once`

    # A comes back: the slot it fired is a duplicate, and its stale update of the timer is
    # refused, so the timer does not move back.
    assert first is not None and first.last_fired is not None
    again = timers[0]._event(first, first.last_fired, clock.time(), {})
    assert await timers[0]._publish(again) is False
    with pytest.raises(StaleEpochError):
        timers[0].store.update(every.id, next_fire=first.next_fire, fires=first.fires)
    bus = PostgresBusStore(sessions[1])
    fired = [e.event.content.data.get("missed") for e in await bus.events(session="ops")]
    assert fired == [None, 5]
    record = timers[1].get(every.id)
    assert record is not None and (record.fires, record.missed) == (2, 5)
