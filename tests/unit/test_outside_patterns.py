"""Patterns from outside (`heron._support.patterns`): linear time, the same lines as a search of
each line alone, and refusals that say why."""

from __future__ import annotations

import random
import re

import pytest

from heron._support.patterns import OutsidePattern, PatternError, stored_pattern

# Python's re backtracks for days (about 2**40 steps) on each text it does not match.
TRAPS = [
    (r"(a+)+$", "a" * 40 + "!", False),
    (r"^(\w+\s?)+$", "word " * 40 + "!", False),
    (r"(x|x)*y", "x" * 40, False),
    (r"(.*a){20}b", "a" * 40, False),
    (r"(a|aa)+$", "a" * 40, True),
]


@pytest.mark.parametrize(("pattern", "text", "found"), TRAPS)
def test_a_pattern_that_backtracks_in_re_is_answered_in_linear_time(
    pattern: str, text: str, found: bool
) -> None:
    compiled = OutsidePattern(pattern)
    assert compiled.found_in(text) is found
    assert compiled.found_in(text * 1000) is found
    assert list(compiled.matching_lines([text] * 2000)) == (list(range(2000)) if found else [])


def test_the_prefilter_never_drops_a_line_a_search_of_that_line_alone_finds() -> None:
    # Anchors, flags, classes that hold a newline and non-ASCII text are where a search of a
    # block of lines and of one line alone could differ.
    patterns = [
        r"\Afoo", r"bar\z", r"^foo", r"bar$", r"(?m)^foo$", r"(?s)foo.bar", r"foo\sbar",
        r"foo[^x]bar", r"(?i)FOO", r"Straße", r"(?i)école", r"foo|\d{3}", r"\bbar\b",
        r"fo+b?a?r", r"[a-c]{2}foo", r"", r"x*",
    ]  # fmt: skip
    words = ["foo", "bar", "foobar", "foo bar", "Straße", "ÉCOLE", "école", "123", "x", " ", ""]
    rng = random.Random(7)
    lines = [" ".join(rng.choices(words, k=rng.randint(0, 4))) for _ in range(3000)]
    for pattern in patterns:
        compiled = OutsidePattern(pattern)
        alone = [i for i, line in enumerate(lines) if compiled.found_in(line)]
        assert list(compiled.matching_lines(lines)) == alone, pattern
        in_re = pattern.replace(r"\z", r"\Z")  # the same anchor, spelled as re spells it
        assert alone == [i for i, line in enumerate(lines) if re.search(in_re, line)], pattern


def test_first_at_counts_characters_not_bytes() -> None:
    assert OutsidePattern("ERROR").first_at("é€😀 ERROR") == 4
    assert OutsidePattern("x").first_at("abc") is None
    assert OutsidePattern("b").first_at("a\ud800b") == 2


@pytest.mark.parametrize(
    ("pattern", "said"),
    [
        ("foo(?=bar)", "invalid perl operator at '(?='"),
        ("(?<!x)y", "invalid perl operator at '(?<!'"),
        (r"(a)\1", "invalid escape sequence at '\\\\1'"),
    ],
)
def test_what_re2_leaves_out_is_refused_with_the_reason(pattern: str, said: str) -> None:
    with pytest.raises(PatternError) as refused:
        OutsidePattern(pattern)
    assert str(refused.value).startswith(said)
    assert "linear time" in str(refused.value) and "backreferences" in str(refused.value)


def test_bad_syntax_and_overlong_patterns_are_refused() -> None:
    with pytest.raises(PatternError, match=r"^missing \) at 'def \('$"):
        OutsidePattern("def (")
    with pytest.raises(PatternError, match="longer than 1,000 characters"):
        OutsidePattern("a" * 1001)


def test_a_stored_pattern_re2_refuses_matches_nothing() -> None:
    legacy = stored_pattern("deploy(?= failed)")
    assert not legacy.found_in("deploy failed") and not legacy.found_in("")
    assert list(legacy.matching_lines(["deploy failed", ""])) == []
    assert stored_pattern("deploy").found_in("deploy failed")
