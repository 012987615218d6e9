"""Several workers on one store: events/s, failover time and event latency, PostgreSQL and SQLite.

A real PostgreSQL server is started for the run (Debian's binaries, as the tests start it, but
with fsync on: the figures are for a durable server); SQLite is one file in a temporary
directory (WAL, `synchronous=NORMAL`, heron's default). Each worker is a separate process.

- **throughput**: `--events` events over `--sessions` sessions are published in bursts of
  `--batch` (persisted events/s), then consumed by 1, 2 and 4 workers, each taking sessions
  (PostgreSQL: `claim`, `FOR UPDATE SKIP LOCKED` on the leases; SQLite: sessions split by name,
  one file shared by the processes) and consuming each session's pending events with one
  history append per batch (consumed events/s, until every event is consumed).
- **latency**: one worker waits for events (PostgreSQL: LISTEN/NOTIFY; SQLite: polling every
  5 ms) while `--latency-events` events are published one at a time; latency is publish call
  → consume committed, p50/p99.
- **failover** (PostgreSQL only; SQLite is one process, whose restart is its failover): worker
  A holds a session (lease `--lease` s) and is killed -9; an event is published; worker B,
  claiming every 20 ms, consumes it once A's lease expired. Kill → B's first consume, p50/p99
  over `--failovers` rounds: the lease dominates it by design.

    python bench/store_workers.py [--events 20000] [--sessions 200] [--batch 100]
        [--latency-events 300] [--failovers 10] [--lease 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from heron._support.postgres import open_pool  # noqa: E402
from heron.always_on.bus.model import BusEvent, EventContent  # noqa: E402
from heron.always_on.bus.postgres_store import PostgresBusStore  # noqa: E402
from heron.always_on.bus.sqlite_store import SqliteBusStore  # noqa: E402
from heron.messages import UserMessage  # noqa: E402
from heron.sessions.postgres_leases import PostgresLeases  # noqa: E402
from heron.sessions.postgres_store import PostgresSessionStore  # noqa: E402
from support.postgres import PostgresServer, pg_bin  # noqa: E402

Bus = PostgresBusStore | SqliteBusStore


def event(session: str, i: int, prefix: str) -> BusEvent:
    return BusEvent(
        kind="tool.progress",
        source="tool",
        channel="async_tool",
        session=session,
        idempotency_key=f"{prefix}-{session}-{i}",
        content=EventContent(text=f"step {i}", data={"published": time.time()}),
    )


def open_bus(target: str) -> Bus:
    if target.startswith("postgresql://"):
        return PostgresBusStore(PostgresSessionStore(open_pool(target, max_size=2)))
    return SqliteBusStore.open(Path(target))


async def drain(bus: Bus, session: str) -> int:
    """Consume a session's pending events (one history message per batch)."""
    done = 0
    while batch := await bus.pending(session, limit=500):
        await bus.consume(session, [e.id for e in batch], [UserMessage(content="batch")])
        done += len(batch)
    return done


def consume_worker(
    target: str, index: int, workers: int, sessions: list[str], ready: Any, go: Any
) -> None:
    """Throughput worker: take sessions and drain them until nothing is pending."""

    async def run() -> None:
        bus = open_bus(target)
        ready.release()
        go.wait()
        if isinstance(bus, PostgresBusStore):
            leases = PostgresLeases(bus.sessions.pool, owner=f"w{index}", ttl_s=30)
            while taken := await asyncio.to_thread(leases.claim, 8):
                for lease in taken:
                    bus.sessions.fence(lease)
                    await drain(bus, lease.session)
                    leases.release(lease)
                    bus.sessions.unfence(lease.session)
        else:
            for session in sessions[index::workers]:
                await drain(bus, session)
        bus.close()

    asyncio.run(run())


def throughput(target: str, args: argparse.Namespace) -> dict[str, float]:
    figures: dict[str, float] = {}
    sessions = [f"s{i:04d}" for i in range(args.sessions)]
    for workers in (1, 2, 4):
        bus = open_bus(target)
        events = [event(sessions[i % len(sessions)], i, f"tp{workers}") for i in range(args.events)]
        start = time.perf_counter()
        for i in range(0, len(events), args.batch):
            asyncio.run(bus.publish_many(events[i : i + args.batch]))
        figures.setdefault("persisted/s", len(events) / (time.perf_counter() - start))
        bus.close()
        ready, go = mp.Semaphore(0), mp.Event()
        procs = [
            mp.Process(target=consume_worker, args=(target, i, workers, sessions, ready, go))
            for i in range(workers)
        ]
        for p in procs:
            p.start()
        for _ in procs:
            ready.acquire()  # started and connected: the timing is of consuming only
        start = time.perf_counter()
        go.set()
        for p in procs:
            p.join()
        figures[f"consumed/s, {workers} workers"] = args.events / (time.perf_counter() - start)
    return figures


def latency_worker(target: str, session: str, total: int, ready: Any) -> None:
    async def run() -> None:
        bus = open_bus(target)
        arrived = asyncio.Event()
        if isinstance(bus, PostgresBusStore):
            bus.watch(lambda _event: arrived.set())
        ready.set()
        done = 0
        while done < total:
            if isinstance(bus, PostgresBusStore):
                with contextlib.suppress(TimeoutError):  # NOTIFY, else a poll
                    await asyncio.wait_for(arrived.wait(), timeout=0.5)
                arrived.clear()
            else:
                await asyncio.sleep(0.005)
            done += await drain(bus, session)
        bus.close()

    asyncio.run(run())


def latency(target: str, args: argparse.Namespace) -> dict[str, float]:
    session = "latency"
    ready = mp.Event()
    proc = mp.Process(target=latency_worker, args=(target, session, args.latency_events, ready))
    proc.start()
    ready.wait(30)
    bus = open_bus(target)
    time.sleep(0.5)  # the listener subscribes on its own thread after `ready`
    for i in range(args.latency_events):
        asyncio.run(bus.publish(event(session, i, "lat")))
        time.sleep(0.01)  # events spaced out: latency of one event, not of a burst
    proc.join()
    stored = asyncio.run(bus.events(session=session))
    bus.close()
    waits = []
    for item in stored:
        consumed_at = consumed_time(target, item.event.id)
        waits.append(consumed_at - float(item.event.content.data["published"]))
    return percentiles("event latency ms", [w * 1000 for w in waits])


def consumed_time(target: str, event_id: str) -> float:
    if target.startswith("postgresql://"):
        store = PostgresSessionStore(open_pool(target, max_size=1))
        with store.pool.connection() as conn:
            row = conn.execute(
                "SELECT consumed_at FROM bus_events WHERE id = %s", (event_id,)
            ).fetchone()
        store.close()
    else:
        bus = SqliteBusStore.open(Path(target))
        row = bus.sessions.conn.execute(
            "SELECT consumed_at FROM bus_events WHERE id = ?", (event_id,)
        ).fetchone()
        bus.close()
    assert row is not None and row[0] is not None
    return float(row[0])


def holder(url: str, session: str, lease_s: float, held: Any) -> None:
    """Failover worker A: hold the session (renewing) until killed."""
    pool = open_pool(url, max_size=1)
    leases = PostgresLeases(pool, owner=f"a{os.getpid()}", ttl_s=lease_s)
    lease = leases.acquire(session)
    assert lease is not None
    held.set()
    while True:
        time.sleep(lease_s / 3)
        lease = leases.renew(lease) or lease


def taker(url: str, session: str, lease_s: float, ready: Any, result: Any) -> None:
    """Failover worker B: claim every 20 ms; consume the session once it is free."""

    async def run() -> None:
        bus = open_bus(url)
        assert isinstance(bus, PostgresBusStore)
        leases = PostgresLeases(bus.sessions.pool, owner=f"b{os.getpid()}", ttl_s=lease_s)
        ready.set()
        while True:
            for lease in await asyncio.to_thread(leases.claim, 1):
                bus.sessions.fence(lease)
                if await drain(bus, session):
                    result.put(time.time())
                    bus.close()
                    return
            await asyncio.sleep(0.02)

    asyncio.run(run())


def failover(url: str, args: argparse.Namespace) -> dict[str, float]:
    times = []
    for round_ in range(args.failovers):
        session = f"failover-{round_}"
        held, ready, result = mp.Event(), mp.Event(), mp.Queue()
        a = mp.Process(target=holder, args=(url, session, args.lease, held))
        a.start()
        b = mp.Process(target=taker, args=(url, session, args.lease, ready, result))
        b.start()
        held.wait(30)
        ready.wait(30)
        killed = time.time()
        os.kill(a.pid or 0, signal.SIGKILL)
        bus = open_bus(url)
        asyncio.run(bus.publish(event(session, 0, "fo")))
        bus.close()
        times.append(result.get(timeout=60) - killed)
        a.join()
        b.join()
    return percentiles("failover ms", [t * 1000 for t in times])


def percentiles(name: str, values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {f"{name} p50": statistics.median(ordered), f"{name} p99": p99}


def report(backend: str, figures: dict[str, float]) -> None:
    for name, value in figures.items():
        print(f"{backend:<11} {name:<28} {value:>12,.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--latency-events", type=int, default=300)
    parser.add_argument("--failovers", type=int, default=10)
    parser.add_argument("--lease", type=float, default=1.0)
    args = parser.parse_args()
    bindir = pg_bin()
    if bindir is None:
        sys.exit("PostgreSQL server binaries not found: run scripts/bootstrap-system.sh")
    server = PostgresServer(bindir, durable=True).start()
    try:
        server.create_template()
        url = server.fresh_database()
        with tempfile.TemporaryDirectory() as tmp:
            sqlite = str(Path(tmp) / "state")
            SqliteBusStore.open(Path(sqlite)).close()
            report("postgresql", throughput(url, args))
            report("sqlite", throughput(sqlite, args))
            report("postgresql", latency(url, args))
            report("sqlite", latency(sqlite, args))
            report("postgresql", failover(url, args))
            print("sqlite      failover: n/a (one process; its restart is the failover)")
    finally:
        server.destroy()


if __name__ == "__main__":
    mp.set_start_method("spawn")
    main()
