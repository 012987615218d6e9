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
"""

from __future__ import annotations

from collections.abc import Sequence, Set

from heron.messages import AssistantMessage, Message, ToolCallPart, ToolResultMessage
from heron.sessions.repair import SessionRepairError, repair_messages
from heron.sessions.store import SessionStore


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
        history: list[Message],
        head: int,
        repaired: Sequence[ToolResultMessage] = (),
    ) -> None:
        self.store = store
        self.name = name
        self.history = history
        """The live history; pass it to `TurnState(history=...)`."""
        self.head = head
        self.repaired = tuple(repaired)
        """The synthetic results `open` appended, if the session was cut off mid-turn."""
        self._persisted = len(history)
        self._calls = CallIndex()
        self._calls.update(history)

    @classmethod
    def open(cls, store: SessionStore, name: str) -> SessionWriter:
        """Load `name` (empty if unknown), store the repairs it needs, and hold it.

        Raises `SessionRepairError` for a history appending cannot mend.
        """
        history, head = store.load_with_head(name)
        try:
            repairs = repair_messages(history)
        except SessionRepairError as exc:
            raise SessionRepairError(f"session {name!r} cannot be resumed: {exc}") from exc
        if repairs:
            head = store.append(name, repairs, expected_last_entry=head)
            history.extend(repairs)
        return cls(store, name, history, head, repairs)

    @property
    def call_ids(self) -> Set[str]:
        """Every tool-call id of `history`, kept current as the writer stores messages (the
        same object throughout, for `TurnState.known_call_ids`)."""
        self._calls.update(self.history)
        return self._calls.seen

    @property
    def open_calls(self) -> tuple[ToolCallPart, ...]:
        """The calls of `history` that have no result yet, in call order."""
        self._calls.update(self.history)
        return self._calls.open

    def add(self, *messages: Message) -> None:
        """Append messages to the history and store them at once."""
        self.history.extend(messages)
        self.flush()

    def on_append(self, _messages: tuple[Message, ...]) -> None:
        """`TurnState.on_append`: store what the engine just appended."""
        self.flush()

    def unsaved(self) -> list[Message]:
        """The messages of `history` not stored yet (for a caller that stores them in a
        transaction of its own, then reports the new head with `saved`)."""
        return self.history[self._persisted :]

    def saved(self, head: int) -> None:
        """Everything in `history` is stored now, and the session ends at entry `head`."""
        self.head = head
        self._persisted = len(self.history)
        self._calls.update(self.history)

    def flush(self) -> None:
        """Store every message of `history` not yet stored, in one transaction."""
        if self._persisted < len(self.history):
            self.saved(self.store.append(self.name, self.unsaved(), expected_last_entry=self.head))

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
