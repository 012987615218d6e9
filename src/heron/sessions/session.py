"""`CliSession`: a stored session held by one command-line process (`heron run --session`,
`heron chat`, `heron sessions resume`).

`CliSession.open` takes a session for this process and keeps it until `close`:

1. **ownership**: the session's `SessionLock` (`heron.sessions.lock`), held for the process's
   lifetime, so a second process on the same session fails at once with `SessionInUseError`.
2. **repair**: the session's `SessionWriter` (`heron.sessions.writer`) loads the history and
   closes a turn cut off mid-call with synthetic results; audit rows of those calls become
   `lost`.
3. **write before show**: every message the loop appends is stored before any event shows it
   (`TurnState.on_append`); the user's prompt is stored before the model sees it.
4. **audit**: the execution audit trail of this session joins the agent's observer.

`open` is where the command line's stores are built: the SQLite session store and, on the
same connection, the SQLite execution audit (`heron.audit.sqlite_store`).
"""

from __future__ import annotations

import contextlib
import getpass
import secrets
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from heron._support.limits import clean_text
from heron.agent import Agent
from heron.audit.executions import ExecutionAuditTrail
from heron.audit.sqlite_store import SqliteExecutionStore
from heron.messages import MediaPart, Message, ToolResultMessage, UserMessage
from heron.safety.secrets import known_secrets
from heron.sessions.lock import SessionLock
from heron.sessions.names import check_session_name as check_session_name
from heron.sessions.sqlite_store import SqliteSessionStore
from heron.sessions.writer import SessionWriter
from heron.turn.cancel import CancelScope
from heron.turn.events import EventSink
from heron.turn.observer import FanOutObserver
from heron.turn.outcome import TurnOutcome


def new_session_name(now: float | None = None) -> str:
    """A fresh, sortable session id: `YYYYMMDD-HHMMSS-xxxxxx` (local time, random suffix)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{stamp}-{secrets.token_hex(3)}"


class CliSession:
    """A session held by one command-line process. See the module docstring."""

    def __init__(
        self,
        *,
        store: SqliteSessionStore,
        lock: SessionLock,
        writer: SessionWriter,
        trail: ExecutionAuditTrail,
        created: bool,
    ) -> None:
        self.store = store
        """The SQLite session store (`heron chat` runs its bus on the same connection)."""
        self.writer = writer
        self.trail = trail
        self.created = created
        """True when the session had no entries before this process."""
        self._lock = lock

    @classmethod
    def open(
        cls,
        state_dir: Path,
        name: str | None,
        *,
        operator: str | None = None,
        must_exist: bool = False,
    ) -> CliSession:
        """Lock, load and repair session `name` (a new id when `None`).

        Raises `SessionInUseError`, `ValueError` (a bad name, or an unknown session with
        `must_exist`) and `SessionRepairError` (a history appending cannot mend).
        """
        name = new_session_name() if name is None else name
        lock = SessionLock(state_dir, name)
        lock.acquire()
        store: SqliteSessionStore | None = None
        try:
            store = SqliteSessionStore.open(state_dir)
            created = store.head(name) == 0
            if created:
                if must_exist:
                    raise ValueError(f"no session named {name!r}; see `heron sessions list`")
                check_session_name(name)
            writer = SessionWriter.open(store, name)
            trail = ExecutionAuditTrail(
                SqliteExecutionStore(store.conn),
                session=name,
                operator=operator or _local_operator(),
            )
            trail.mark_lost([r.call_id for r in writer.repaired])
        except BaseException:
            if store is not None:
                store.close()
            lock.release()
            raise
        return cls(store=store, lock=lock, writer=writer, trail=trail, created=created)

    @property
    def name(self) -> str:
        return self.writer.name

    @property
    def history(self) -> list[Message]:
        return self.writer.history

    @property
    def repaired(self) -> tuple[ToolResultMessage, ...]:
        return self.writer.repaired

    def attach(self, agent: Agent) -> None:
        """Make the agent's observer feed the audit trail too (after the observer it had);
        calls of an unnamed agent are recorded as agent `default`."""
        observer = agent.observer
        if isinstance(observer, FanOutObserver) and self.trail in observer.observers:
            return
        self.trail.default_agent = agent.name or "default"
        agent.observer = FanOutObserver(observer, self.trail)

    def on_append(self, messages: tuple[Message, ...]) -> None:
        """`TurnState.on_append`: store first, then let the trail index the reasons."""
        self.writer.on_append(messages)
        self.trail.note_messages(messages)

    def sink(self, inner: EventSink) -> EventSink:
        """`inner`, with the audit trail watching approval decisions first."""
        return self.trail.watching(inner)

    async def run_turn(
        self,
        agent: Agent,
        prompt: str,
        *,
        sink: EventSink,
        cancel: CancelScope,
        channel: str,
        on_stored: Callable[[tuple[Message, ...]], None] | None = None,
        media: Sequence[MediaPart] = (),
    ) -> TurnOutcome:
        """Store `prompt` (with the images and PDFs of `media`), then run one turn of `agent`
        on the session's history.

        `agent` must be `attach`ed. `on_stored` sees each batch of the turn's messages once it
        is stored. Raises `ConcurrentWriteError` if another writer appended to the session
        meanwhile; what was stored before stays stored.
        """
        # A pasted provider key stays out of the store; then a command line's undecodable
        # bytes get the text replacement (masking first, as everywhere data enters).
        prompt = clean_text(known_secrets().mask(prompt))
        self.writer.count_with(agent.trimmer)  # before the history grows: see `count_with`
        self.writer.add(UserMessage(content=prompt, media=tuple(media)))
        on_append = self.on_append
        if on_stored is not None:

            def on_append(messages: tuple[Message, ...]) -> None:
                self.on_append(messages)
                on_stored(messages)

        state = agent.turn_state(
            history=self.writer.history,
            prompt=prompt,
            sink=self.sink(sink),
            cancel=cancel,
            channel=channel,
            on_append=on_append,
            known_call_ids=self.writer.call_ids,
        )
        outcome = await agent.run_turn(state)
        self.writer.flush()
        return outcome

    def abandon(self) -> None:
        """Before a hard exit mid-turn: close open tool calls so the stored history is valid
        now, and mark their audit rows `lost`. Never raises: the process is leaving."""
        with contextlib.suppress(Exception):
            repairs = self.writer.close_open_calls()
            self.trail.mark_lost([r.call_id for r in repairs])

    def close(self) -> None:
        """Release the session: close the store and drop the lock."""
        self.store.close()
        self._lock.release()


def _local_operator() -> str | None:
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return None
