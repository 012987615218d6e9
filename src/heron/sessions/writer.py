"""`SessionWriter`: one writer's hold on a stored session, used by every front end.

`heron run --session`, `heron chat` (and `heron sessions resume`) and the event-driven bus
loop all write a session the same way:

1. **open**: load the history and its stored head, close the calls a crash left open
   (`heron.sessions.repair.repair_messages`, which refuses a history appending cannot mend)
   and store those repairs at once;
2. **write before show**: whatever is added to `history` — by `add`, or by the engine, which
   then calls `on_append` — is stored before anything shows it;
3. **single writer**: every write names the head this writer last saw, so a second writer on
   the same session makes the store raise `ConcurrentWriteError` instead of interleaving.

The writer also keeps an index of the history's tool calls (ids seen, calls still open),
updated with each write, so per-turn work stays O(new messages): `call_ids` is what the engine
needs to keep call ids unique (`TurnState.known_call_ids`) without rescanning the history.

`SessionWriter.wake` holds a session without reading its history (the always-on server wakes
parked sessions this way): it reads the head and the last tool round only
(`SessionStore.load_tail`), repairs that round, and loads the history the first time
`history` is used — for the model, which reads it. Until then the caller may store messages
in its own transactions (`stored`) at no cost that grows with the history.

With a context window (`count_with`), the writer stores the token counts its trimmer made
(the trimmer counts each message once, at the first model call that sends it) with its next
append, and hands the trimmer the counts stored for a history it reads: the first trim of a
resumed session counts only what has no count yet (the last messages no trim saw, entries
written before counts were stored or counted by another counter), and those are stored then.
Nothing is counted on the way to the store: an append costs what it cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import TYPE_CHECKING

from heron.messages import AssistantMessage, Message, ToolCallPart, ToolResultMessage
from heron.sessions.repair import SessionRepairError, interrupted_results, repair_messages
from heron.sessions.store import (
    ConcurrentWriteError,
    CorruptEntryError,
    SessionStore,
    TokenCounts,
    reading_history,
)

if TYPE_CHECKING:  # token counting is the caller's option; the writer only calls the trimmer
    from heron.models.context_window import HistoryTrimmer


class CallIndex:
    """The tool calls of a history, indexed message by message as the history grows."""

    __slots__ = ("_indexed", "_open", "seen")

    def __init__(self) -> None:
        self.seen: set[str] = set()
        """Every call id the history holds."""
        self._open: dict[str, ToolCallPart] = {}
        self._indexed = 0

    def update(self, history: Sequence[Message]) -> None:
        """Index the messages appended to `history` since the last update."""
        for message in history[self._indexed :]:
            if isinstance(message, AssistantMessage):
                for call in message.tool_calls:
                    self.seen.add(call.id)
                    self._open[call.id] = call
            elif isinstance(message, ToolResultMessage):
                self._open.pop(message.call_id, None)
        self._indexed = len(history)

    @property
    def open(self) -> tuple[ToolCallPart, ...]:
        """The calls without a result, in call order."""
        return tuple(self._open.values())


class SessionWriter:
    """One writer's hold on a session: the live history, the stored head it last wrote, and
    the index of its tool calls. See the module docstring."""

    def __init__(
        self,
        store: SessionStore,
        name: str,
        history: list[Message] | None,
        head: int,
        repaired: Sequence[ToolResultMessage] = (),
        *,
        last: Message | None = None,
    ) -> None:
        """`history=None`: not read yet (see `wake`); `last` is then the stored last message."""
        self.store = store
        self.name = name
        self._history = history
        self._last = last
        self.head = head
        self.repaired = tuple(repaired)
        """The synthetic results `open` appended, if the session was cut off mid-turn."""
        self._persisted = len(history) if history is not None else 0
        self._calls = CallIndex()
        if history is not None:
            self._calls.update(history)
        self._trimmer: HistoryTrimmer | None = None
        self._counted_by = ""
        self._counts_handed = False
        self._counts_stored = 0
        """The leading entries whose counts are stored (or on their way with an append)."""

    @classmethod
    def open(
        cls, store: SessionStore, name: str, *, awaiting: Mapping[str, str] | None = None
    ) -> SessionWriter:
        """Load `name` (empty if unknown), store the repairs it needs, and hold it. `awaiting`:
        the placeholders of calls that wait on an open request (`repair.interrupted_results`).

        Raises `SessionRepairError` for a history appending cannot mend, a stored entry that
        is not a valid message included.
        """
        try:
            history, head = store.load_with_head(name)
            repairs = repair_messages(history, awaiting)
        except (CorruptEntryError, SessionRepairError) as exc:
            raise SessionRepairError(f"session {name!r} cannot be resumed: {exc}") from exc
        if repairs:
            head = store.append(name, repairs, expected_last_entry=head)
            history.extend(repairs)
        return cls(store, name, history, head, repairs)

    @classmethod
    def wake(
        cls, store: SessionStore, name: str, *, awaiting: Mapping[str, str] | None = None
    ) -> SessionWriter:
        """Hold `name` without reading its history: the head and the last tool round only,
        whose open calls are closed at once as `open` closes them. The history is read when
        `history` is first used. Only the end of a history heron wrote can be open, so this
        mends what `open` mends; a history broken elsewhere is left to the provider's check."""
        tail, head = store.load_tail(name)
        repairs = interrupted_results(tail, awaiting)
        if repairs:
            head = store.append(name, repairs, expected_last_entry=head)
        last = [*tail, *repairs][-1] if tail or repairs else None
        return cls(store, name, None, head, repairs, last=last)

    @property
    def history(self) -> list[Message]:
        """The live history; pass it to `TurnState(history=...)`. A writer from `wake` reads
        it here, once (and raises `ConcurrentWriteError` if someone else wrote meanwhile)."""
        if self._history is None:
            history, head = self.store.load_with_head(self.name)
            if head != self.head:
                raise ConcurrentWriteError(self.name, self.head, head)
            self._history = history
            self._persisted = len(history)
            self._calls.update(history)
            self._hand_counts()
        return self._history

    @property
    def loaded(self) -> bool:
        """Whether the history is in memory (always, unless the writer came from `wake`)."""
        return self._history is not None

    @property
    def last(self) -> Message | None:
        """The history's last message, without reading the history."""
        if self._history is not None:
            return self._history[-1] if self._history else None
        return self._last

    @property
    def call_ids(self) -> Set[str]:
        """Every tool-call id of `history`, kept current as the writer stores messages (the
        same object throughout, for `TurnState.known_call_ids`)."""
        self._calls.update(self.history)
        return self._calls.seen

    @property
    def open_calls(self) -> tuple[ToolCallPart, ...]:
        """The calls of `history` that have no result yet, in call order (none before a woken
        writer reads its history: `wake` closed them)."""
        if self._history is None:
            return ()
        self._calls.update(self._history)
        return self._calls.open

    def count_with(self, trimmer: HistoryTrimmer | None) -> None:
        """Hand `trimmer` the counts stored for the history (once it is read) and, from then
        on, store the counts it makes with this writer's appends (see the module docstring).
        Nothing is stored for a trimmer whose counts are not stored (`counted_by` is `None`),
        nor for `None`."""
        counted_by = None if trimmer is None else trimmer.counted_by
        if counted_by is None:
            trimmer = None
        if trimmer is self._trimmer:
            return
        self._trimmer = trimmer
        self._counted_by = counted_by or ""
        self._counts_handed = False
        self._hand_counts()

    def _hand_counts(self) -> None:
        """Give the trimmer the stored counts of the stored history; count and store those
        missing. Once per trimmer, when the history is read."""
        trimmer = self._trimmer
        if trimmer is None or self._history is None or self._counts_handed:
            return
        self._counts_handed = True
        # Positions below `_persisted` name the entries this writer read or wrote: entries
        # are never removed, whoever writes the session after.
        history = self._history[: self._persisted]
        with reading_history():  # part of the history's read: a count per entry
            stored = self.store.token_counts(self.name, self._counted_by)
            counts = [stored.get(at) for at in range(len(history))]
            trimmer.remember(history, counts)
        missing = {at: trimmer.count(history[at]) for at, n in enumerate(counts) if n is None}
        if missing:
            self.store.add_token_counts(
                self.name, TokenCounts(counted_by=self._counted_by, tokens=missing)
            )
        self._counts_stored = len(history)

    def _take_counts(self) -> TokenCounts | None:
        """The counts the trimmer made of stored entries whose counts are not stored yet, to
        go with the next append (taken as stored: a count lost with a failed append is made
        again by the next resume)."""
        trimmer = self._trimmer
        if trimmer is None or self._history is None or not self._counts_handed:
            return None
        counts: dict[int, int] = {}
        at = self._counts_stored
        while at < self._persisted and (tokens := trimmer.counted(self._history[at])) is not None:
            counts[at] = tokens
            at += 1
        self._counts_stored = at
        return TokenCounts(counted_by=self._counted_by, tokens=counts) if counts else None

    def add(self, *messages: Message) -> None:
        """Append messages to the history and store them at once."""
        self.history.extend(messages)
        self.flush()

    def on_append(self, _messages: tuple[Message, ...]) -> None:
        """`TurnState.on_append`: store what the engine just appended."""
        self.flush()

    def unsaved(self) -> list[Message]:
        """The messages of `history` not stored yet (for a caller that stores them in a
        transaction of its own, then reports the new head with `saved` or `stored`)."""
        if self._history is None:
            return []
        return self._history[self._persisted :]

    def saved(self, head: int) -> None:
        """Everything in `history` is stored now, and the session ends at entry `head`."""
        self.head = head
        if self._history is not None:
            self._persisted = len(self._history)
            self._calls.update(self._history)

    def stored(self, messages: Sequence[Message], head: int) -> None:
        """The caller stored `unsaved()` and then `messages` in a transaction of its own, and
        the session ends at entry `head` now: `messages` join the history (if it is read)."""
        if self._history is not None:
            self._history.extend(messages)
        elif messages:
            self._last = messages[-1]
        self.saved(head)

    def flush(self) -> None:
        """Store every message of `history` not yet stored, in one transaction."""
        if self._history is not None and self._persisted < len(self._history):
            unsaved = self.unsaved()
            self.saved(
                self.store.append(
                    self.name,
                    unsaved,
                    expected_last_entry=self.head,
                    tokens=self._take_counts(),
                )
            )

    def close_open_calls(self) -> list[ToolResultMessage]:
        """Before a hard exit mid-turn: store what is unsaved, then the repairs the next open
        would make, so the stored history is valid at once. Returns the repairs."""
        self.flush()
        if not self.open_calls:
            return []
        repairs = repair_messages(self.history)
        if repairs:
            self.add(*repairs)
        return repairs
