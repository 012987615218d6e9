"""`heron serve`'s side of reaching people: the outbox of the process, what comes due, and the
notices the runtime sends by itself.

- `ServeMessaging.open` builds the `Outbox` from the configuration
  (`heron.collaboration.setup.open_outbox`); mail it sends is recorded in the mail thread
  index, so replies come back to the session that wrote.
- `run` delivers what comes due — pushes held back by quiet hours, the recall of unread urgent
  messages — every `interval_s`.
- `CompletionNotices` (per session, as lifecycle hooks): a turn that ran at least
  `[messages] notify_after_s` and sent no message ends with a notification to the user; so
  does a background job that ran that long (`job_ended`, from the bus). The notice says what
  finished and how long it took, not what the model wrote: assistant text stays private.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from heron._support.clock import Clock, RealClock
from heron.always_on.bus.model import BusEvent
from heron.always_on.channels.mail_inbound import ThreadIndex
from heron.always_on.hooks import LifecycleHooks
from heron.always_on.jobs.store import JobStore
from heron.collaboration.outbox import Outbox
from heron.collaboration.setup import MessagingConfig, open_outbox
from heron.collaboration.sqlite_store import SqliteMessageStore
from heron.collaboration.store import StoredMessage
from heron.collaboration.tools import MESSAGE_TOOLS
from heron.messages import ToolResultMessage
from heron.turn.context import TurnState
from heron.turn.outcome import TurnOutcome

log = logging.getLogger("heron.always_on.messaging")

if TYPE_CHECKING:
    from heron.collaboration.postgres_store import PostgresMessageStore

__all__ = ["CompletionNotices", "MessagingConfig", "ServeMessaging"]
# `MessagingConfig` is `heron.collaboration.setup`'s, imported here for serve's callers.


class ServeMessaging:
    """The outbox of one `heron serve` process and its background delivery."""

    def __init__(
        self,
        outbox: Outbox,
        store: SqliteMessageStore | PostgresMessageStore,
        config: MessagingConfig,
    ):
        self.outbox = outbox
        self.store = store
        self.config = config
        self._notices: set[asyncio.Task[Any]] = set()

    @classmethod
    def open(
        cls,
        config: MessagingConfig,
        *,
        state_dir: Path,
        threads: ThreadIndex | None = None,
        console: TextIO | None = None,
        clock: Clock | None = None,
        store_url: str | None = None,
    ) -> ServeMessaging:
        """The outbox (`heron.collaboration.setup.open_outbox`; the console channel writes to
        `console`, default standard error; the messages are in the shared store at
        `store_url`, else in `state_dir`); mail it sends is recorded in `threads`."""
        clock = clock or RealClock()

        def sent(message_id: str, message: StoredMessage) -> None:
            if threads is not None and message.session:
                threads.record([(message_id, message.session)], now=clock.time())

        outbox, store = open_outbox(
            config,
            state_dir=state_dir,
            console=console or sys.stderr,
            on_mail_sent=sent,
            clock=clock,
            store_url=store_url,
        )
        return cls(outbox, store, config)

    async def run(self, interval_s: float) -> None:
        """Deliver what comes due, every `interval_s` seconds on the outbox's clock."""
        while True:
            try:
                await self.outbox.tick()
            except Exception:  # a broken channel or store must not end serve; next tick retries
                log.exception("delivering due messages failed")
            await self.outbox.clock.sleep(interval_s)

    def notices(self, session: str, shared: LifecycleHooks) -> LifecycleHooks:
        """The lifecycle hooks of one session: `shared` and its completion notice."""
        return CompletionNotices(self, session, shared)

    def notify(self, text: str, *, session: str | None) -> None:
        """Send a runtime notice to the user in the background."""
        task = asyncio.ensure_future(
            self.outbox.send(kind="notification", text=text, urgency="normal", session=session)
        )
        self._notices.add(task)
        task.add_done_callback(self._notice_done)

    def _notice_done(self, task: asyncio.Task[Any]) -> None:
        self._notices.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a completion notice failed: %s", task.exception())

    def job_ended(self, event: BusEvent, jobs: JobStore) -> None:
        """A `job.exit`/`job.lost` event: notify when the job ran long enough."""
        after = self.config.messages.notify_after_s
        job_id = event.content.data.get("job_id")
        if after is None or event.kind not in ("job.exit", "job.lost") or not job_id:
            return
        job = jobs.get(str(job_id))
        if job is None or job.ended_at is None or job.ended_at - job.started_at < after:
            return
        first = event.content.text.splitlines()[0] if event.content.text else f"job {job_id}"
        took = _duration(job.ended_at - job.started_at)
        self.notify(f"Finished after {took}: {first}", session=event.session)

    async def drain(self) -> None:
        """Wait (up to 5 s each) for the notices still being sent."""
        for task in list(self._notices):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, timeout=5.0)

    async def aclose(self) -> None:
        await self.drain()
        self.store.close()


class CompletionNotices(LifecycleHooks):
    """`shared`'s turn hooks, then this session's completion notice (module docstring)."""

    def __init__(self, messaging: ServeMessaging, session: str, shared: LifecycleHooks):
        super().__init__()
        self.messaging = messaging
        self.session = session
        self.shared = shared
        self._started: dict[int, tuple[float, int]] = {}

    async def turn_starting(self, state: TurnState) -> None:
        await self.shared.turn_starting(state)
        self._started[id(state)] = (self.messaging.outbox.clock.time(), len(state.history))

    async def turn_finished(self, state: TurnState, outcome: TurnOutcome) -> None:
        await self.shared.turn_finished(state, outcome)
        started, index = self._started.pop(id(state), (None, 0))
        after = self.messaging.config.messages.notify_after_s
        if started is None or after is None or outcome.status != "final":
            return
        took = self.messaging.outbox.clock.time() - started
        spoke = any(
            isinstance(m, ToolResultMessage) and m.name in MESSAGE_TOOLS and not m.is_error
            for m in state.history[index:]
        )
        if took >= after and not spoke:
            self.messaging.notify(
                f"Finished after {_duration(took)}: a task of session {self.session!r} "
                f"(see `heron sessions show {self.session}`).",
                session=self.session,
            )


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"
