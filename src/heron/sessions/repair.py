"""Repairing a stored session cut off mid-turn: one function and one wording for every writer.

The engine records a model's tool calls before they run and their results when they finish.
A process that ends in between (killed, crashed, a second Ctrl-C) leaves calls without
results, and no provider accepts a request whose history has them. Repair never edits the
stored history: it appends one synthetic result per open call, as new entries, so the session
still shows exactly what happened and the next request is valid.

Only the end of a history can be left open by heron's writers, because every writer repairs
before it appends anything. A history broken elsewhere (a foreign writer, a hand-made file)
cannot be mended by appending; it is refused with the reason `HistoryChecker` gives.

`heron.sessions.writer.SessionWriter` applies the repair when it opens a session (for
`heron run --session`, `heron chat`, resume and the bus loop alike).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from heron.errors import HeronError
from heron.messages import AssistantMessage, Message, ToolCallPart, ToolResultMessage
from heron.models.base import InvalidHistoryError
from heron.models.history_rules import HistoryChecker

INTERRUPTED_RESULT = (
    "[interrupted: the process ended before this tool finished. It may have taken effect in "
    "part or in full; check the current state before retrying.]"
)
"""What the model reads for a call whose process ended before the call did: the one wording
for an interrupted or lost call, whichever writer repairs the session."""


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


def interrupted_results(
    history: Sequence[Message], awaiting: Mapping[str, str] | None = None
) -> list[ToolResultMessage]:
    """One synthetic result per open call of the history's last round, without checking the
    rest: enough for the end of a history (`SessionStore.load_tail`) that only heron's writers
    wrote, which repair before they append.

    A call in `awaiting` (call id → placeholder text) waits on an open request to a human: it
    did not run and is not interrupted, so it gets that placeholder instead — its outcome
    still arrives as an event."""
    calls = open_calls(history)
    waiting = (awaiting or {}) if calls else {}  # read only when there is a call to close
    return [
        ToolResultMessage(
            call_id=c.id,
            name=c.name,
            content=waiting.get(c.id, INTERRUPTED_RESULT),
            is_error=True,
        )
        for c in calls
    ]


def repair_messages(
    history: Sequence[Message], awaiting: Mapping[str, str] | None = None
) -> list[ToolResultMessage]:
    """The synthetic results that make `history` valid again (empty when it already is);
    `awaiting` as for `interrupted_results`.

    Raises `SessionRepairError` when the history stays invalid even with them.
    """
    results = interrupted_results(history, awaiting)
    check_history([*history, *results])
    return results
