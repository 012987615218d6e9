"""The periodic work of a `SessionHost` (`heron.always_on.sessions`), each a task the host
starts in `SessionHost.start` and cancels in `aclose`: the poller (events other processes
wrote, and on a shared store the timers of sessions no worker holds), the alarm (a parked
session's next timer), the reaper (parking idle sessions, and under `max_awake` making room for
queued wakes: `make_room`, which a wake past the bound also calls at once) and the renewal of
the awake sessions' leases on a shared store."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from heron.sessions.lease import LeaseHold, LeaseStore

if TYPE_CHECKING:
    from heron.always_on.sessions import SessionHost

log = logging.getLogger("heron.always_on.sessions")  # one logger for the whole host


async def poll(host: SessionHost, interval: float) -> None:
    """Events other processes wrote: one query for every session."""
    while True:
        await host.clock.sleep(interval)
        try:
            for name in await host.bus.pending_sessions():
                awake = host._awake.get(name)
                if awake is not None and name not in host._transitions:
                    await awake.runtime.loop.check_pending()
                elif host._takes(name):
                    host._schedule_wake(name)
            if host._unowned_due is not None:
                # A dead worker's timers: no alarm here knows them, and no event wakes them.
                due = await asyncio.to_thread(host._unowned_due, host.clock.time())
                for name in due:
                    if name not in host._awake and host._takes(name):
                        host._schedule_wake(name)
        except Exception:
            log.exception("looking for pending events failed; trying again")


async def ring_alarms(host: SessionHost) -> None:
    """Wake parked sessions when their next timer falls due."""
    while True:
        host._alarm_changed.clear()
        due = [(p.alarm, p.name) for p in host._parked.values() if p.alarm is not None]
        changed = asyncio.ensure_future(host._alarm_changed.wait())
        waits: list[asyncio.Future[Any]] = [changed]
        if due:
            waits.append(asyncio.ensure_future(host.clock.sleep_until(min(due)[0])))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        now = host.clock.time()
        for alarm, name in due:
            if alarm <= now and name in host._parked:
                host._schedule_wake(name)


async def reap(host: SessionHost) -> None:
    """Park what has been idle for the timeout; while wakes are queued (`max_awake`), park
    the sessions that became idle every 50 ms instead."""
    timeout = host.config.idle_timeout_s
    every = min(max(timeout / 4, 0.05), 5.0)
    while True:
        await host.clock.sleep(min(every, 0.05) if host._queued else every)
        if host._queued:
            make_room(host)
        for name in list(host._awake):
            if name == host.config.default or name in host._transitions:
                continue
            try:
                if await host._parkable(name, force=False):
                    host._begin(name, host._park(name))
            except Exception:
                log.exception("session %r could not be checked for parking", name)


async def renew(host: SessionHost, leases: LeaseStore) -> None:
    """Keep the awake sessions' leases; drop a session whose lease was taken over."""
    every = leases.ttl_s / 3
    while True:
        await host.clock.sleep(every)
        for name, awake in list(host._awake.items()):
            hold = awake.lock
            if not isinstance(hold, LeaseHold) or name in host._transitions:
                continue
            try:
                kept = await asyncio.to_thread(hold.renew)
            except Exception:
                log.exception("renewing the lease of session %r failed; trying again", name)
                continue
            if not kept:
                log.warning("session %r: its lease was taken over; dropping it", name)
                host._begin(name, host._lose(name))


def make_room(host: SessionHost) -> None:
    """Park the least recently active sessions with nothing in flight, one for each queued
    wake (not the default; `_parkable` has the last word)."""
    assert host.config.max_awake is not None
    parking = sum(1 for n in host._transitions if n in host._awake)
    waking = len(host._transitions) - parking
    needed = len(host._awake) + waking + len(host._queued) - parking - host.config.max_awake
    if needed <= 0:
        return
    oldest = sorted(
        (awake.last_active, name)
        for name, awake in host._awake.items()
        if name != host.config.default and name not in host._transitions and awake.runtime.loop.idle
    )
    for _, name in oldest[:needed]:
        host._begin(name, _park_now(host, name))


async def _park_now(host: SessionHost, name: str) -> bool:
    return await host._parkable(name, force=True) and await host._park(name)
