"""The event stream's cursor over real stores (SQLite bus and turn log): a replay from any
frame's id is exactly the rest, and a cursor from another database or too far behind is told
to resync."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.gateway.sqlite_store import SqliteTurnLog
from heron.gateway.stream import Frame, Hub, session_frames

T0 = datetime(2026, 12, 1, 10, tzinfo=UTC).timestamp()


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[tuple[SqliteBusStore, SqliteTurnLog]]:
    bus = SqliteBusStore.open(tmp_path)
    log = SqliteTurnLog.open(tmp_path)
    for i in range(3):
        event = BusEvent(
            kind="user.input",
            source="user",
            channel="web",
            session="s",
            timestamp=f"2026-12-01T10:00:0{i}.000Z",
            content=EventContent(text=f"m{i}"),
        )
        await bus.publish(event)
        other = event.model_copy(update={"id": f"other{i}", "session": "t"})
        await bus.publish(other)  # another session's events never show
        if i < 2:
            at = T0 + i + 0.5  # between two bus events
            log.append("s", [("final", {"type": "final", "text": f"a{i}"})], at)
    yield bus, log
    log.close()
    bus.close()


async def read(
    stores: tuple[SqliteBusStore, SqliteTurnLog], start: str | None, n: int, replay_max: int = 100
) -> list[Frame]:
    bus, log = stores
    stopping = asyncio.Event()
    got: list[Frame] = []
    frames = session_frames(
        "s",
        bus=bus,
        log=log,
        hub=Hub(),
        start=start,
        replay_max=replay_max,
        poll_interval_s=0.05,
        stopping=stopping,
    )
    async for chunk in frames:
        got += chunk
        if len(got) >= n:
            break
    await frames.aclose()
    return got


def texts(frames: list[Frame]) -> list[str]:
    return [
        f.data["event"]["content"]["text"] if f.event == "bus" else f.data["text"] for f in frames
    ]


async def test_a_replay_from_any_frame_is_exactly_the_rest_in_time_order(
    stores: tuple[SqliteBusStore, SqliteTurnLog],
) -> None:
    whole = await read(stores, None, 5)
    assert texts(whole) == ["m0", "a0", "m1", "a1", "m2"]
    for i, frame in enumerate(whole[:-1]):
        rest = await read(stores, frame.id, 5 - i - 1)
        assert [f.id for f in rest] == [f.id for f in whole[i + 1 :]]


async def test_a_cursor_of_another_epoch_or_too_far_behind_is_told_to_resync(
    stores: tuple[SqliteBusStore, SqliteTurnLog],
) -> None:
    [foreign] = await read(stores, "0123456789ab.1.1", 1)
    assert foreign.event == "resync" and "another epoch" in foreign.data["reason"]
    whole = await read(stores, None, 5)
    assert foreign.id == whole[-1].id  # resynced to now
    [behind] = await read(stores, None, 1, replay_max=3)
    assert behind.event == "resync" and "more than 3 events behind" in behind.data["reason"]
    assert behind.id == whole[-1].id
