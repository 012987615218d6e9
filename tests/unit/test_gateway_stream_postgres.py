"""A stream served by one worker sees the turn-log records another worker commits on the
shared PostgreSQL store: woken by the notification of their commit, or, on a log that does
not listen, by its polling."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from heron.always_on.bus.postgres_store import PostgresBusStore
from heron.gateway.app import open_turn_log
from heron.gateway.postgres_store import PostgresTurnLog
from heron.gateway.stream import Hub, session_frames
from heron.messages import AssistantMessage, Message
from heron.sessions.postgres_store import PostgresSessionStore
from support.postgres import postgres_server, postgres_url
from support.waiting import BOUND

__all__ = ["postgres_server", "postgres_url"]  # fixtures, found by pytest here


async def test_another_workers_records_wake_a_stream_by_notify_and_are_found_by_polling(
    postgres_url: str,
) -> None:
    other = PostgresSessionStore.open(postgres_url)  # the worker running the turn
    other_log = open_turn_log(other)

    def joined(conn: Any, session: str, messages: Sequence[Message]) -> None:
        text = [m.text for m in messages if isinstance(m, AssistantMessage)]
        other_log.append_in(conn, session, [("text", {"type": "text", "text": text[0]})], 1.0)

    other.companions.append(joined)
    bus = PostgresBusStore.open(postgres_url)  # this worker's
    hub = Hub()
    loop = asyncio.get_running_loop()
    listening = PostgresTurnLog(
        bus.sessions.pool, news=lambda s: loop.call_soon_threadsafe(hub.wake, s)
    )
    stopping = asyncio.Event()
    # Polling once a minute: within the bound below only the notification can wake it.
    woken = session_frames(
        "s",
        bus=bus,
        log=listening,
        hub=hub,
        start=None,
        replay_max=100,
        poll_interval_s=60,
        stopping=stopping,
    )
    first = asyncio.ensure_future(anext(woken))
    await asyncio.to_thread(other.append, "s", [AssistantMessage(text="from worker A")])
    [frame] = await asyncio.wait_for(first, BOUND)
    assert frame.event == "turn" and frame.data["text"] == "from worker A"

    quiet = PostgresTurnLog(bus.sessions.pool)  # does not listen: polls
    polled = session_frames(
        "s",
        bus=bus,
        log=quiet,
        hub=Hub(),
        start=frame.id,
        replay_max=100,
        poll_interval_s=0.05,
        stopping=stopping,
    )
    second = asyncio.ensure_future(anext(polled))
    await asyncio.to_thread(other.append, "s", [AssistantMessage(text="and again")])
    [again] = await asyncio.wait_for(second, BOUND)
    assert again.data["text"] == "and again" and again.id != frame.id
    await woken.aclose()
    await polled.aclose()
    listening.close()
    bus.close()
    other.close()
