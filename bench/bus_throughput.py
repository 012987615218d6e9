"""Event-bus throughput: events per second persisted and consumed by the SQLite bus store.

Durability level measured: WAL with `synchronous=NORMAL` (heron's default: a published event
survives a crash or kill -9 of the process; a power loss may drop the last commits), and
`synchronous=FULL` for comparison. Throughput comes from group commit: `publish_many` writes
a burst in one transaction, `consume` appends one history message and marks a whole batch
consumed in one transaction. One commit per event is shown as the baseline.

    python bench/bus_throughput.py [--events 100000] [--batch 1000]

Target: >= 10,000 events/s persisted and consumed (reported, not enforced).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Literal

from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.messages import UserMessage

SESSION = "bench"


def make_events(n: int, prefix: str) -> list[BusEvent]:
    return [
        BusEvent(
            kind="tool.progress",
            source="tool",
            channel="async_tool",
            session=SESSION,
            idempotency_key=f"{prefix}-{i}",
            content=EventContent(text=f"step {i} of {n}", data={"pct": i % 100}),
        )
        for i in range(n)
    ]


async def grouped(
    state_dir: Path, events: list[BusEvent], batch: int, sync: Literal["NORMAL", "FULL"]
) -> tuple[float, float]:
    bus = SqliteBusStore.open(state_dir, synchronous=sync)
    try:
        started = time.perf_counter()
        for i in range(0, len(events), batch):
            flags = await bus.publish_many(events[i : i + batch])
            assert all(flags)
        published = time.perf_counter() - started

        started = time.perf_counter()
        head = bus.sessions.head(SESSION)
        consumed = 0
        while pending := await bus.pending(SESSION, limit=batch):
            message = UserMessage(content=f"{len(pending)} progress updates", source="runtime")
            ids = [e.id for e in pending]
            head = await bus.consume(SESSION, ids, [message], expected_last_entry=head)
            consumed += len(ids)
        assert consumed == len(events)
        return len(events) / published, consumed / (time.perf_counter() - started)
    finally:
        bus.close()


async def one_by_one(state_dir: Path, events: list[BusEvent]) -> tuple[float, float]:
    bus = SqliteBusStore.open(state_dir)
    try:
        started = time.perf_counter()
        for event in events:
            assert await bus.publish(event)
        published = time.perf_counter() - started
        started = time.perf_counter()
        head = bus.sessions.head(SESSION)
        for event in await bus.pending(SESSION):
            message = UserMessage(content=event.content.text, source="runtime")
            head = await bus.consume(SESSION, [event.id], [message], expected_last_entry=head)
        return len(events) / published, len(events) / (time.perf_counter() - started)
    finally:
        bus.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print(f"{'mode':42} {'publish/s':>12} {'consume/s':>12}")
        modes: tuple[Literal["NORMAL", "FULL"], ...] = ("NORMAL", "FULL")
        for sync in modes:
            rates = await grouped(
                root / sync,
                make_events(args.events, sync),
                args.batch,
                sync,
            )
            label = f"group commit, batch {args.batch}, synchronous={sync}"
            print(f"{label:42} {rates[0]:12,.0f} {rates[1]:12,.0f}")
        single = min(args.events, 5000)
        rates = await one_by_one(root / "single", make_events(single, "single"))
        label = "one commit per event, synchronous=NORMAL"
        print(f"{label:42} {rates[0]:12,.0f} {rates[1]:12,.0f}")
    print("target: >= 10,000 events/s persisted and consumed")


if __name__ == "__main__":
    asyncio.run(main())
