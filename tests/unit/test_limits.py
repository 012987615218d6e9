"""The one input limit and its one check (`heron._support.limits`)."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator

import pytest

from heron._support.limits import (
    DEFAULT_LIMITS,
    InputLimits,
    InputRejected,
    check_value,
    clean_text,
    clean_value,
    has_lone_surrogate,
    input_limits,
    is_finite_number,
    parse_json,
    set_input_limits,
)


@pytest.fixture
def small() -> Iterator[InputLimits]:
    limits = InputLimits(max_depth=3, max_bytes=100)
    previous = set_input_limits(limits)
    yield limits
    set_input_limits(previous)


def rejected(text: str | bytes) -> tuple[str, str]:
    with pytest.raises(InputRejected) as caught:
        parse_json(text)
    return caught.value.kind, caught.value.problem


def test_the_defaults_are_documented_values() -> None:
    assert InputLimits(max_depth=64, max_bytes=16 * 1024 * 1024) == DEFAULT_LIMITS
    assert input_limits() == DEFAULT_LIMITS
    with pytest.raises(ValueError, match=r"max_depth must be 1\.\.200"):
        InputLimits(max_depth=201)
    with pytest.raises(ValueError, match="max_bytes must be positive"):
        InputLimits(max_bytes=0)


def test_ordinary_json_parses_as_json() -> None:
    assert parse_json('{"a": [1, 2.5, "x", null, true, {"b": "\\ud83d\\ude00"}]}') == {
        "a": [1, 2.5, "x", None, True, {"b": "😀"}]
    }
    assert parse_json(b'{"caf\xc3\xa9": 1}') == {"café": 1}
    # Brackets inside strings are text, not nesting.
    assert parse_json('{"t": "' + "[{" * 1000 + '"}') == {"t": "[{" * 1000}


def test_nesting_far_past_the_limit_is_refused_before_parsing_without_recursion() -> None:
    deep = "[" * 200_000 + "]" * 200_000
    assert rejected(deep) == (
        "depth",
        "arguments: nested more than 64 levels deep (the limit of heron's input checks)",
    )
    assert rejected("[" * 65 + "]" * 65)[0] == "depth"
    assert parse_json("[" * 64 + "]" * 64) is not None


def test_numbers_no_double_holds_are_refused_with_their_place() -> None:
    assert rejected('{"x": [1, NaN]}') == (
        "number",
        "x[1]: expected a finite number, got NaN",
    )
    assert rejected('{"x": -Infinity}')[1] == "x: expected a finite number, got -Infinity"
    assert rejected('{"x": 1e400}')[1] == "x: expected a finite number, got 1e400"
    assert rejected('{"x": 1' + "0" * 400 + "}")[1] == (
        "x: expected a finite number, got integer of 401 digits"
    )
    # Past Python's own 4300-digit limit too (which would raise a bare ValueError).
    assert rejected('{"x": ' + "9" * 10_000 + "}")[0] == "number"
    biggest = int(sys.float_info.max)
    assert parse_json(f'{{"x": {biggest}}}') == {"x": biggest}


def test_lone_surrogates_are_refused_and_pairs_are_characters() -> None:
    assert rejected('{"k": {"v": "a\\udcff"}}') == (
        "text",
        "k.v: text holds a lone surrogate (\\udcff), which is not Unicode; send the "
        "character itself or a valid surrogate pair",
    )
    assert rejected('{"\\ud800": 1}')[1].startswith("\\ud800: text holds a lone surrogate")


def test_bytes_must_be_utf8_and_syntax_errors_say_where() -> None:
    assert rejected(b'{"a": "\xff"}') == (
        "syntax",
        "arguments: not UTF-8 text (byte 7 is invalid)",
    )
    assert rejected('{"a": 1') == (
        "syntax",
        "arguments: invalid JSON: Expecting ',' delimiter at position 7",
    )


def test_the_limits_in_force_are_the_ones_set(small: InputLimits) -> None:
    assert rejected("[[[[]]]]")[0] == "depth"
    assert rejected('"' + "x" * 200 + '"')[1] == (
        "arguments: 202 bytes or more of JSON, over the limit of 100"
    )
    with pytest.raises(InputRejected, match="over the limit of 100"):
        check_value({"x": "y" * 200})
    assert parse_json("[[[]]]") == [[[]]]


def test_check_value_walks_python_values_iteratively() -> None:
    deep: object = 1
    for _ in range(100_000):
        deep = {"a": deep}
    with pytest.raises(InputRejected) as caught:
        check_value(deep)
    assert caught.value.kind == "depth"
    assert caught.value.path == ("a",) * 64
    for value, kind in [
        ({"x": float("nan")}, "number"),
        ({"x": (1, 10**400)}, "number"),
        ({"x": {1, 2}}, "type"),
        ({1: "x"}, "type"),
        ({"x": "\ud800"}, "text"),
    ]:
        with pytest.raises(InputRejected) as caught:
            check_value(value)
        assert caught.value.kind == kind
    check_value({"x": "\ud800"}, strict_text=False)
    check_value({"t": (1, 2.5, True, None, "s")})


def test_clean_text_is_the_documented_replacement() -> None:
    text = "ok"
    assert clean_text(text) is text
    assert clean_text("caf\udce9") == "caf\\xe9"  # surrogateescape: the byte it stands for
    assert clean_text("a\ud800b") == "a\\ud800b"
    assert clean_text("\ud83d\ude00") == "😀"  # a split pair is joined
    assert clean_text(b"caf\xe9".decode("utf-8", "surrogateescape")) == b"caf\xe9".decode(
        "utf-8", "backslashreplace"
    )
    assert not has_lone_surrogate(clean_text("\udcff\ud800"))
    value = {"k\udcff": ["v\udcfe", 1]}
    assert clean_value(value) == {"k\\xff": ["v\\xfe", 1]}
    untouched = {"a": ["b"]}
    assert clean_value(untouched) is untouched


def test_finite_numbers() -> None:
    assert is_finite_number(1) and is_finite_number(-2.5)
    assert not is_finite_number(True)
    assert not is_finite_number(math.inf) and not is_finite_number(10**400)
