"""Fitting a conversation into the model's context window.

`HistoryTrimmer` drops the oldest history until the request fits a token budget, under rules
that keep the result valid and useful:

* a tool call and its results are one unit, never separated (providers reject a result
  without its call and a call without its results);
* older turns (a user-authored message and everything up to the next one) go whole, oldest
  first, so no answer is left without its question; only when the current turn alone is too
  big are its oldest tool rounds dropped;
* a leading system message, the newest user-authored message (the request being answered) and
  the newest unit (what the model reacts to) are never dropped, nor a unit holding a result
  kept in context (`ToolResultMessage.keep`: loaded skill instructions, results that loaded
  tools). When they alone exceed the budget the result says `over_budget` rather than
  cutting them;
* a short runtime note tells the model that earlier messages were removed.

`TrimReport` is the body of the engine's history-trimmed event (how many messages and tokens
went): `TrimReport.event_fields()` are that event's fields.

`default_result_limit` derives the bound on one tool result from the context window (a
fraction of it, 25 % by default) instead of one fixed number of characters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from heron.messages import Message, SystemMessage, ToolResultMessage, UserMessage
from heron.models.tokens import (
    CalibratedCounter,
    TokenCounter,
    count_message,
    count_request,
    counter_key,
)
from heron.tools.definition import ToolSpec

TRIM_NOTE = (
    "[heron removed {messages} earlier messages (about {tokens} tokens) from this conversation "
    "to fit the model's context window.]"
)
DEFAULT_RESULT_FRACTION = 0.25


@dataclass(frozen=True, kw_only=True, slots=True)
class TrimReport:
    """What a trim removed; `event_fields()` is the history-trimmed event's body."""

    dropped_messages: int
    dropped_tokens: int
    kept_messages: int
    kept_tokens: int
    """History tokens after trimming, the note included (system prompt and tools excluded)."""
    budget_tokens: int
    over_budget: bool
    """The messages that are never dropped exceed the budget by themselves."""

    def event_fields(self) -> dict[str, Any]:
        """This report as the fields of the engine's `HistoryTrimmedEvent`, which has exactly
        these fields besides its turn id (the event validates them when it is built)."""
        return asdict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class TrimResult:
    messages: list[Message]
    """The history to send (a new list; equal to the input when nothing had to go)."""
    report: TrimReport | None
    """None when nothing was dropped."""
    counted_tokens: int
    """The whole request (system prompt, tools, `messages`) as the uncorrected counter counts
    it: pass it with the reported `Usage.input_tokens` to `CalibratedCounter.observe`."""


class HistoryTrimmer:
    """Trims histories to `budget_tokens`: the whole request, i.e. history plus system prompt,
    tool definitions and whatever the caller reserves for the reply.

    Per-message counts are cached between calls (messages are immutable), so trimming a
    growing history each iteration counts only the new messages. With a `CalibratedCounter`
    the cache holds uncorrected counts and the current correction is applied at each trim.
    A session writer stores those counts beside its entries (`counted_by` names them) and
    hands them back on resume (`remember`), so a resumed history is not counted again.
    """

    def __init__(self, counter: TokenCounter, *, budget_tokens: int, note: bool = True) -> None:
        if budget_tokens <= 0:
            raise ValueError("budget_tokens must be positive")
        self.counter = counter
        self.budget_tokens = budget_tokens
        self.note = note
        self._raw = counter.base if isinstance(counter, CalibratedCounter) else counter
        self.counted_by = counter_key(self._raw)
        """What names this trimmer's per-message counts when they are stored (`None`: a
        counter whose counts are not stored; see `heron.models.tokens.counter_key`)."""
        self._counts: dict[int, tuple[Message, int]] = {}

    def count(self, message: Message) -> int:
        """The message's uncorrected tokens, counted once per message object."""
        tokens = self.counted(message)
        if tokens is None:
            tokens = count_message(self._raw, message)
            self._counts[id(message)] = (message, tokens)
        return tokens

    def counted(self, message: Message) -> int | None:
        """The message's uncorrected tokens if this trimmer has counted them or was given
        them (`remember`), without counting."""
        cached = self._counts.get(id(message))
        return cached[1] if cached is not None and cached[0] is message else None

    def remember(self, messages: Sequence[Message], tokens: Sequence[int | None]) -> None:
        """Take `tokens` as the counts of `messages` (counts stored under `counted_by`, one per
        message; `None`: no count known)."""
        counts = self._counts
        for message, count in zip(messages, tokens, strict=True):
            if count is not None:
                counts[id(message)] = (message, count)

    def trim(
        self,
        history: Sequence[Message],
        *,
        system: str = "",
        tools: Sequence[ToolSpec] = (),
        reserve_tokens: int = 0,
    ) -> TrimResult:
        """Fit `history` into the budget minus the system prompt, the tool definitions and
        `reserve_tokens` (room for the reply)."""
        factor = self.counter.factor if isinstance(self.counter, CalibratedCounter) else 1.0
        fixed = count_request(self._raw, system=system, messages=(), tools=tools)
        counts = [self.count(m) for m in history]
        self._forget_except(history)
        # Everything below is in uncorrected units; the budget is converted once.
        available = (self.budget_tokens - reserve_tokens) / factor - fixed
        total = sum(counts)
        if total <= available:
            return TrimResult(messages=list(history), report=None, counted_tokens=fixed + total)

        pinned, blocks = _plan(history)
        dropped: set[int] = set()
        dropped_raw = 0
        # The note's size barely depends on the numbers in it: a generous bound is enough.
        note_bound = count_message(self._raw, _note(10**9, 10**9)) if self.note else 0
        for block in blocks:
            if dropped and total - dropped_raw + note_bound <= available:
                break
            droppable = [i for i in block if i not in pinned]
            dropped.update(droppable)
            dropped_raw += sum(counts[i] for i in droppable)
        kept = [m for i, m in enumerate(history) if i not in dropped]
        note_raw = 0
        if self.note and dropped:
            note = _note(len(dropped), math.ceil(dropped_raw * factor))
            note_raw = count_message(self._raw, note)
            at = 1 if kept and isinstance(kept[0], SystemMessage) else 0
            kept.insert(at, note)
        kept_raw = total - dropped_raw + note_raw
        return TrimResult(
            messages=kept,
            report=TrimReport(
                dropped_messages=len(dropped),
                dropped_tokens=math.ceil(dropped_raw * factor),
                kept_messages=len(kept),
                kept_tokens=math.ceil(kept_raw * factor),
                budget_tokens=self.budget_tokens,
                over_budget=kept_raw > available,
            ),
            counted_tokens=fixed + kept_raw,
        )

    def _forget_except(self, history: Sequence[Message]) -> None:
        if len(self._counts) > 2 * len(history) + 16:
            live = {id(m) for m in history}
            self._counts = {k: v for k, v in self._counts.items() if k in live}


def _note(messages: int, tokens: int) -> UserMessage:
    return UserMessage(content=TRIM_NOTE.format(messages=messages, tokens=tokens), source="runtime")


def _is_turn_start(message: Message) -> bool:
    return isinstance(message, UserMessage) and message.source != "runtime"


def _units(history: Sequence[Message]) -> list[list[int]]:
    """Indexes grouped so that a call and the results after it stay together."""
    units: list[list[int]] = []
    for index, message in enumerate(history):
        if isinstance(message, ToolResultMessage) and units:
            units[-1].append(index)
        else:
            units.append([index])
    return units


def _plan(history: Sequence[Message]) -> tuple[set[int], list[list[int]]]:
    """The never-dropped indexes, and the droppable blocks in dropping order: whole older
    turns first, then the current turn's units."""
    units = _units(history)
    pinned: set[int] = set()
    if history and isinstance(history[0], SystemMessage):
        pinned.add(0)
    if units:
        pinned.update(units[-1])
    for unit in units:
        if any(isinstance(m := history[i], ToolResultMessage) and m.keep for i in unit):
            pinned.update(unit)  # the call and its results stay together
    starts = [i for i, m in enumerate(history) if _is_turn_start(m)]
    current = starts[-1] if starts else 0
    if starts:
        pinned.add(current)
    blocks: list[list[int]] = []
    for unit in units:
        if unit[0] < current and blocks and not _is_turn_start(history[unit[0]]):
            blocks[-1].extend(unit)  # the same older turn
        else:
            blocks.append(list(unit))
    return pinned, blocks


def default_result_limit(
    context_window_tokens: int,
    counter: TokenCounter,
    *,
    fraction: float = DEFAULT_RESULT_FRACTION,
) -> int:
    """The largest tool result, in characters, that stays within `fraction` of the context
    window (converted with the counter's conservative characters-per-token ratio)."""
    if context_window_tokens <= 0:
        raise ValueError("context_window_tokens must be positive")
    if not 0 < fraction <= 1:
        raise ValueError("fraction must be in (0, 1]")
    return int(context_window_tokens * fraction * counter.chars_per_token)
