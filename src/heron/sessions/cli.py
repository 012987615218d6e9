"""Sessions for the command-line front ends (`heron run`, `heron chat`).

`CliSession.open` takes a session for this process and keeps it until `close`:

1. **ownership**: an advisory lock (`SessionLock`, `flock` on a file in the state directory)
   held for the process's lifetime. A second `heron run --session s` fails at once with
   `SessionInUseError` instead of interleaving with the first — and never "repairs" a call the
   first is still running. The kernel drops the lock when a process dies, however it dies.
   The store's head check (`ConcurrentWriteError`) stays as the backstop for writers that take
   no lock.
2. **repair**: the stored history is loaded and a turn cut off mid-call is closed with
   synthetic results (`heron.sessions.repair`); audit rows of those calls become `lost`.
3. **write before show**: every message the loop appends is stored before any event shows it
   (`TurnState.on_append`); the user's prompt is stored before the model sees it.
4. **audit**: the agent's observer becomes the execution audit trail of this session.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import hashlib
import os
import re
import secrets
import time
from collections.abc import Sequence
from pathlib import Path

from heron._support.state import open_db
from heron.agent import Agent
from heron.audit.executions import ExecutionAuditTrail
from heron.errors import HeronError
from heron.messages import Message, ToolResultMessage, UserMessage
from heron.sessions.repair import ResumedSession
from heron.sessions.store import SessionStore
from heron.tools.registry import normalize_name
from heron.turn.cancel import CancelScope
from heron.turn.context import TurnState
from heron.turn.events import BaseEvent, EventSink
from heron.turn.loop import TurnOutcome

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}")


class SessionInUseError(HeronError, RuntimeError):
    """Another live process holds the session."""

    def __init__(self, session: str, holder: str) -> None:
        self.session = session
        self.holder = holder
        super().__init__(
            f"session {session!r} is in use by another heron process ({holder}); refusing to "
            "write to it at the same time — wait for it to end, or fork the session "
            "(`heron sessions fork`)"
        )


def new_session_name(now: float | None = None) -> str:
    """A fresh, sortable session id: `YYYYMMDD-HHMMSS-xxxxxx` (local time, random suffix)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{stamp}-{secrets.token_hex(3)}"


def check_session_name(name: str) -> str:
    """`name` if it can name a new session (letters, digits, `._:@/-`, at most 128 characters,
    starting with a letter or digit); else `ValueError`."""
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"invalid session name {name!r}: use letters, digits and . _ : @ / - "
            "(at most 128 characters, starting with a letter or digit)"
        )
    return name


class SessionLock:
    """An exclusive, non-blocking `flock` that says "this process writes session S".

    The file descriptor is not inherited by child processes (Python opens it close-on-exec),
    so a tool's background process cannot keep a session locked after heron exits.
    """

    def __init__(self, state_dir: Path, session: str) -> None:
        digest = hashlib.sha256(session.encode("utf-8")).hexdigest()[:32]
        self.state_dir = state_dir
        self.path = state_dir / "locks" / f"session-{digest}.lock"
        self.session = session
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise `SessionInUseError` naming the holder."""
        # The state directory is private (see `heron._support.state.open_db`), whoever creates it
        # first.
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path.parent.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", errors="replace").strip()
            os.close(fd)
            raise SessionInUseError(self.session, holder or "pid unknown") from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _none(_prompt: str) -> Sequence[str]:
    return ()


class CliSession:
    """A session held by one command-line process. See the module docstring."""

    def __init__(
        self,
        *,
        store: SessionStore,
        lock: SessionLock,
        writer: ResumedSession,
        trail: ExecutionAuditTrail,
        created: bool,
    ) -> None:
        self.store = store
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
        store: SessionStore | None = None
        try:
            store = SessionStore(open_db(state_dir))
            created = store.head(name) == 0
            if created:
                if must_exist:
                    raise ValueError(f"no session named {name!r}; see `heron sessions list`")
                check_session_name(name)
            writer = ResumedSession.open(store, name)
            trail = ExecutionAuditTrail(
                store.conn, session=name, operator=operator or _local_operator()
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
        """Make the audit trail the agent's observer, forwarding to the one it had; calls of
        an unnamed agent are recorded as agent `default`."""
        if agent.observer is not self.trail:
            self.trail.forward = agent.observer
            self.trail.default_agent = agent.name or "default"
            agent.observer = self.trail

    def on_append(self, messages: tuple[Message, ...]) -> None:
        """`TurnState.on_append`: store first, then let the trail index the reasons."""
        self.writer.on_append(messages)
        self.trail.note_messages(messages)

    def sink(self, inner: EventSink) -> EventSink:
        """`inner`, with the audit trail watching approval decisions first."""
        trail = self.trail

        def sink(event: BaseEvent) -> None:
            trail.see_event(event)
            inner(event)

        return sink

    async def run_turn(
        self,
        agent: Agent,
        prompt: str,
        *,
        sink: EventSink,
        cancel: CancelScope,
        channel: str,
    ) -> TurnOutcome:
        """Store `prompt`, then run one turn of `agent` on the session's history.

        `agent` must be `attach`ed. Raises `ConcurrentWriteError` if another writer appended
        to the session meanwhile; what was stored before stays stored.
        """
        self.writer.add(UserMessage(content=prompt))
        exclusions = agent.turn_exclusions or _none
        state = TurnState(
            history=self.writer.history,
            sink=self.sink(sink),
            cancel=cancel,
            channel=channel,
            excluded=frozenset(normalize_name(n) for n in exclusions(prompt)),
            on_append=self.on_append,
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
        self.store.close()
        self._lock.release()


def _local_operator() -> str | None:
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return None
