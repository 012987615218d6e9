"""Tool-call loop detection within one turn.

A model that is stuck tends to show one of three patterns: it repeats the same call, it bounces
between two tools, or it varies the arguments of one tool while getting the same answer back.
`LoopDetector` watches the successful calls of a turn and escalates each pattern from a warning
(tell the model) to a block (stop what the model sees from rewarding the loop) to a break (end
the turn). Failed calls are not recorded: errors are already visible to the model, and retrying
after a failure is not a loop.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["LoopDetector", "LoopKind", "LoopLevel", "LoopVerdict", "args_fingerprint"]

LoopLevel = Literal["warn", "block", "break"]
"""How hard the turn should react: note to the model, change what it sees, or end the turn."""

LoopKind = Literal["exact_repeat", "ping_pong", "no_progress"]
"""Which pattern was seen."""

# Ping-pong needs this many alternating calls (four A,B cycles) before it says anything.
_PING_PONG_MIN_CALLS = 8
_PING_PONG_BLOCK_CYCLES = 5
_PING_PONG_BREAK_CYCLES = 6
_NO_PROGRESS_WARN = 5
_NO_PROGRESS_BLOCK = 6
_NO_PROGRESS_BREAK = 7


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopVerdict:
    """A detected loop: how serious, which pattern, which tool, and what to tell the model."""

    level: LoopLevel
    kind: LoopKind
    tool: str
    """The tool of the call that tripped the detector."""
    count: int
    """Consecutive repeats, alternation cycles, or same-result calls, depending on `kind`."""
    message: str
    """Model-facing explanation that asks for a change of approach."""


def _encode(value: Any, out: list[str]) -> None:
    # Every encoding is tagged and self-delimiting (length prefixes, closing brackets), so two
    # different values can never produce the same text. `bool` is checked before `int` because
    # it is a subclass; exact type checks keep the common JSON leaves on the fast path.
    kind = type(value)
    if kind is str:
        out.append(f"s{len(value)}:")
        out.append(value)
    elif kind is bool:
        out.append("T" if value else "F")
    elif kind is int:
        out.append(f"i{value};")
    elif kind is float:
        out.append(f"f{value!r};")
    elif value is None:
        out.append("N")
    elif isinstance(value, Mapping):
        entries: list[tuple[str, Any]] = []
        for key, item in value.items():
            if type(key) is str:  # the JSON case: `_encode`'s string form, inline
                entries.append((f"s{len(key)}:{key}", item))
                continue
            key_out: list[str] = []
            _encode(key, key_out)
            entries.append(("".join(key_out), item))
        # Sorting by the encoded key makes the result independent of insertion order and works
        # for mixed key types, which `sorted(value)` would reject.
        entries.sort(key=_first)
        out.append(f"{{{len(entries)}")
        for key_text, item in entries:
            out.append(key_text)
            _encode(item, out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append(f"[{len(value)}")
        for item in value:
            _encode(item, out)
        out.append("]")
    else:
        text = f"{type(value).__qualname__}:{value!r}"
        out.append(f"o{len(text)}:")
        out.append(text)


def _first(entry: tuple[str, Any]) -> str:
    return entry[0]


def _digest(text: str) -> str:
    # surrogatepass: JSON decoding can yield lone surrogates, which must hash rather than raise.
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def args_fingerprint(arguments: Any) -> str:
    """Return an order-independent structural fingerprint of tool arguments (32 hex chars).

    Mapping key order does not matter; list order does. Types are part of the fingerprint, so
    `"123"`, `123` and `123.0` differ, as do `0` and `0.0`, and `True` and `1`. Lists and tuples
    are treated alike, as JSON would. Values outside JSON are fingerprinted by type and `repr`.
    """
    out: list[str] = []
    _encode(arguments, out)
    return _digest("".join(out))


@dataclass(frozen=True, slots=True)
class _Call:
    tool: str
    args: str
    output: str


_LEVEL_TEXT: dict[LoopLevel, tuple[str, str]] = {
    "warn": (
        "Loop warning",
        "Doing the same again is unlikely to help; change your approach.",
    ),
    "block": (
        "Loop blocked",
        "Stop repeating this. Use a different tool or different arguments, or tell the user "
        "what is stopping you.",
    ),
    "break": (
        "Loop stopped",
        "The turn is being ended because the calls were making no progress.",
    ),
}


def _verdict(level: LoopLevel, kind: LoopKind, tool: str, count: int, what: str) -> LoopVerdict:
    title, advice = _LEVEL_TEXT[level]
    return LoopVerdict(
        level=level, kind=kind, tool=tool, count=count, message=f"{title}: {what}. {advice}"
    )


class LoopDetector:
    """Watches one turn's successful tool calls for repeat, ping-pong and no-progress loops.

    Keeps the last `window` calls. Each `record` is constant work apart from a scan of that
    bounded window. Use one detector per turn, or `reset` it between turns.
    """

    def __init__(
        self, *, window: int = 20, max_repeats: int = 3, ignore_tools: Collection[str] = ()
    ) -> None:
        """Configure the detector.

        `window` is how many recent calls are kept; `max_repeats` is the identical-call count
        that first warns (one more blocks, two more break); calls to `ignore_tools` are never
        recorded, for tools whose repetition is expected (polling, waiting).
        """
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if max_repeats < 1:
            raise ValueError(f"max_repeats must be >= 1, got {max_repeats}")
        self._max_repeats = max_repeats
        self._ignore = frozenset(ignore_tools)
        self._calls: deque[_Call] = deque(maxlen=window)
        self._same_results: dict[tuple[str, str], int] = {}
        """How many calls in the window gave each (tool, output digest): no-progress checks
        look at the window only when one reaches the warning count."""

    def record(
        self, tool: str, arguments: Any, output: str, *, success: bool
    ) -> LoopVerdict | None:
        """Record one finished call and return a verdict if it completes a loop pattern.

        Failed calls and ignored tools are not recorded and return `None`. Patterns are checked
        in order exact repeat, ping-pong, no progress; the first that fires is returned.
        """
        if not success or tool in self._ignore:
            return None
        calls, same = self._calls, self._same_results
        if len(calls) == calls.maxlen:
            dropped = calls[0]
            key = (dropped.tool, dropped.output)
            if same[key] == 1:
                del same[key]
            else:
                same[key] -= 1
        call = _Call(tool, args_fingerprint(arguments), _digest(output))
        calls.append(call)
        key = (tool, call.output)
        same[key] = same.get(key, 0) + 1
        return self._exact_repeat() or self._ping_pong() or self._no_progress()

    def reset(self) -> None:
        """Forget every recorded call."""
        self._calls.clear()
        self._same_results.clear()

    def _exact_repeat(self) -> LoopVerdict | None:
        last = self._calls[-1]
        count = 0
        for call in reversed(self._calls):
            if call.tool != last.tool or call.args != last.args:
                break
            count += 1
        m = self._max_repeats
        if count < m:
            return None
        level: LoopLevel = "break" if count >= m + 2 else "block" if count > m else "warn"
        return _verdict(
            level,
            "exact_repeat",
            last.tool,
            count,
            f"'{last.tool}' was called {count} times in a row with identical arguments",
        )

    def _ping_pong(self) -> LoopVerdict | None:
        calls = self._calls
        if len(calls) < _PING_PONG_MIN_CALLS:
            return None
        # Alternation of the same two *calls* (tool and arguments): a read/edit rhythm across
        # different files is normal work, not a loop.
        a, b = calls[-1], calls[-2]
        if (a.tool, a.args) == (b.tool, b.args):
            return None
        run = 0
        for call in reversed(calls):
            expected = a if run % 2 == 0 else b
            if call.tool != expected.tool or call.args != expected.args:
                break
            run += 1
        if run < _PING_PONG_MIN_CALLS:
            return None
        cycles = run // 2
        level: LoopLevel = (
            "break"
            if cycles >= _PING_PONG_BREAK_CYCLES
            else "block"
            if cycles >= _PING_PONG_BLOCK_CYCLES
            else "warn"
        )
        return _verdict(
            level,
            "ping_pong",
            a.tool,
            cycles,
            f"calls have alternated between '{b.tool}' and '{a.tool}' with the same arguments "
            f"for {cycles} cycles",
        )

    def _no_progress(self) -> LoopVerdict | None:
        last = self._calls[-1]
        if self._same_results[last.tool, last.output] < _NO_PROGRESS_WARN:
            return None
        # The whole window counts, not just a consecutive tail: interleaving other calls must
        # not hide a tool that keeps returning the same answer.
        same = [c.args for c in self._calls if c.tool == last.tool and c.output == last.output]
        count = len(same)
        if count < _NO_PROGRESS_WARN or len(set(same)) < 2:
            return None
        level: LoopLevel = (
            "break"
            if count >= _NO_PROGRESS_BREAK
            else "block"
            if count >= _NO_PROGRESS_BLOCK
            else "warn"
        )
        return _verdict(
            level,
            "no_progress",
            last.tool,
            count,
            f"'{last.tool}' was called {count} times with different arguments and returned "
            "the same result every time",
        )
