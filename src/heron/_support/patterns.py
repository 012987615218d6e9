"""Regular expressions that come from outside heron, matched in time linear in the text.

The model writes patterns for `grep_files`, `grep_artifact`, `monitor_shell` and event
subscriptions, and those patterns then run over text that may be hostile too (files, a tool's
output, a job's output, a webhook's body). Python's `re` backtracks: `(a+)+$` against forty
`a`s and a `!` runs for days, on the event loop for a subscription, so one pattern could stop
`heron serve`. RE2 never backtracks, so a search costs time linear in the text whatever the
pattern; what it gives up (lookaround, backreferences) is refused with an error that says so.
`\\d`, `\\w` and `\\b` are ASCII in RE2; Python's `\\Z` is read as RE2's `\\z`.

A search through RE2's Python binding costs a few times one through `re`, so line-by-line
search first asks RE2's prefilter whether a block of lines holds the literals every match
needs, and searches the lines of a block only when it does.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterator, Sequence
from typing import Final

import re2  # type: ignore[import-untyped]

from heron.errors import HeronError

MAX_PATTERN_CHARS: Final = 1_000
_BLOCK_LINES: Final = 64

_NOT_IN_RE2: Final = (
    "heron matches patterns in linear time, in RE2 syntax: lookahead, lookbehind and "
    "backreferences are not supported"
)
_NOTHING: Final = r"[^\x00-\x{10FFFF}]"
_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_PYTHON_END: Final = re.compile(r"(?<!\\)((?:\\\\)*)\\Z")
"""Python's `\\Z` (the end of the text), which RE2 spells `\\z`; an escaped backslash before
a `Z` is left alone."""

log = logging.getLogger(__name__)


class PatternError(HeronError, ValueError):
    """A pattern heron will not match: too long, or not valid RE2 syntax."""


class OutsidePattern:
    """One compiled pattern from outside."""

    __slots__ = ("_prefilter", "_regexp", "pattern")

    def __init__(self, pattern: str) -> None:
        if len(pattern) > MAX_PATTERN_CHARS:
            raise PatternError(f"pattern is longer than {MAX_PATTERN_CHARS:,} characters")
        options = re2.Options()
        options.log_errors = False  # the error goes to the caller, not to stderr
        spelled = _PYTHON_END.sub(r"\1\\z", pattern)
        try:
            self._regexp = re2.compile(spelled, options)
            prefilter = re2.Filter()
            prefilter.Add(spelled, options)
            prefilter.Compile()
        except re2.error as exc:
            raise PatternError(_explain(exc)) from None
        except UnicodeEncodeError:
            raise PatternError("pattern holds a lone surrogate, which is not text") from None
        # A pattern that can match the empty string needs no literal: nothing to filter on.
        self._prefilter = prefilter if prefilter.Match(b"", True) is None else None
        self.pattern = pattern

    def found_in(self, text: str) -> bool:
        """Whether the pattern matches anywhere in `text`."""
        return self._regexp.search(_utf8(text)) is not None

    def first_at(self, text: str) -> int | None:
        """Where in `text` (in characters) the first match starts, if there is one."""
        match = self._regexp.search(_LONE_SURROGATE.sub("\ufffd", text))
        return None if match is None else int(match.start())

    def matching_lines(self, lines: Sequence[str]) -> Iterator[int]:
        """The indices of `lines` the pattern matches, each line searched alone."""
        for start in range(0, len(lines), _BLOCK_LINES):
            block = lines[start : start + _BLOCK_LINES]
            if self._prefilter is not None and not self._prefilter.Match(
                _utf8("\n".join(block)), True
            ):
                continue  # a match in any one line would need literals the block lacks
            yield from (start + i for i, line in enumerate(block) if self.found_in(line))

    def __repr__(self) -> str:
        return f"OutsidePattern({self.pattern!r})"


@functools.lru_cache(maxsize=256)
def stored_pattern(pattern: str) -> OutsidePattern:
    """A pattern read back from a store, compiled once. One stored before heron matched
    patterns with RE2 may be refused now: it then matches nothing (fails closed) and is
    logged once."""
    try:
        return OutsidePattern(pattern)
    except PatternError as exc:
        log.warning("stored pattern %r matches nothing: %s", pattern, exc)
        return OutsidePattern(_NOTHING)


def _utf8(text: str) -> bytes:
    # A lone surrogate (undecodable input kept as text) is not UTF-8; it matches nothing.
    return text.encode("utf-8", "surrogatepass")


def _explain(exc: Exception) -> str:
    """RE2's "what: fragment" as "what at 'fragment'", with the reason for the two refusals
    Python's `re` would have accepted."""
    detail = exc.args[0] if exc.args else b""
    text = detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)
    what, _, fragment = text.partition(": ")
    said = f"{what} at {fragment!r}" if fragment else what or "invalid regular expression"
    if what in ("invalid perl operator", "invalid escape sequence"):
        return f"{said} ({_NOT_IN_RE2})"
    return said
