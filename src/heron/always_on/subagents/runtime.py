"""`SubagentRuntime`: every child is a session on the bus, and the runtime is its account.

A spawn stores a record (`queued`), waits for one of `max_concurrent` slots (a FIFO queue; the
slot is freed whenever the child ends, however it ends, and while it waits idle for its own
children or a person, so nested children never wait for a slot their waiting ancestors hold),
and runs the child as an
`EventDrivenAgent` on its own session (`<root session>/agent/<id>`): its task is the first
`agent.input` event there, a parent's later messages are `agent.input` (or, marked urgent,
`agent.interrupt`) events, so the child's own strategies (queue, cancel) apply.

How a child ended is decided here, from the engine's outcome, never from the child's text:
`completed` (outcome `empty` when it gave no text, `budget_exhausted` when its budget ran out
and it answered with a summary), `failed`, `cancelled`, `timed_out`, or — after a restart found
it unfinished — `lost`. The record's compare-and-set (`SubagentStore.finish`) means a finished
state is never downgraded. The result reaches the parent once: a `sync` spawn returns it as the
call's result; otherwise it is a `tool.result` event on the parent's session, bound to the
spawn call, with the idempotency key `subagent.result:<id>` — the bus stores it once and
consumes it once into the parent's history, however often it is published (a restart
republishes what it cannot prove was delivered).

Budgets are split down the tree: a child's `RunBudget` is a child of its parent's (so
everything it spends is spent by its parent, and the tree's usage is reported up), with its own
limits — explicit per spawn, the definition's, or `budget_share` of what the parent has left
(`heron.always_on.subagents.budget`).
Wall time is enforced by the runtime (`asyncio.timeout`), not only checked before model calls.
Cancel is a tree: cancelling a child (or the parent's turn, by a stop) cancels every
descendant, queued ones whose spawn is still in flight included. A child never outlives its
parent (`end_descendants`): however a child ends, what still runs below it is cancelled and
awaited first, and the results that reach its session after its last turn are consumed into
its history when it closes (`ChildRunner`), so no result is left pending on a closed session.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from heron.agent import Agent
from heron.always_on.bus.routing import AGENT_SEGMENT
from heron.always_on.subagents.budget import budget_limits, limits_for, usage_of
from heron.always_on.subagents.config import SubagentsConfig
from heron.always_on.subagents.definitions import AgentDefinition
from heron.always_on.subagents.grant import grant_tools
from heron.always_on.subagents.live import Live, Parent, Spawn, Stop
from heron.always_on.subagents.ownership import Ownership, ProcessOwnership
from heron.always_on.subagents.store import (
    Mode,
    SubagentError,
    SubagentRecord,
    SubagentStore,
    descendants,
)
from heron.tools.definition import Tool
from heron.turn.budgets import RunBudget
from heron.turn.context import TurnHandle, TurnState
from heron.turn.outcome import EMPTY_RESPONSE

log = logging.getLogger("heron.subagents")

__all__ = ["GENERAL", "SubagentError", "SubagentRuntime"]

GENERAL = AgentDefinition(
    name="general",
    description="A general helper for one self-contained task (the default).",
    model=None,
    tools=None,
    prompt="",
)

Runner = Callable[[Live], Any]
"""Runs one child to its end and returns the engine's last `TurnOutcome` (`child.run_child`)."""
Deliver = Callable[[SubagentRecord], Awaitable[None]]
"""Hands a finished child's result to its parent's session (`child.publish_result`)."""
Close = Callable[[SubagentRecord], Awaitable[None]]
"""Closes an ended child's own session (`child.close_session`)."""


class SubagentRuntime:
    """Spawns, runs, messages, cancels and lists the children of one process (see the module
    docstring). `run_child` runs a child (`heron.always_on.subagents.child`); `deliver`
    publishes an async child's result to its parent's session; `close` closes an ended
    child's session (`ChildRunner.close_session`). A child's own children always
    deliver so (the child's loop consumes its session); the top level's only with
    `events_at_top` — without (`heron run`, `heron chat`, MCP: no loop consumes the hosted
    session's events) a result is handed over by `get_subagent_status` and the end of the
    run."""

    def __init__(
        self,
        *,
        store: SubagentStore,
        definitions: Mapping[str, AgentDefinition],
        config: SubagentsConfig,
        run_child: Runner,
        deliver: Deliver,
        events_at_top: bool,
        close: Close | None = None,
        clock: Callable[[], float] = time.time,
        ownership: Ownership | None = None,
    ) -> None:
        self.store = store
        self.ownership: Ownership = ownership or ProcessOwnership()
        """Who runs a child and whether it still lives (`heron.always_on.subagents.ownership`)."""
        self.definitions = dict(definitions)
        self.config = config
        self._run_child = run_child
        self._deliver = deliver
        self._close: Close = close or _nothing_to_close
        self._events_at_top = events_at_top
        self._clock = clock
        self._slots = asyncio.Semaphore(config.max_concurrent)
        self.live: dict[str, Live] = {}
        self._deliveries: dict[asyncio.Task[None], str] = {}
        """Results being published, each with the session it goes to."""
        self._watcher: asyncio.Task[None] | None = None
        self.tool_factory: Callable[[Parent, Mode | None], list[Tool]] | None = None
        """Builds the sub-agent tools bound to a parent (set by `subagent_tools`)."""
        self.on_lost: Callable[[SubagentRecord], object] | None = None
        """Told of each child this runtime ends `lost` (`heron serve` withdraws the requests
        to people it left open: their calls can no longer run)."""

    def delivers_events(self, record: SubagentRecord) -> bool:
        """Whether this async child's result goes to its parent as an event (else through
        `get_subagent_status` and the end of the run)."""
        return record.parent is not None or self._events_at_top

    # -- spawning ---------------------------------------------------------------------------

    def definition(self, name: str | None) -> AgentDefinition:
        if name is None or name == GENERAL.name:
            return self.definitions.get(GENERAL.name, GENERAL)
        found = self.definitions.get(name)
        if found is None:
            known = ", ".join(sorted({GENERAL.name, *self.definitions})) or "none"
            raise SubagentError(f"no agent named {name!r} (known: {known})")
        if not found.usable:
            raise SubagentError(
                f"agent {name!r} comes with the project ({found.source}) and is {found.trust}: "
                f"its prompt, tools and model take effect only after `heron agents approve "
                f"{name}`"
            )
        return found

    def start(self, parent: Parent, handle: TurnHandle, call_id: str, spawn: Spawn) -> Live:
        """Store the child and start it (it waits for a slot); raises `SubagentError`."""
        if parent.depth + 1 > self.config.max_depth:
            raise SubagentError(
                f"the depth limit ({self.config.max_depth}) is reached: a sub-agent at depth "
                f"{parent.depth} cannot start another; do the work yourself"
            )
        definition = self.definition(spawn.agent)
        grant = grant_tools(
            handle, definition_tools=definition.tools, requested=spawn.tools, write=spawn.write
        )
        if parent.child is not None:
            mine = self.live.get(parent.child)
            if mine is None or mine.scope.cancelled:
                raise SubagentError("this sub-agent is being cancelled; it cannot spawn")
        budget_data = limits_for(
            spawn.budget, definition, handle.state.run_budget, self.config.budget_share
        )
        if handle.state.run_budget is None:
            # The parent's turn had no budget: give it one, so the tree's usage is counted.
            handle.state.run_budget = RunBudget(label=parent.own_session)
        subagent_id = uuid.uuid4().hex[:12]
        budget = handle.state.run_budget.child(budget_limits(budget_data), label=subagent_id)
        record = SubagentRecord(
            id=subagent_id,
            agent=definition.name,
            task=spawn.task,
            mode=spawn.mode,
            parent=parent.child,
            root_session=parent.session,
            parent_session=parent.own_session,
            call_id=call_id,
            depth=parent.depth + 1,
            budget=budget_data,
            created_at=self._clock(),
            owner=self.ownership.owner(parent.session),
        )
        self.store.add(record)
        self.ownership.fence(record)
        live = Live(
            record=record,
            definition=definition,
            spawn=spawn,
            handle=handle,
            budget=budget,
            grant=grant,
        )
        self.live[subagent_id] = live
        live.task = asyncio.ensure_future(self._run(live))
        live.task.add_done_callback(lambda _: self._never_ran(live))
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.ensure_future(self._watch_cancels())
        scope = handle.state.cancel

        def on_parent_cancel(_: object) -> None:
            # A stop of the parent's turn reaches the whole tree; a detaching interrupt (the
            # parent is told something new and goes on) does not.
            if scope.mode == "cancel":
                self.cancel_tree(subagent_id, f"its parent was cancelled: {scope.reason}")

        scope.future.add_done_callback(on_parent_cancel)
        return live

    def agent_of(self, session: str) -> Agent | None:
        """The agent of the running child whose own session is `session`, if any (the
        approved calls of a child run through its agent, like those of a hosted session)."""
        _, _, subagent_id = session.rpartition(AGENT_SEGMENT)
        live = self.live.get(subagent_id)
        if live is None or live.ended or live.record.session != session:
            return None  # ended (or closing): nothing of its runs any more
        return live.agent

    def follow_turn(self, session: str, state: TurnState) -> None:
        """A stop of any turn of hosted session `session` (`mode = "cancel"`: the user's
        "stop", Ctrl-C) cancels every child of that session, those an earlier turn spawned
        included; an interrupt that only detaches does not."""
        scope = state.cancel

        def on_cancel(_: object) -> None:
            if scope.mode != "cancel":
                return
            for live in list(self.live.values()):
                if live.record.root_session == session and live.record.parent is None:
                    self.cancel_tree(live.record.id, f"the session was stopped: {scope.reason}")

        scope.future.add_done_callback(on_cancel)

    async def _run(self, live: Live) -> None:
        record = live.record
        status: Any = "failed"
        outcome: Any = None
        result = error = ""
        try:
            await self.take_slot(live)
            try:
                if live.scope.cancelled:
                    raise asyncio.CancelledError
                self.store.advance(record.id, "working")
                wall = live.budget.time_left()
                async with asyncio.timeout(
                    None if wall is None else wall + self.config.wall_grace_s
                ):
                    turn = await self._run_child(live)
            finally:
                self.give_slot(live)
            result = turn.text
            if turn.status == "final":
                status = "completed"
                if turn.reason == "budget_exhausted":
                    outcome = "budget_exhausted"
                elif not turn.text.strip():
                    outcome = "empty"
            elif turn.error == EMPTY_RESPONSE:
                status, outcome = "completed", "empty"
            elif turn.status == "cancelled":
                status, error = live.cancel_status, live.scope.reason or "cancelled"
            else:
                error = turn.error or turn.reason
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            status, error = live.cancel_status, live.scope.reason or "cancelled"
        except TimeoutError:
            status, error = "timed_out", "its wall-time budget ran out"
        except SubagentError as exc:
            error = str(exc)
        except Exception as exc:  # the child's failure is its own outcome, never the parent's
            error = f"{type(exc).__name__}: {exc}"
        live.ended = True  # its status is decided: a cancel from here on has nothing to stop
        try:
            await self.end_descendants(live)
            if not self._superseded(live):  # else its session's writes are refused anyway
                await self._close(record)
        except Exception:  # a store hiccup must not leave the record unfinished
            log.exception("closing sub-agent %s failed", record.id)
        self._finish(live, status=status, outcome=outcome, result=result, error=error)

    async def take_slot(self, live: Live) -> None:
        """Wait for one of the `max_concurrent` slots (FIFO) for `live`'s next turns."""
        if not live.slot:
            await self._slots.acquire()
            live.slot = True

    def give_slot(self, live: Live) -> None:
        """Free `live`'s slot: it ended, or it waits idle (for its own children, for a person)
        — a parent never keeps the children it waits for queued behind itself."""
        if live.slot:
            live.slot = False
            self._slots.release()

    def _never_ran(self, live: Live) -> None:
        """A child cancelled before its task took its first step never entered `_run`: it
        ends here, so no record stays `queued` and no slot is counted for it."""
        if self.live.get(live.record.id) is live:
            reason = live.scope.reason or "cancelled"
            self._finish(live, status=live.cancel_status, outcome=None, result="", error=reason)

    def _superseded(self, live: Live) -> bool:
        try:
            return self.ownership.superseded(live.record)
        except Exception:  # the store is unreachable: finish as usual (a finished record stays)
            log.exception("checking the owner of sub-agent %s failed", live.record.id)
            return False

    def _finish(
        self, live: Live, *, status: Any, outcome: Any, result: str, error: str
    ) -> SubagentRecord:
        self.ownership.unfence(live.record)
        if self._superseded(live):
            # Another worker took the root session over: the child ends here without a result
            # (its writes were refused); the new owner ends its record `lost` and reports it.
            log.warning("sub-agent %s: its root session was taken over; dropped", live.record.id)
            self.live.pop(live.record.id, None)
            if live.record.mode == "sync" and live.waited:
                live.stops.put_nowait(("done", live.record.id))
            return live.record
        ended = self.store.finish(
            live.record.id,
            status=status,
            outcome=outcome,
            result=result,
            error=error,
            usage=usage_of(live.budget),
            ended_at=self._clock(),
        )
        assert ended is not None  # the record was added by `start`
        record = ended[0]
        live.record = record
        self.live.pop(record.id, None)
        if record.mode == "sync" and live.waited:
            live.stops.put_nowait(("done", record.id))
        else:  # async, or a sync child whose parent stopped waiting (it asked, then ended)
            self._deliver_later(record)
        return record

    def _deliver_later(self, record: SubagentRecord) -> None:
        """Publish the result (where an event carries it), then wake a parent child that
        waits for its children: the result is on its session by then."""
        parent = self.live.get(record.parent) if record.parent is not None else None
        if not self.delivers_events(record):
            return
        above = self.store.get(record.parent) if record.parent is not None else None
        if above is not None and above.finished:
            # Its parent's session is closed for good (another process ran it, or a restart
            # found it): nothing would read the result there; the record is the report.
            self.store.claim_delivery(record.id)
            return
        task = asyncio.ensure_future(self._deliver(record))
        self._deliveries[task] = record.parent_session

        def done(finished: asyncio.Task[None]) -> None:
            self._deliveries.pop(finished, None)
            if parent is not None:
                parent.wakeup.set()

        task.add_done_callback(done)

    # -- the parent's side --------------------------------------------------------------------

    async def wait_stop(self, live: Live) -> Stop:
        """A sync parent waits for its child to ask or end, up to `sync_timeout_s` (then the
        child is cancelled and ends `timed_out`)."""
        live.waited = True
        try:
            async with asyncio.timeout(self.config.sync_timeout_s):
                stop = await live.stops.get()
        except TimeoutError:
            self.cancel_tree(live.record.id, "the sync wait timed out", status="timed_out")
            stop = await live.stops.get()
        finally:
            live.waited = False
        return stop

    def check_owner(self, parent: Parent, subagent_id: str) -> SubagentRecord:
        """The record of one of `parent`'s descendants, by its id or by the id of the
        `spawn_subagent` call that started it; `SubagentError` for anything else."""
        record = self.store.get(subagent_id)
        if record is None:
            record = next(
                (
                    r
                    for r in self.store.list(root_session=parent.session)
                    if r.call_id == subagent_id and r.parent_session == parent.own_session
                ),
                None,
            )
        node = record
        while node is not None and node.parent != parent.child:
            node = self.store.get(node.parent) if node.parent is not None else None
        if record is None or node is None or record.root_session != parent.session:
            raise SubagentError(f"no sub-agent {subagent_id!r} of yours")
        return record

    def cancel_tree(
        self,
        subagent_id: str,
        reason: str,
        *,
        status: Literal["cancelled", "timed_out"] = "cancelled",
    ) -> list[str]:
        """Cancel a child and every descendant; the ids cancelled."""
        ids: list[str] = []
        for record in [*descendants(self.store, subagent_id), self.store.get(subagent_id)]:
            if record is None or record.finished:
                continue
            ids.append(record.id)
            live = self.live.get(record.id)
            if live is not None and (live.ended or live.scope.cancelled):
                continue  # its run is over or already being cancelled: nothing left to stop
            if live is None:  # recorded by another process, or its run already ended
                done = self.store.finish(
                    record.id,
                    status=status,
                    outcome=None,
                    result="",
                    error=reason,
                    usage=record.usage,
                    ended_at=self._clock(),
                )
                if done is not None and done[1] and record.mode != "sync":
                    self._deliver_later(done[0])
                continue
            live.cancel_status = status
            live.scope.cancel(reason)
            if live.answer is not None and not live.answer.done():
                live.answer.cancel()
            if live.task is not None:
                live.task.cancel()
        return ids

    async def end_descendants(self, live: Live) -> None:
        """A child never outlives its parent: when `live` ends, however it ends, whatever of its
        subtree still runs is cancelled and awaited, and their results are published (to its
        session, which `close` then closes)."""
        below = [i for i, other in self.live.items() if self._is_below(other, live.record.id)]
        for subagent_id in below:
            self.cancel_tree(subagent_id, f"its parent {live.record.id} ended")
        await self.wait_ended(below)
        await self.flush(live.record.session)

    def _is_below(self, live: Live, ancestor: str) -> bool:
        """Whether running `live` descends from `ancestor` (in memory: the ancestors of a
        running child are running too, a child never outliving its parent)."""
        parent = live.record.parent
        while parent is not None:
            if parent == ancestor:
                return True
            above = self.live.get(parent)
            parent = above.record.parent if above is not None else None
        return False

    async def wait_ended(self, ids: list[str]) -> None:
        tasks = [live.task for i in ids if (live := self.live.get(i)) and live.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def message(self, parent: Parent, subagent_id: str, text: str) -> tuple[Live, bool]:
        """Give a running child the parent's text: the answer when the child waits on a
        question (True), else nothing yet (False: the caller publishes it as a message,
        `child.send_input`)."""
        record = self.check_owner(parent, subagent_id)
        live = self.live.get(record.id)
        if live is None:
            raise SubagentError(f"sub-agent {record.id} is not running (status {record.status})")
        live.wakeup.set()
        if live.answer is not None and not live.answer.done():
            live.answer.set_result(text)
            return live, True
        return live, False

    # -- the end of a run ---------------------------------------------------------------------

    async def settle(self, deadline_s: float) -> list[SubagentRecord]:
        """Wait up to `deadline_s` for every running child, cancel the rest, and return the
        records of every child that was running (each with its final status)."""
        ids = list(self.live)
        tasks = [live.task for live in self.live.values() if live.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=deadline_s)
        for subagent_id in list(self.live):
            self.cancel_tree(subagent_id, f"the run ended and {deadline_s:g} s passed")
        await self.wait_ended(list(self.live))
        return [r for r in (self.store.get(i) for i in ids) if r is not None]

    def recover(self, *, root_session: str | None = None) -> list[SubagentRecord]:
        """After a restart (or a takeover of `root_session`): every unfinished child of a
        runner that is gone ends `lost`, and every finished result not known to be delivered
        is delivered (again: the bus keeps one copy) — a sync child's too when the call that
        waited for it died with its process."""
        ended = self._end_orphans(root_session)
        for record in self.store.list(root_session=root_session):
            if not record.finished or record.delivered:
                continue
            # A sync child is its waiting call's result, unless the process of that call is
            # gone (the call was closed by session repair): then the event tells the parent.
            if record.mode != "sync" or not self.ownership.alive(record):
                self._deliver_later(record)
        return ended

    def reap(self) -> list[SubagentRecord]:
        """Every unfinished child of a runner that is gone ends `lost`, and is delivered —
        the periodic sweep of a shared store, where another worker may die at any time and
        no restart here would notice (the delivery wakes the parent's session wherever)."""
        ended = self._end_orphans(None)
        for record in ended:
            self._deliver_later(record)
        return ended

    def _end_orphans(self, root_session: str | None) -> list[SubagentRecord]:
        ended: list[SubagentRecord] = []
        for record in self.store.list(root_session=root_session, active_only=True):
            if record.id in self.live or self.ownership.alive(record):
                continue
            done = self.store.finish(
                record.id,
                status="lost",
                outcome=None,
                result="",
                error=f"the process that ran it (owner {record.owner}) ended before it finished",
                usage=record.usage,
                ended_at=self._clock(),
            )
            if done is not None and done[1]:  # another worker may have ended it first
                ended.append(done[0])
                if self.on_lost is not None:
                    try:
                        self.on_lost(done[0])
                    except Exception:  # a store hiccup must not stop the sweep
                        log.exception("telling of lost sub-agent %s failed", record.id)
        return ended

    async def _watch_cancels(self) -> None:
        """While children run: the cancels requested by another process (`heron agents
        cancel`), and each child's usage so far (its subtree's), for `heron agents tree`."""
        while self.live:
            await asyncio.sleep(self.config.cancel_poll_s)
            try:
                for subagent_id in self.store.cancel_requests():
                    if subagent_id in self.live:
                        self.cancel_tree(subagent_id, "cancelled by the operator")
                for live in list(self.live.values()):
                    self.store.record_usage(live.record.id, usage_of(live.budget))
            except Exception:  # a store hiccup: the next poll tries again
                log.exception("reading cancel requests failed")

    async def aclose(self) -> None:
        """Cancel every child still running here (each is reported as cancelled)."""
        if self._watcher is not None:
            self._watcher.cancel()
        for subagent_id in list(self.live):
            self.cancel_tree(subagent_id, "heron is shutting down")
        await self.wait_ended(list(self.live))
        await self.flush()

    async def flush(self, session: str | None = None) -> None:
        """Wait for the results being delivered (to `session`, or anywhere)."""
        while tasks := [t for t, to in self._deliveries.items() if session in (None, to)]:
            await asyncio.gather(*tasks, return_exceptions=True)


async def _nothing_to_close(_record: SubagentRecord) -> None:
    """A runner whose children keep no session of their own."""
