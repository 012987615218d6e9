from __future__ import annotations

from typing import Any

import pytest
from jsonschema import SchemaError

from heron.tools.definition import ToolArgumentsError
from heron.tools.validation import SchemaValidator, describe_value, format_path

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "count": {"type": "integer", "minimum": 1},
        "ratio": {"type": "number"},
        "mode": {"enum": ["fast", "safe"]},
        "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "filter": {"$ref": "#/$defs/Filter"},
    },
    "required": ["path"],
    "additionalProperties": False,
    "$defs": {
        "Filter": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["name"],
        }
    },
}


def problems_for(arguments: dict[str, Any], schema: dict[str, Any] = SCHEMA) -> list[str]:
    with pytest.raises(ToolArgumentsError) as caught:
        SchemaValidator("demo", schema).validate(arguments)
    assert caught.value.tool == "demo"
    return caught.value.problems


def test_valid_arguments_come_back_as_a_plain_dict_copy() -> None:
    arguments = {"path": "a.txt", "count": 2, "ratio": 2, "limit": None, "filter": {"name": "x"}}

    validated = SchemaValidator("demo", SCHEMA).validate(arguments)

    assert validated == arguments
    assert validated is not arguments


def test_a_numeric_string_is_not_an_integer() -> None:
    assert problems_for({"path": "a", "count": "5"}) == ["count: expected integer, got string '5'"]


def test_a_whole_float_is_not_an_integer_but_is_a_number() -> None:
    assert problems_for({"path": "a", "count": 1.0}) == ["count: expected integer, got number 1.0"]
    assert SchemaValidator("demo", SCHEMA).validate({"path": "a", "ratio": 1.0})["ratio"] == 1.0


def test_booleans_are_neither_integers_nor_numbers() -> None:
    assert problems_for({"path": "a", "count": True, "ratio": False}) == [
        "count: expected integer, got boolean true",
        "ratio: expected number, got boolean false",
    ]


def test_an_unexpected_argument_is_named_when_additional_properties_are_closed() -> None:
    assert problems_for({"path": "a", "colour": "red"}) == ["unexpected argument 'colour'"]


def test_a_missing_required_argument_is_named() -> None:
    assert problems_for({}) == ["missing required argument 'path'"]


def test_nested_problems_carry_a_dotted_path_with_indices() -> None:
    problems = problems_for({"path": "a", "filter": {"tags": ["ok", 3]}})

    assert sorted(problems) == [
        "filter.tags[1]: expected string, got integer 3",
        "filter: missing required field 'name'",
    ]


def test_every_problem_is_reported_in_one_error() -> None:
    problems = problems_for({"count": 0, "mode": "slow", "extra": 1})

    assert sorted(problems) == sorted(
        [
            "count: 0 is less than the minimum of 1",
            'mode: expected one of "fast", "safe", got string \'slow\'',
            "missing required argument 'path'",
            "unexpected argument 'extra'",
        ]
    )


def test_an_optional_field_of_the_wrong_type_is_one_readable_line() -> None:
    assert problems_for({"path": "a", "limit": "10"}) == [
        "limit: expected integer or null, got string '10'"
    ]


def test_a_broken_schema_is_refused_when_the_validator_is_built() -> None:
    with pytest.raises(SchemaError):
        SchemaValidator("demo", {"type": "object", "properties": {"x": {"type": "integr"}}})


def test_values_and_paths_are_described_in_json_terms() -> None:
    assert [describe_value(v) for v in (None, True, 3, 2.5, "hi", [1], {"a": 1})] == [
        "null",
        "boolean true",
        "integer 3",
        "number 2.5",
        "string 'hi'",
        "array",
        "object",
    ]
    assert describe_value("x" * 100).endswith("...'")
    assert format_path(["filter", "tags", 2, "name"]) == "filter.tags[2].name"
    assert format_path([]) == "arguments"


def test_non_finite_and_huge_numbers_are_refused_like_any_type_mismatch() -> None:
    # JSON Schema numbers are finite: NaN, Infinity and 10^400 are no number of any type.
    for value, shown in [
        (float("nan"), "NaN"),
        (float("inf"), "Infinity"),
        (-(10**400), "integer of about 401 digits"),
    ]:
        assert problems_for({"path": "a", "ratio": value}) == [
            f"ratio: expected a finite number, got {shown}"
        ]
        assert problems_for({"path": "a", "count": value}) == [
            f"count: expected a finite number, got {shown}"
        ]
    # Also where the schema says nothing about the value.
    assert problems_for({"path": "a", "filter": {"name": "x", "extra": [float("nan")]}}) == [
        "filter.extra[0]: expected a finite number, got NaN"
    ]


def test_the_input_limits_come_before_the_schema_walk() -> None:
    deep: object = "leaf"
    for _ in range(5000):
        deep = [deep]
    assert problems_for({"path": "a", "filter": {"name": "x", "tags": deep}}) == [
        "filter.tags" + "[0]" * 62 + ": nested more than 64 levels deep "
        "(the limit of heron's input checks)"
    ]
    assert problems_for({"path": "a\ud800"}) == [
        "path: text holds a lone surrogate (\\ud800), which is not Unicode; send the character "
        "itself or a valid surrogate pair"
    ]
