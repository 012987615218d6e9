"""Strict argument validation and the wording of argument problems.

Both validators here refuse silent coercion: `"5"` is not an integer, `1.0` is not an integer and
`true` is not a number. Every problem names the field it concerns (`filter.tags[2]`) and says what
was expected and what arrived, because the model reads these lines and has to fix its call.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from pydantic_core import ErrorDetails

from heron._support.limits import (
    InputRejected,
    check_value,
    describe_number,
    format_path,
    is_finite_number,
)
from heron.tools.definition import ToolArgumentsError

if TYPE_CHECKING:
    from jsonschema import TypeChecker, ValidationError
    from jsonschema.validators import _Validator

__all__ = [
    "SchemaValidator",
    "check_input",
    "describe_value",
    "format_path",
    "pydantic_problems",
]

_Path = Sequence[str | int]


def _is_integer(_checker: TypeChecker, value: object) -> bool:
    return isinstance(value, int) and is_finite_number(value)


def _is_number(_checker: TypeChecker, value: object) -> bool:
    return is_finite_number(value)


@cache
def _strict_validator() -> type[_Validator]:
    # jsonschema (with attrs, referencing, rpds) loads on the first hand-written schema, not with
    # every `@tool`: most agents never need it, and it costs start-up time and memory.
    from jsonschema import Draft202012Validator, validators

    from heron.tools import schema_patterns

    # jsonschema's stock checker calls 1.0 an integer; a strict validator must not. JSON Schema
    # numbers are finite: NaN, Infinity and 10^400 are no number of any type.
    strict_types = Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"integer": _is_integer, "number": _is_number}
    )
    # Patterns are matched by RE2 in linear time: a schema's and an argument's author may
    # both be hostile (heron.tools.schema_patterns).
    keywords = {
        **Draft202012Validator.VALIDATORS,
        "pattern": schema_patterns.pattern,
        "patternProperties": schema_patterns.pattern_properties,
        "additionalProperties": schema_patterns.additional_properties,
    }
    return validators.create(
        meta_schema=Draft202012Validator.META_SCHEMA,
        validators=keywords,
        type_checker=strict_types,
    )


class SchemaValidator:
    """Strict validation of raw JSON-like arguments against a JSON Schema.

    Used for class-based tools and MCP tools, whose schemas are written by hand.

    The schema is checked and compiled once; `jsonschema.SchemaError` escapes the constructor when
    the schema itself is broken. `format` stays an annotation (the JSON Schema 2020-12 default), so
    a server's own format handling is not second-guessed.
    """

    __slots__ = ("_tool", "_validator")

    def __init__(self, tool: str, schema: Mapping[str, Any]) -> None:
        strict = _strict_validator()
        strict.check_schema(schema)
        self._tool = tool
        self._validator = strict(schema)

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Return `dict(arguments)`, or raise `ToolArgumentsError` listing every problem.

        The input limits come first (`heron._support.limits.check_value`: depth, size, finite
        numbers, Unicode text), so the schema walk never meets a value it cannot handle.
        """
        check_input(self._tool, arguments)
        problems = _schema_problems(self._validator.iter_errors(arguments))
        if problems:
            raise ToolArgumentsError(self._tool, problems)
        return dict(arguments)


def check_input(tool: str, arguments: Mapping[str, Any]) -> None:
    """Raise `ToolArgumentsError` when `arguments` break the input limits (one problem)."""
    try:
        check_value(arguments)
    except InputRejected as exc:
        raise ToolArgumentsError(tool, [exc.problem]) from None


def describe_value(value: object) -> str:
    """Name a JSON value's type together with a short rendering of it: `string '5'`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {'true' if value else 'false'}"
    if isinstance(value, int | float):
        return describe_number(value)
    if isinstance(value, str):
        text = repr(value)
        return f"string {text if len(text) <= 60 else text[:56] + '...' + text[0]}"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def _missing(path: _Path, name: object) -> str:
    if not path:
        return f"missing required argument '{name}'"
    return f"{format_path(path)}: missing required field '{name}'"


def _unexpected(path: _Path, name: object) -> str:
    if not path:
        return f"unexpected argument '{name}'"
    return f"{format_path(path)}: unexpected field '{name}'"


def _expected(path: _Path, expected: Iterable[str], value: object) -> str:
    wanted = " or ".join(dict.fromkeys(expected))
    return f"{format_path(path)}: expected {wanted}, got {describe_value(value)}"


def _schema_problems(errors: Iterable[ValidationError]) -> list[str]:
    problems: list[str] = []
    for error in errors:
        problems.extend(_schema_error_lines(error))
    return list(dict.fromkeys(problems))


def _schema_error_lines(error: ValidationError) -> list[str]:
    path = list(error.absolute_path)
    keyword, instance = error.validator, error.instance
    value: Any = error.validator_value
    if keyword == "type":
        return [_expected(path, [value] if isinstance(value, str) else value, instance)]
    if keyword == "required" and isinstance(instance, Mapping):
        return [_missing(path, name) for name in value if name not in instance]
    if keyword == "additionalProperties" and isinstance(instance, Mapping):
        from heron.tools.schema_patterns import additional_keys

        schema = error.schema if isinstance(error.schema, Mapping) else {}
        return [_unexpected(path, key) for key in additional_keys(instance, schema)]
    if keyword == "enum":
        options = ", ".join(json.dumps(option) for option in value)
        return [f"{format_path(path)}: expected one of {options}, got {describe_value(instance)}"]
    if keyword == "const":
        return [_expected(path, [json.dumps(value)], instance)]
    if keyword in ("anyOf", "oneOf") and error.context:
        # An optional or union field: when every branch only disagrees on type, say so in one line.
        type_errors = [e for e in error.context if e.validator == "type" and not e.relative_path]
        if len({e.relative_schema_path[0] for e in type_errors}) == len(value):
            kinds: list[Any] = [e.validator_value for e in type_errors]
            flat = [k for kind in kinds for k in ([kind] if isinstance(kind, str) else kind)]
            return [_expected(path, flat, instance)]
        from jsonschema.exceptions import best_match

        closest = best_match(error.context)
        if closest is not None:
            return _schema_error_lines(closest)
    return [f"{format_path(path)}: {error.message}"]


# Pydantic error types that mean "wrong kind of value", with the JSON kind that was wanted.
_PYDANTIC_EXPECTED: Mapping[str, str] = {
    "int_type": "integer",
    "int_parsing": "integer",
    "int_from_float": "integer",
    "float_type": "number",
    "float_parsing": "number",
    "bool_type": "boolean",
    "bool_parsing": "boolean",
    "string_type": "string",
    "list_type": "array",
    "dict_type": "object",
    "model_type": "object",
    "model_attributes_type": "object",
    "none_required": "null",
    "datetime_type": "RFC 3339 date-time string",
    "datetime_parsing": "RFC 3339 date-time string",
    "datetime_from_date_parsing": "RFC 3339 date-time string",
    "date_type": "date string (YYYY-MM-DD)",
    "date_parsing": "date string (YYYY-MM-DD)",
    "date_from_datetime_parsing": "date string (YYYY-MM-DD)",
    "date_from_datetime_inexact": "date string (YYYY-MM-DD)",
}


def _data_path(loc: Sequence[str | int], data: object) -> list[str | int]:
    """Keep the parts of a pydantic `loc` that address the input; drop union-member tags."""
    path: list[str | int] = []
    for part in loc:
        # Two branches on purpose: each narrows `data` so that indexing it type-checks.
        if isinstance(data, Mapping) and isinstance(part, str) and part in data:  # noqa: SIM114
            data = data[part]
        elif isinstance(data, list | tuple) and isinstance(part, int) and 0 <= part < len(data):
            data = data[part]
        else:
            continue
        path.append(part)
    return path


def pydantic_problems(errors: Iterable[ErrorDetails], arguments: Mapping[str, Any]) -> list[str]:
    """Word pydantic validation errors the way `SchemaValidator` words schema errors.

    Errors from the branches of one union at one place are merged into one line
    (`expected string or integer, got boolean true`).
    """
    # Each entry is a finished line or the path of a merged "expected ..." line.
    order: list[str | tuple[str | int, ...]] = []
    expected: dict[tuple[str | int, ...], tuple[list[str], object]] = {}
    for error in errors:
        loc, kind, value = error["loc"], error["type"], error["input"]
        if kind == "missing":
            order.append(_missing(_data_path(loc[:-1], arguments), loc[-1]))
        elif kind == "extra_forbidden":
            order.append(_unexpected(_data_path(loc[:-1], arguments), loc[-1]))
        elif kind in _PYDANTIC_EXPECTED or kind in ("enum", "literal_error"):
            path = tuple(_data_path(loc, arguments))
            wanted = _PYDANTIC_EXPECTED.get(kind) or str(error.get("ctx", {}).get("expected"))
            expected.setdefault(path, ([], value))[0].append(wanted)
            order.append(path)
        else:
            message = error["msg"][:1].lower() + error["msg"][1:]
            where = format_path(_data_path(loc, arguments))
            order.append(f"{where}: {message}, got {describe_value(value)}")
    return [
        item if isinstance(item, str) else _expected(item, *expected[item])
        for item in dict.fromkeys(order)
    ]
