"""`EventDrivenAgent`: an always-on agent fed by the durable event bus.

Events are consumed only at safe points: before a turn, and at the engine's safe points
(`TurnState.on_safe_point`, after each round of tool results). Each event is routed
(`heron.always_on.bus.routing`) to one of three strategies:

- **queue**: it waits for the next safe point; the whole batch is then appended as ONE user
  message (`heron.always_on.bus.framing`) and the model reads it in its next step.
- **cancel**: the running step is interrupted at once (`CancelScope.cancel`): a streaming
  model is stopped and its thinking discarded; running tools are detached (they keep running,
  the model sees a placeholder result naming the background task) or, for a stop request,
  cancelled. The turn ends, the whole queue is drained into one message and the model is
  called again at once.
- **parallel**: a side session answers concurrently (`side_agent`, or the same agent on a
  fresh history, persisted as session `<session>/side/<event id>`); the question and answer
  are appended to the main history at its next safe point, marked as run in parallel.

The five rules for a synchronous model in an asynchronous world, as this loop applies them:
(1) every message the engine appends — the assistant's tool calls before they run, the final
answer before its `final` event is shown — is written to the session at once
(`TurnState.on_append`); (2) tool results are recorded when their tools finish, never earlier
(a crash in between is closed on restart by a result saying the outcome is unknown); (3) an
interrupt during a running tool leaves the engine's placeholder result (`not_started`,
`cancelled_while_running`, or `running_in_background as task X`) and the real result of a
detached tool arrives later as a NEW `tool.result` event naming the call id and task — never
as a second result for the same call; (4) an interrupt while the model thinks discards the
thinking; (5) non-interrupting events are appended in one batch at the next safe point.

Exactly once: every append of event content goes through `BusStore.consume`, which writes the
history messages and marks the events consumed in one transaction. Engine-produced messages
are written as the engine appends them. A restart reloads the session, closes tool calls a
crash left open, and answers a history left waiting for the model.

Poison messages: an event whose consumption fails (a routing rule or the framing raises on
it) is counted, retried one event at a time, and quarantined after `max_attempts` failures
(`heron.always_on.bus.quarantine`): announced as a `system.dead_letter` event and an alert,
listed by `heron events tail --dead`; the loop goes on with the next event.

Single writer: the loop holds the session through a `SessionWriter` (`heron.sessions.writer`,
the writer of every front end: the same repair, the same head check), so a second writer on
the same session is refused with `ConcurrentWriteError` instead of being interleaved.

Assistant text is private (`reply_tools`): in `heron serve` nothing the model writes as its
answer reaches a person — only its messaging tools do. When a turn that took in an event marked
as needing a reply (`EventContent.needs_reply`) ends without a successful call of one of those
tools, the loop appends one runtime reminder and runs one more turn; never a second.

Many sessions in one process (`heron.always_on.sessions.SessionHost`): the host gives each
awake session a writer from `SessionWriter.wake` (the history is read only when the model is
first called), watches the store once for all of them (`watch=False` here, `notify` there),
polls once for all of them (`check_pending`), and parks a session when `idle` says nothing is
left in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from heron._support.clock import Clock, RealClock, timestamp
from heron.agent import Agent
from heron.always_on.bus.framing import SideAnswer, frame_batch, side_pair, side_question
from heron.always_on.bus.model import BusEvent, EventContent, EventContext
from heron.always_on.bus.quarantine import DEFAULT_MAX_ATTEMPTS, Quarantine
from heron.always_on.bus.routing import Route, Router
from heron.always_on.bus.store import AlreadyConsumedError, BusStore, Unwatch
from heron.errors import StoreError
from heron.messages import AssistantMessage, Message, ToolResultMessage, UserMessage
from heron.sessions.store import ConcurrentWriteError, SessionStore
from heron.sessions.writer import SessionWriter
from heron.turn.context import BackgroundResult, SafePoint, TurnState
from heron.turn.events import EventSink, discard
from heron.turn.outcome import TurnOutcome


def side_session_name(session: str, event_id: str) -> str:
    """Where the side session answering event `event_id` of `session` is stored."""
    return f"{session}/side/{event_id}"


class EventDrivenAgent:
    """Runs `agent` on the events of one session. See the module docstring."""

    def __init__(
        self,
        agent: Agent,
        store: BusStore,
        sessions: SessionStore,
        *,
        session: str = "default",
        router: Router | None = None,
        clock: Clock | None = None,
        side_agent: Agent | None = None,
        sink: EventSink = discard,
        poll_interval: float | None = None,
        prepare: Callable[[TurnState], None] | None = None,
        writer: SessionWriter | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        watch: bool = True,
        reply_tools: frozenset[str] = frozenset(),
    ) -> None:
        """`store` and `sessions` must share one database, so that `consume` is atomic.

        `sink` receives every turn event of the main and side sessions. `poll_interval`
        (seconds on `clock`) makes `serve` also look for events other processes published.
        `prepare` sees each main turn's state before it runs (a front end sets its channel or
        an extra `on_append` there); the agent's per-turn exclusions are already in it
        (`Agent.turn_state`). `writer`: the main session's writer, when the front end already
        holds one (it must write `session` in `sessions`); by default the loop opens its own
        on first use. `max_attempts`: failed consumptions after which an event is
        quarantined (`heron.always_on.bus.quarantine`). `watch=False`: the caller forwards the
        store's publishes of this session to `notify` itself (a host of many sessions watches
        the store once for all).
        `reply_tools`: the tools that reach a person; with any, an event needing a reply that
        a turn leaves unanswered gets one reminder turn (see the module docstring).
        """
        if writer is not None and (writer.name != session or writer.store is not sessions):
            raise ValueError(f"the writer holds session {writer.name!r}, not {session!r} here")
        self.agent = agent
        self.store = store
        self.sessions = sessions
        self.session = session
        self.router = router or Router()
        self.clock: Clock = clock or RealClock()
        self.side_agent = side_agent
        self.sink = sink
        self.poll_interval = poll_interval
        self.prepare = prepare
        self.watch = watch
        self.reply_tools = reply_tools
        self._awaiting_reply: list[BusEvent] = []
        self.outcomes: list[TurnOutcome] = []
        """Every finished main turn, in order."""
        self._main: SessionWriter | None = writer
        self._started = False
        self._unwatch: Unwatch | None = None
        self._running: TurnState | None = None
        self._unanswered = False
        self._interrupt_requested = False
        self._answer_interrupt = True
        self._stopping = False
        self._wake = asyncio.Event()
        self._busy = asyncio.Lock()
        self._routes: dict[str, Route] = {}
        self._classifying: dict[str, asyncio.Task[Route]] = {}
        self._sides: dict[str, asyncio.Task[SideAnswer]] = {}
        self._background: dict[str, asyncio.Task[Any]] = {}
        self._publishing: set[asyncio.Task[bool]] = set()
        self.quarantine = Quarantine(
            store, session, clock=self.clock, max_attempts=max_attempts, alerts=agent.alerts
        )
        self._held_sides: list[SideAnswer] = []

    # -- public API -------------------------------------------------------------------------

    @property
    def history(self) -> list[Message]:
        """The main session's live history (everything consumed, plus the running turn)."""
        return self._start().history

    @property
    def running(self) -> bool:
        """True while a main turn runs."""
        return self._running is not None

    @property
    def background_tasks(self) -> list[str]:
        """Ids of tools detached by an interrupt and still running."""
        return list(self._background)

    async def publish(self, event: BusEvent) -> bool:
        """Publish an event of this session; `False` for a duplicate. Wakes the loop at once."""
        self._check_session(event)
        self._start()
        return await self.store.publish(event)

    async def publish_many(self, events: Sequence[BusEvent]) -> list[bool]:
        """Publish a burst with one durable write."""
        for event in events:
            self._check_session(event)
        self._start()
        return await self.store.publish_many(events)

    async def run_until_idle(self) -> None:
        """Process events until none is pending, no side session is in flight and the history
        is answered. Tools detached earlier may still be running (see `wait_background`).
        Concurrent calls take turns; never call it from a tool of this agent."""
        self._start()
        async with self._busy:
            while True:
                self._wake.clear()
                if await self._step():
                    continue
                if not self._sides:
                    return
                waker = asyncio.ensure_future(self._wake.wait())
                try:
                    await asyncio.wait(
                        [waker, *self._sides.values()], return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    waker.cancel()

    async def serve(self) -> None:
        """Run until `stop()`: process events as they arrive (and poll, if configured). A
        `stop()` that came before `serve` started ends it at once; `serve` may be called
        again afterwards."""
        self._start()
        poller = asyncio.ensure_future(self._poll()) if self.poll_interval else None
        try:
            while not self._stopping:
                await self.run_until_idle()
                if not self._stopping:
                    await self._wake.wait()
        finally:
            self._stopping = False
            if poller is not None:
                poller.cancel()
                await asyncio.gather(poller, return_exceptions=True)

    def stop(self) -> None:
        """Make `serve` return once the current turn is done."""
        self._stopping = True
        self._wake.set()

    def interrupt(self, reason: str) -> bool:
        """Cancel the running main turn (running tools are cancelled) without answering it:
        the model is not called again until the next event. False when no turn runs."""
        if self._running is None:
            return False
        self._answer_interrupt = False
        self._running.cancel.cancel(reason)
        return True

    @property
    def idle(self) -> bool:
        """Nothing in flight: no turn, no history waiting for the model, no event routed but
        not consumed, no side session, no detached tool or result being published. (Events
        pending in the store that were not routed yet are the caller's to check.)"""
        return not (
            self._running
            or self._unanswered
            or self._routes
            or self._classifying
            or self._sides
            or self._background
            or self._publishing
        )

    def notify(self, event: BusEvent) -> None:
        """An event of this session was published (by the caller's watch of the store)."""
        self._on_published(event)

    async def check_pending(self) -> None:
        """Look for pending events written by other processes or connections (what the
        poller does every `poll_interval`)."""
        if not self._started:
            return
        for event in await self.store.pending(self.session):
            self._on_published(event)

    async def wait_background(self) -> None:
        """Wait until every detached tool has finished and its result event is published."""
        while self._background or self._publishing:
            await asyncio.wait([*self._background.values(), *self._publishing])

    async def aclose(self) -> None:
        """Stop: cancel detached tools (their cancellation is published as events, so the next
        start tells the model), abandon side sessions and stop watching the store."""
        self.stop()
        for task in self._background.values():
            task.cancel()
        await self.wait_background()
        pending = [*self._sides.values(), *self._classifying.values()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None

    # -- the loop ---------------------------------------------------------------------------

    def _start(self) -> SessionWriter:
        if self._main is None:
            self._main = SessionWriter.open(self.sessions, self.session)
        if not self._started:
            self._started = True
            last = self._main.last  # read without the history (a woken writer has none yet)
            # A crash after events were consumed but before the model answered them.
            self._unanswered = last is not None and not isinstance(last, AssistantMessage)
            if self.watch:
                self._unwatch = self.store.watch(self._on_published)
        return self._main

    async def _step(self) -> bool:
        """One safe point between turns: consume what is pending, answer it. False if idle."""
        main = self._start()
        self._interrupt_requested = False  # set again by any urgent arrival from here on
        await self.quarantine.announce()
        failures = self.quarantine.failures
        batch = await self._fetch()
        sides = self._take_sides()
        if not batch and not sides and not self._unanswered:
            return self.quarantine.failures != failures  # a failure counted: try again
        ids = [e.id for e in batch] + [s.event.id for s in sides]
        if batch or self._unanswered:

            def framed() -> list[Message]:
                return [frame_batch(batch, sides)] if ids else []

            if not await self._take_in(batch, sides, framed):
                return True  # counted (or quarantined); the next step retries one by one
            self._unanswered = True
            self._note_replies(batch)
        else:
            # Idle: a side answer is a finished exchange, appended without calling the model.
            if not await self._take_in([], sides, lambda: [m for s in sides for m in side_pair(s)]):
                return True
        if self._unanswered and not self._interrupt_requested:
            start = len(main.history)
            await self._run_turn(main)
            await self._remind(main, start)
        return True

    def _note_replies(self, batch: Sequence[BusEvent]) -> None:
        if self.reply_tools:
            self._awaiting_reply += [e for e in batch if e.content.needs_reply]

    async def _remind(self, main: SessionWriter, start: int) -> None:
        """One reminder turn when the events needing a reply got none (module docstring)."""
        waiting, self._awaiting_reply = self._awaiting_reply, []
        last = self.outcomes[-1] if self.outcomes else None
        if not waiting or last is None or last.status != "final" or self._spoke(main, start):
            return
        await self._consume([], [_reminder(waiting, sorted(self.reply_tools))])
        self._unanswered = True
        await self._run_turn(main)
        self._awaiting_reply.clear()  # one reminder; what the reminder turn took in waits no more

    def _spoke(self, main: SessionWriter, start: int) -> bool:
        return any(
            isinstance(m, ToolResultMessage) and m.name in self.reply_tools and not m.is_error
            for m in main.history[start:]
        )

    async def _run_turn(self, main: SessionWriter) -> None:
        main.count_with(self.agent.trimmer)
        # The exclusions follow the last user message: the batch of events this turn answers.
        state = self.agent.turn_state(
            history=main.history,
            sink=self.sink,
            on_append=main.on_append,
            known_call_ids=main.call_ids,
        )
        state.background = self._background
        state.on_safe_point = self._on_safe_point
        state.on_background_result = self._on_background_result
        if self.prepare is not None:
            self.prepare(state)
        self._running = state
        self._answer_interrupt = True
        try:
            outcome = await self.agent.run_turn(state)
        finally:
            self._running = None
        main.flush()
        self.outcomes.append(outcome)
        # An event's interrupt comes with the event (pending, or consumed at a safe point just
        # now); an `interrupt()` call asks for no answer.
        self._unanswered = outcome.status == "cancelled" and self._answer_interrupt

    async def _on_safe_point(self, point: SafePoint) -> None:
        main = self._start()
        state = self._running
        if point == "after_model" or state is None or state.cancel.cancelled:
            main.flush()
            return
        batch = await self._fetch()
        if state.cancel.cancelled:  # an interrupt arrived meanwhile: the turn ends here
            main.flush()
            return
        sides = self._take_sides()
        if not batch and not sides:
            main.flush()
            return
        if not await self._take_in(batch, sides, lambda: [frame_batch(batch, sides)]):
            main.flush()
            return
        self._note_replies(batch)

    async def _fetch(self) -> list[BusEvent]:
        """Pending events to append now, each routed; parallel ones go to side sessions."""
        events = self.quarantine.narrow(await self.store.pending(self.session))
        for event in events:
            if event.id in self._routes:
                continue
            try:
                classifying = self._classifying.get(event.id)
                if classifying is not None:
                    await classifying
                else:
                    self._apply(event, await self.router.route(event), live=False)
            except Exception as exc:  # a router that fails on this event: poison
                await self.quarantine.failed([event], exc)
        return [
            e for e in events if e.id in self._routes and self._routes[e.id].strategy != "parallel"
        ]

    async def _take_in(
        self,
        batch: list[BusEvent],
        sides: list[SideAnswer],
        messages: Callable[[], list[Message]],
    ) -> bool:
        """`_consume` the batch and side answers as `messages()`; False when that failed for
        the events themselves (framing, a bad payload): the failure is counted against them
        (`Quarantine.failed`), side answers wait for the next attempt, nothing was appended."""
        try:
            await self._consume([e.id for e in batch] + [s.event.id for s in sides], messages())
        except (StoreError, ConcurrentWriteError, AlreadyConsumedError):
            raise  # about the store or another writer, not about the events
        except Exception as exc:
            dead = await self.quarantine.failed([*batch, *(s.event for s in sides)], exc)
            self._held_sides += [s for s in sides if s.event.id not in dead]
            return False
        return True

    async def _consume(self, event_ids: list[str], messages: list[Message]) -> None:
        main = self._start()
        batch = [*main.unsaved(), *messages]
        if event_ids:
            head = await self.store.consume(
                self.session, event_ids, batch, expected_last_entry=main.head
            )
        elif batch:
            head = self.sessions.append(self.session, batch, expected_last_entry=main.head)
        else:
            return
        main.stored(messages, head)
        for event_id in event_ids:
            self._routes.pop(event_id, None)

    # -- arrivals ---------------------------------------------------------------------------

    def _on_published(self, event: BusEvent) -> None:
        """Store callback, right after an event is durable: route it, interrupt if urgent."""
        if event.session != self.session or not self._started:
            return
        if event.id in self._routes or event.id in self._classifying:
            return
        try:
            route = self.router.route_now(event)
        except Exception:  # a rule failing on this event: `_fetch` counts it against the event
            self._wake.set()
            return
        if route is not None:
            self._apply(event, route, live=True)
            return
        task = asyncio.ensure_future(self._classify(event))
        self._classifying[event.id] = task

    async def _classify(self, event: BusEvent) -> Route:
        try:
            route = await self.router.route(event)
        finally:
            self._classifying.pop(event.id, None)
        self._apply(event, route, live=True)
        return route

    def _apply(self, event: BusEvent, route: Route, *, live: bool) -> None:
        self._routes[event.id] = route
        if route.strategy == "parallel" and event.id not in self._sides:
            side = asyncio.ensure_future(self._answer_side(event))
            side.add_done_callback(lambda _: self._wake.set())
            self._sides[event.id] = side
        elif route.strategy == "cancel":
            if route.cancel_mode == "cancel":
                for task in self._background.values():
                    task.cancel()
            if live and self._running is not None:
                reason = f"interrupted by {event.kind} event {event.id}"
                self._running.cancel.cancel(reason, mode=route.cancel_mode)
            elif live:
                self._interrupt_requested = True
        self._wake.set()

    def _on_background_result(self, result: BackgroundResult) -> None:
        """A detached tool finished: its real result becomes a new `tool.result` event."""
        event = BusEvent(
            kind="tool.result",
            source="tool",
            channel="async_tool",
            session=self.session,
            timestamp=timestamp(self.clock),
            content=EventContent(
                text=result.output,
                data={"tool": result.tool, "success": result.success, "detached": True},
            ),
            context=EventContext(call_id=result.call_id, related_task=result.task_id),
            idempotency_key=f"tool.result:{result.task_id}",
        )
        task = asyncio.ensure_future(self.store.publish(event))
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    async def _poll(self) -> None:
        assert self.poll_interval is not None  # serve starts the poller only with an interval
        while True:
            await self.clock.sleep(self.poll_interval)
            await self.check_pending()

    # -- side sessions ----------------------------------------------------------------------

    async def _answer_side(self, event: BusEvent) -> SideAnswer:
        side = SessionWriter.open(self.sessions, side_session_name(self.session, event.id))
        last = side.history[-1] if side.history else None
        if isinstance(last, AssistantMessage) and not last.tool_calls:
            return SideAnswer(event=event, answer=last.text)  # answered before a restart
        if not side.history:
            side.history.append(side_question(event))
        agent = self.side_agent or self.agent
        side.count_with(agent.trimmer)
        state = agent.turn_state(
            history=side.history,
            sink=self.sink,
            on_append=side.on_append,
            known_call_ids=side.call_ids,
        )
        outcome = await agent.run_turn(state)
        side.flush()
        if outcome.status == "final":
            return SideAnswer(event=event, answer=outcome.text)
        problem = outcome.error or outcome.reason
        return SideAnswer(event=event, answer=f"(no answer: {problem})", ok=False)

    def _take_sides(self) -> list[SideAnswer]:
        done = [event_id for event_id, task in self._sides.items() if task.done()]
        held, self._held_sides = self._held_sides, []
        return held + [self._sides.pop(event_id).result() for event_id in done]

    def _check_session(self, event: BusEvent) -> None:
        if event.session != self.session:
            raise ValueError(
                f"event {event.id} is for session {event.session!r}, this agent serves "
                f"{self.session!r}"
            )


def _reminder(events: Sequence[BusEvent], tools: Sequence[str]) -> UserMessage:
    what = ", ".join(f"{e.kind} {e.id} via {e.channel}" for e in events)
    return UserMessage(
        source="runtime",
        content=(
            f"[runtime] This turn took in events that need a reply ({what}), and it ended "
            "without a message to anyone. Your own answer text is private: nobody sees it. "
            f"If a reply is due, send it now with one of: {', '.join(tools)}. If none is "
            "needed, say so in one line."
        ),
    )
