"""`SessionHost`: any number of sessions in one `heron serve` process.

Which session an arriving event is for is decided by one rule for every way in
(`heron.always_on.bus.routing.route_session`); this module keeps the sessions that rule names.

A hosted session is in one of two states:

- **awake**: it holds the session's writer lock (`heron.sessions.lock.SessionLock`) and its
  runtime — the agent `make_agent` built for it (its own approval allow-list, activated tool
  set and receipt scope), its triggers, and its `EventDrivenAgent` loop task with its own
  per-turn exclusions. Its writer comes from `SessionWriter.wake`: waking reads the head and
  the last tool round of the history, not the history, which is read when the model is first
  called.
- **parked**: after `idle_timeout_s` with nothing in flight (no turn, no event pending or
  routed, no detached tool, no side question, no unfinished background job), its task, agent,
  triggers and lock are released; only a `Parked` entry stays in memory (name, last activity,
  next timer). Its next event wakes it: a publish through this process's store (the one
  `watch` of the host), an event another process wrote (the host's poller, one query for all
  sessions), or its next timer (the host's alarm).

The **default session** (`heron serve --session`) is never parked: it is the server's own — its
lock is what makes a second server with the same default session fail at once, and the
heartbeat and system events go there.

**Writer lock**: taken when a session wakes and held while it is awake. While a session is
parked another process may write it (`heron run --session X`); an event for it then stays
pending, durable, and the host tries to wake it again at each poll until that process ends.

**Which sessions**: a name `admit` accepts (a valid, addressable name — `check_hosted_name` —
on the allow-list when there is one). An unknown session is created when its first event is
routed to it (`claim`), and remembered in the host index (`HostIndex`, under the server's
default session; table `serve_sessions` in SQLite), so that after a restart the host finds its
pending events, its timers and its jobs again. Events of sessions that no event routed here
(another server's) are left alone.

**A shared store** (`leases`: several `heron serve` workers on one PostgreSQL database): a
session is held through its lease (`heron.sessions.lease.LeaseHold`) instead of the file lock,
every write of it is fenced by the lease's epoch, and the host renews the leases of its awake
sessions every third of their time. A session whose lease could not be renewed (this worker
was paused past it and another took over) is dropped at once, without another write. Every
worker serves every session: the poller takes up any admitted session with pending events
whose owner's lease expired, and any whose timers fell due with no worker holding it (a dead
worker's timers fire on the worker that takes the session over), and waking it repairs it as a
restart does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from heron._support.clock import Clock, RealClock
from heron.always_on.bus.loop import EventDrivenAgent
from heron.always_on.bus.model import BusEvent
from heron.always_on.bus.routing import check_hosted_name
from heron.always_on.bus.store import BusStore, Unwatch
from heron.always_on.host_sweeps import make_room, poll, reap, renew, ring_alarms
from heron.sessions.lease import Fenced, LeaseHold, LeaseStore
from heron.sessions.lock import SessionInUseError, SessionLock
from heron.sessions.store import SessionStore
from heron.sessions.writer import SessionWriter

log = logging.getLogger("heron.always_on.sessions")

Announce = Callable[[dict[str, Any]], None]


class SessionRuntime(Protocol):
    """What runs while a session is awake; built by the server at each wake."""

    @property
    def loop(self) -> EventDrivenAgent: ...

    def notify(self, event: BusEvent) -> None:
        """An event of this session was published."""
        ...

    def busy(self) -> str | None:
        """Why the session cannot be parked although its loop is idle (a running job), or
        `None`."""
        ...

    def next_alarm(self) -> float | None:
        """When the session must be woken again if it is parked now (its next timer)."""
        ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...


Build = Callable[[str, SessionWriter], Awaitable[SessionRuntime]]
"""Builds the runtime of a session being woken, over the writer the host opened."""

Dormant = Callable[[str], tuple[bool, float | None]]
"""For a session the host has not woken yet (at start): whether it must be awake at once (an
unfinished background job) and when its next timer falls due."""


# -- the index --------------------------------------------------------------------------------


class HostIndex(Protocol):
    """The sessions a server hosts, remembered across restarts (synchronous, like the other
    stores outside the bus; a back-end failure raises `heron.errors.StoreError`). The SQLite
    implementation is `heron.always_on.sqlite_sessions.SqliteHostIndex`."""

    def add(self, host: str, session: str, *, now: float) -> bool:
        """Remember `session` for the server `host`; `False` when it was known."""
        ...

    def sessions(self, host: str) -> list[str]:
        """Every session of `host`, oldest first."""
        ...

    def touch(self, host: str, session: str, *, now: float) -> None:
        """Record the session's last activity (when it is parked)."""
        ...


# -- the host ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class HostConfig:
    """Which sessions a host serves and when it parks them."""

    state_dir: Path
    default: str = "default"
    """The server's own session: never parked; also the host's name in the index."""
    allowed: frozenset[str] | None = None
    """The sessions that may be addressed besides the default (`None`: any valid name)."""
    idle_timeout_s: float = 300.0
    """How long a session stays awake with nothing in flight before it is parked."""
    max_awake: int | None = None
    """At most this many sessions awake (the default one counts): a wake past it first parks
    the least recently active ones with nothing in flight, before their idle timeout, and
    waits (its events durable) until one is parked. A burst of events to many sessions then
    leaves the memory of `max_awake` sessions, not of every one it woke (the allocator keeps
    its peak). `None`: no bound."""
    poll_interval_s: float | None = 1.0
    """How often to look for events other processes wrote (`None`: never)."""


@dataclass(slots=True)
class Parked:
    """All that stays in memory of a parked session."""

    name: str
    last_active: float
    alarm: float | None = None
    """When its next timer falls due (it is woken then)."""


class Hold(Protocol):
    """What an awake session holds: the file lock, or its lease on a shared store."""

    def acquire(self) -> None: ...

    def release(self) -> None: ...


class Awake:
    """A session that is awake: its lock, its runtime and the task running its loop."""

    __slots__ = ("last_active", "lock", "name", "runtime", "task")

    def __init__(self, name: str, lock: Hold, runtime: SessionRuntime, now: float) -> None:
        self.name = name
        self.lock = lock
        self.runtime = runtime
        self.task: asyncio.Task[None] | None = None
        self.last_active = now


class _Awaiting(Mapping[str, str]):
    """`awaiting(session)`, asked at its first use: only a woken history that ends in open
    calls reads it (most end in an answer), and asking is queries and a write."""

    def __init__(self, awaiting: Callable[[str], Mapping[str, str]], session: str) -> None:
        self._awaiting = awaiting
        self._session = session
        self._found: Mapping[str, str] | None = None

    def _placeholders(self) -> Mapping[str, str]:
        if self._found is None:
            self._found = self._awaiting(self._session)
        return self._found

    def __getitem__(self, call_id: str) -> str:
        return self._placeholders()[call_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._placeholders())

    def __len__(self) -> int:
        return len(self._placeholders())


class SessionHost:
    """Wakes, runs and parks the sessions of one server. See the module docstring."""

    def __init__(
        self,
        config: HostConfig,
        *,
        bus: BusStore,
        sessions: SessionStore,
        index: HostIndex,
        build: Build,
        dormant: Dormant | None = None,
        prepare: Callable[[str], None] | None = None,
        clock: Clock | None = None,
        announce: Announce | None = None,
        awaiting: Callable[[str], Mapping[str, str]] | None = None,
        leases: LeaseStore | None = None,
        unowned_due: Callable[[float], list[str]] | None = None,
        defer: Callable[[str], bool] | None = None,
    ) -> None:
        """`bus` and `sessions` share one database (see `EventDrivenAgent`). `prepare` runs
        once per process for each session before its first event is judged (the server adds
        its standing subscriptions there). `awaiting(session)`: the placeholders of its calls
        that wait on an open request to a human, which waking leaves waiting instead of
        closing them as interrupted. `leases`: the store is shared by several workers (see the
        module docstring); `sessions` must then be fenced by them, `unowned_due(now)`
        names the sessions whose timers fell due while no worker holds them, and
        `defer(session)` whether a session this host does not hold is another live worker's to
        wake (its workspace)."""
        check_hosted_name(config.default)
        self.config = config
        self.bus = bus
        self.sessions = sessions
        self.index = index
        self._build = build
        self._dormant = dormant
        self._prepare = prepare
        self._awaiting = awaiting
        self.leases = leases
        self._unowned_due = unowned_due
        self._defer = defer
        self.clock: Clock = clock or RealClock()
        self._announce = announce or (lambda _record: None)
        self._awake: dict[str, Awake] = {}
        self._parked: dict[str, Parked] = {}
        self._transitions: dict[str, asyncio.Task[bool]] = {}
        self._again: set[str] = set()
        self._queued: dict[str, None] = {}
        """Sessions to wake once fewer than `max_awake` are awake, in arrival order."""
        self._blocked: set[str] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._alarm_changed = asyncio.Event()
        self._stop = asyncio.Event()
        self._unwatch: Unwatch | None = None
        self._serving = False
        self._closed = False

    # -- inspection -------------------------------------------------------------------------

    @property
    def default(self) -> Awake:
        """The server's own session (awake from `start` to `aclose`)."""
        return self._awake[self.config.default]

    @property
    def awake(self) -> dict[str, Awake]:
        """The awake sessions by name (do not change it)."""
        return self._awake

    @property
    def parked(self) -> dict[str, Parked]:
        """The parked sessions by name (do not change it)."""
        return self._parked

    def known(self, name: str) -> bool:
        return name in self._awake or name in self._parked or name in self._transitions

    # -- which sessions ---------------------------------------------------------------------

    def admit(self, name: str) -> str | None:
        """Why `name` cannot be hosted here, or `None` when it can."""
        try:
            check_hosted_name(name)
        except ValueError as exc:
            return str(exc)
        allowed = self.config.allowed
        if allowed is not None and name != self.config.default and name not in allowed:
            return f"session {name!r} is not served here"
        return None

    def claim(self, name: str) -> None:
        """An event is being routed to `name` (admitted): from now on it is one of this
        server's sessions, created on this first event, and its events wake it."""
        if self.known(name):
            return
        problem = self.admit(name)
        if problem is not None:
            raise ValueError(problem)
        self.index.add(self.config.default, name, now=self.clock.time())
        if self._prepare is not None:
            self._prepare(name)
        self._parked[name] = Parked(name=name, last_active=self.clock.time())

    # -- running ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Wake the default session (raises `SessionInUseError` when another process holds
        it), find the sessions of the index that need waking (pending events, unfinished
        jobs, timers due), then watch the store and start the poller, the alarm and the
        reaper."""
        default = self.config.default
        now = self.clock.time()
        self.index.add(default, default, now=now)
        if self._prepare is not None:
            self._prepare(default)
        await self._wake(default, strict=True)
        wake: list[str] = []
        for name in self.index.sessions(default):
            if name == default or self.admit(name) is not None:
                continue
            if self._prepare is not None:
                self._prepare(name)
            busy, alarm = self._dormant(name) if self._dormant is not None else (False, None)
            self._parked[name] = Parked(name=name, last_active=now, alarm=alarm)
            if busy or (alarm is not None and alarm <= now):
                wake.append(name)
        wake += [n for n in await self.bus.pending_sessions() if self._takes(n)]
        self._unwatch = self.bus.watch(self._on_published)
        for name in dict.fromkeys(wake):
            self._schedule_wake(name)
        if self.config.poll_interval_s:
            self._tasks.append(asyncio.ensure_future(poll(self, self.config.poll_interval_s)))
        self._tasks.append(asyncio.ensure_future(ring_alarms(self)))
        self._tasks.append(asyncio.ensure_future(reap(self)))
        if self.leases is not None:
            self._tasks.append(asyncio.ensure_future(renew(self, self.leases)))

    async def serve(self) -> None:
        """Run every awake session's loop (and those woken later) until `stop()`, then wait
        for each to finish its turn. Raises what ends the default session's loop."""
        self._serving = True
        for awake in self._awake.values():
            if awake.task is None:
                awake.task = asyncio.ensure_future(self._run(awake))
        default = self.default.task
        assert default is not None
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait([stop, default], return_when=asyncio.FIRST_COMPLETED)
            if default.done() and not default.cancelled():
                error = default.exception()
                if error is not None:
                    raise error  # the default session's loop failed: the server ends
            tasks = [a.task for a in self._awake.values() if a.task is not None]
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            stop.cancel()

    def stop(self) -> None:
        """Stop taking new turns in every session; running turns may finish."""
        self._stop.set()
        for awake in self._awake.values():
            awake.runtime.loop.stop()

    def cancel(self) -> None:
        """Cancel every running turn now."""
        for awake in self._awake.values():
            if awake.task is not None and not awake.task.done():
                awake.task.cancel()

    async def aclose(self) -> None:
        """Stop the host's tasks and every session: its loop (detached tools are cancelled),
        its runtime, then its lock. Parked sessions need nothing."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        for task in [*self._tasks, *self._transitions.values()]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._transitions.values(), return_exceptions=True)
        self._tasks.clear()
        default = self._awake.get(self.config.default)
        others = [a for a in self._awake.values() if a is not default]
        for awake in [*others, *([default] if default is not None else [])]:
            await self._release(awake, cancel=True)
        self._awake.clear()

    async def wake(self, name: str) -> bool:
        """Wake a session the host knows and wait until it is awake; `False` when it cannot
        be (its lock is held by another process, or it is unknown)."""
        if not self.known(name):
            return False
        self._schedule_wake(name)
        while (task := self._transitions.get(name)) is not None:
            await asyncio.wait([task])
        return name in self._awake

    async def park(self, name: str, *, force: bool = False) -> bool:
        """Park an awake session now if nothing is in flight (`force`: without waiting for
        the idle timeout); `False` when it cannot be parked."""
        while (task := self._transitions.get(name)) is not None:
            await asyncio.wait([task])
        if name not in self._awake or not await self._parkable(name, force=force):
            return False
        self._begin(name, self._park(name))
        while (task := self._transitions.get(name)) is not None:
            await asyncio.wait([task])
        return name in self._parked

    # -- arrivals ---------------------------------------------------------------------------

    def _on_published(self, event: BusEvent) -> None:
        """The store's callback after every durable publish in this process."""
        name = event.session
        awake = self._awake.get(name)
        if awake is not None:
            awake.last_active = self.clock.time()
            awake.runtime.notify(event)
            if name in self._transitions:  # being parked: wake it again afterwards
                self._again.add(name)
            return
        if self._takes(name) or name in self._transitions:
            self._schedule_wake(name)

    def _takes(self, name: str) -> bool:
        """Whether an event of `name` should wake it here: a parked session of this host, or
        on a shared store any admitted session (claimed on the way)."""
        if name in self._parked:
            return True
        if self.leases is None or self.known(name) or self.admit(name) is not None:
            return False
        if self._defer is not None and self._defer(name):
            return False
        self.claim(name)
        return True

    # -- transitions ------------------------------------------------------------------------

    def _schedule_wake(self, name: str) -> None:
        if name in self._transitions:
            self._again.add(name)
        elif name in self._queued:
            return  # room was asked for it already (each poll names it again)
        elif name not in self._awake and not self._stop.is_set():
            if self._full():  # its events wait, durable, until a session is parked
                self._queued[name] = None
                make_room(self)
            else:
                self._begin(name, self._wake(name))

    def _full(self) -> bool:
        """`max_awake` sessions are awake or being woken."""
        cap = self.config.max_awake
        if cap is None:
            return False
        waking = sum(1 for n in self._transitions if n not in self._awake)
        return len(self._awake) + waking >= cap

    def _begin(self, name: str, transition: Awaitable[bool]) -> None:
        task = asyncio.ensure_future(transition)
        self._transitions[name] = task
        task.add_done_callback(lambda done: self._ended(name, done))

    def _ended(self, name: str, task: asyncio.Task[bool]) -> None:
        self._transitions.pop(name, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("session %r: %s", name, task.exception(), exc_info=task.exception())
        if name in self._again:
            self._again.discard(name)
            self._schedule_wake(name)
        while self._queued and not self._full():  # room again: the longest waiting first
            first = next(iter(self._queued))
            del self._queued[first]
            self._schedule_wake(first)

    async def _wake(self, name: str, *, strict: bool = False) -> bool:
        lock: Hold
        if self.leases is not None:
            lock = LeaseHold(self.leases, cast(Fenced, self.sessions), name)
        else:
            lock = SessionLock(self.config.state_dir, name)
        try:
            # A lease is a round trip to the shared store: off the event loop's thread.
            await asyncio.to_thread(lock.acquire) if self.leases else lock.acquire()
        except SessionInUseError as exc:
            if strict:
                raise
            if name not in self._blocked:
                self._blocked.add(name)
                log.warning("%s; its events wait until it is free", exc)
            return False
        self._blocked.discard(name)
        try:
            waiting = _Awaiting(self._awaiting, name) if self._awaiting is not None else None
            writer = SessionWriter.wake(self.sessions, name, awaiting=waiting)
            runtime = await self._build(name, writer)
            await runtime.start()
        except BaseException:
            lock.release()
            if not strict:
                self._parked.setdefault(name, Parked(name=name, last_active=self.clock.time()))
            raise
        awake = Awake(name, lock, runtime, self.clock.time())
        if self._stop.is_set() and not strict:  # stopped meanwhile: its events stay pending
            await self._release(awake)
            return False
        self._parked.pop(name, None)
        self._awake[name] = awake
        if self._serving:
            awake.task = asyncio.ensure_future(self._run(awake))
        if name != self.config.default:  # the default one is announced by the server
            self._announce({"type": "session_woken", "session": name})
        return True

    async def _run(self, awake: Awake) -> None:
        """The session's loop; a non-default session that fails is logged and parked."""
        try:
            await awake.runtime.loop.serve()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if awake.name == self.config.default:
                raise
            log.exception("session %r stopped on an error; parking it", awake.name)
            self._announce({"type": "session_failed", "session": awake.name, "error": str(exc)})
            if awake.name not in self._transitions:
                self._begin(awake.name, self._park(awake.name, failed=True))

    async def _parkable(self, name: str, *, force: bool) -> bool:
        awake = self._awake.get(name)
        if awake is None or name == self.config.default:
            return False
        loop = awake.runtime.loop
        now = self.clock.time()
        if not loop.idle:
            awake.last_active = now
            return False
        if not force and now - awake.last_active < self.config.idle_timeout_s:
            return False
        if awake.runtime.busy() is not None:
            awake.last_active = now
            return False
        return not await self.bus.pending(name, limit=1)

    async def _park(self, name: str, *, failed: bool = False) -> bool:
        awake = self._awake.get(name)
        if awake is None:
            return False
        alarm = None if failed else awake.runtime.next_alarm()
        await self._release(awake)
        del self._awake[name]
        now = self.clock.time()
        self._parked[name] = Parked(name=name, last_active=awake.last_active, alarm=alarm)
        self.index.touch(self.config.default, name, now=now)
        if alarm is not None:
            self._alarm_changed.set()
        self._announce({"type": "session_parked", "session": name})
        if not failed and await self.bus.pending(name, limit=1):
            self._again.add(name)  # arrived while it was being parked
        return True

    async def _lose(self, name: str) -> bool:
        """Drop a session another worker took over: stop it now (its writes are refused
        anyway) and keep it parked, so its next event tries to take it back."""
        awake = self._awake.pop(name, None)
        if awake is None:
            return False
        await self._release(awake, cancel=True)
        self._parked[name] = Parked(name=name, last_active=awake.last_active)
        self._announce({"type": "session_lost", "session": name})
        return True

    async def _release(self, awake: Awake, *, cancel: bool = False) -> None:
        """Stop the session's loop (its turn may finish, unless `cancel`), its runtime, then
        its lock."""
        loop = awake.runtime.loop
        loop.stop()
        task = awake.task
        if task is not None and not task.done():
            if cancel or not loop.running:  # waiting for events (or not started): nothing lost
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        try:
            await awake.runtime.aclose()
        finally:
            awake.lock.release()  # last: everything that writes the session has stopped
