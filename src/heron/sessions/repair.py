"""Resuming a stored session: repair a history cut off mid-turn, then keep writing to it.

The engine records a model's tool calls before they run and their results when they finish.
A process that ends in between (killed, crashed, a second Ctrl-C) leaves calls without
results, and no provider accepts a request whose history has them. Repair never edits the
stored history: it appends one synthetic result per open call, as new entries, so the session
still shows exactly what happened and the next request is valid.

Only the end of a history can be left open by heron's writers, because every writer repairs
before it appends anything. A history broken elsewhere (a foreign writer, a hand-made file)
cannot be mended by appending; it is refused with the reason `HistoryChecker` gives.
"""

from __future__ import annotations

from collections.abc import Sequence

from heron.errors import HeronError
from heron.messages import AssistantMessage, Message, ToolCallPart, ToolResultMessage
from heron.models.base import InvalidHistoryError
from heron.models.history_rules import HistoryChecker
from heron.sessions.store import SessionStore

INTERRUPTED_RESULT = (
    "[interrupted: the process ended before this tool finished. It may have taken effect in "
    "part or in full; check the current state before retrying.]"
)
"""What the model reads for a call whose process ended before the call did."""


class SessionRepairError(HeronError, RuntimeError):
    """The stored history is broken in a way appending cannot mend."""


def open_calls(history: Sequence[Message]) -> list[ToolCallPart]:
    """The calls of the history's last tool round that have no result, in call order.

    Only a round at the very end counts: after its assistant message come nothing but results.
    """
    answered: set[str] = set()
    for message in reversed(history):
        if isinstance(message, ToolResultMessage):
            answered.add(message.call_id)
            continue
        if isinstance(message, AssistantMessage):
            return [c for c in message.tool_calls if c.id not in answered]
        return []
    return []


def check_history(history: Sequence[Message]) -> None:
    """Raise `SessionRepairError` unless a provider would accept a request with `history`."""
    try:
        HistoryChecker().check(history)
    except InvalidHistoryError as exc:
        raise SessionRepairError(f"the stored history is not valid: {exc}") from exc


def repair_messages(history: Sequence[Message]) -> list[ToolResultMessage]:
    """The synthetic results that make `history` valid again (empty when it already is).

    Raises `SessionRepairError` when the history stays invalid even with them.
    """
    results = [
        ToolResultMessage(call_id=c.id, name=c.name, content=INTERRUPTED_RESULT, is_error=True)
        for c in open_calls(history)
    ]
    check_history([*history, *results])
    return results


class ResumedSession:
    """One writer's hold on a session: the live history and the stored head it last wrote.

    Messages added to `history` (by `add` or by the engine, which then calls `on_append`) are
    written before anything shows them. Every write names the head this writer last saw, so a
    second writer on the same session makes the store raise `ConcurrentWriteError`.
    """

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

    @classmethod
    def open(cls, store: SessionStore, name: str) -> ResumedSession:
        """Load `name` (empty if unknown), append the repairs it needs, and hold it."""
        history, head = store.load_with_head(name)
        try:
            repairs = repair_messages(history)
        except SessionRepairError as exc:
            raise SessionRepairError(f"session {name!r} cannot be resumed: {exc}") from exc
        if repairs:
            head = store.append(name, repairs, expected_last_entry=head)
            history.extend(repairs)
        return cls(store, name, history, head, repairs)

    def add(self, *messages: Message) -> None:
        """Append messages to the history and write them at once."""
        self.history.extend(messages)
        self.flush()

    def on_append(self, _messages: tuple[Message, ...]) -> None:
        """`TurnState.on_append`: write what the engine just appended."""
        self.flush()

    def flush(self) -> None:
        """Write every message of `history` not yet stored, in one transaction."""
        if self._persisted < len(self.history):
            unsaved = self.history[self._persisted :]
            self.head = self.store.append(self.name, unsaved, expected_last_entry=self.head)
            self._persisted = len(self.history)

    def close_open_calls(self) -> list[ToolResultMessage]:
        """Before a hard exit mid-turn: write what is unsaved, then the repairs the next resume
        would make, so the stored history is valid at once. Returns the repairs."""
        self.flush()
        repairs = repair_messages(self.history)
        if repairs:
            self.add(*repairs)
        return repairs
