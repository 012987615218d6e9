"""The history rules real providers enforce, checked incrementally.

Every request of the built-in test models goes through `HistoryChecker`, so no test can pass
with a history that OpenAI or Anthropic would reject. The checker keeps a watermark and only
looks at messages appended since the last request (O(new items) per request).
"""

from __future__ import annotations

from collections.abc import Sequence

from heron.messages import AssistantMessage, Message, SystemMessage, ToolResultMessage
from heron.models.base import InvalidHistoryError


class HistoryChecker:
    """Validates a growing history: every tool call answered by exactly one result, results
    directly after their call, no result without a call, unique call ids, no empty turns."""

    __slots__ = ("_checked", "_list_id", "_open_ids", "_seen_ids")

    def __init__(self) -> None:
        self._list_id = 0
        self._checked = 0
        self._open_ids: set[str] = set()
        self._seen_ids: set[str] = set()

    def _reset(self) -> None:
        self._checked = 0
        self._open_ids.clear()
        self._seen_ids.clear()

    def check(self, messages: Sequence[Message]) -> None:
        if len(messages) < self._checked or id(messages) != self._list_id:
            # The history was trimmed or replaced (a trimmed view is a new list): start again.
            self._reset()
            self._list_id = id(messages)
        for index in range(self._checked, len(messages)):
            self._check_one(index, messages[index])
        self._checked = len(messages)
        if self._open_ids:
            raise InvalidHistoryError(
                "request sent while tool calls are unanswered: " + ", ".join(sorted(self._open_ids))
            )

    def _check_one(self, index: int, message: Message) -> None:
        if isinstance(message, ToolResultMessage):
            if message.call_id not in self._open_ids:
                where = "answered twice" if message.call_id in self._seen_ids else "never made"
                raise InvalidHistoryError(
                    f"message {index}: tool result for call {message.call_id!r}, which was {where}"
                )
            self._open_ids.discard(message.call_id)
            return
        if self._open_ids:
            raise InvalidHistoryError(
                f"message {index} ({message.role}) comes before the results of tool calls "
                + ", ".join(sorted(self._open_ids))
            )
        if isinstance(message, SystemMessage) and index != 0:
            raise InvalidHistoryError(f"message {index}: a system message may only come first")
        if isinstance(message, AssistantMessage):
            if not message.text and not message.tool_calls:
                raise InvalidHistoryError(f"message {index}: empty assistant message")
            for call in message.tool_calls:
                if call.id in self._seen_ids:
                    raise InvalidHistoryError(
                        f"message {index}: duplicate tool call id {call.id!r}"
                    )
                self._seen_ids.add(call.id)
                self._open_ids.add(call.id)
