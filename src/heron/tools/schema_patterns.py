"""JSON Schema's keywords that match regular expressions, run by RE2 instead of Python's `re`.

An MCP server writes the patterns of its input schema and the model writes the values they are
matched against, so both sides may be hostile: a server's `"pattern": "^(a+)+$"` and an argument
of forty `a`s and a `!` would hold the event loop for days under jsonschema's own `re.search`.
These replace `pattern`, `patternProperties` and `additionalProperties` (which consults
`patternProperties`) in heron's strict validator (`heron.tools.validation`). A pattern RE2 cannot
run (lookaround, backreferences) fails the value with the reason instead of going unchecked.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from heron._support.patterns import OutsidePattern, PatternError

if TYPE_CHECKING:
    from jsonschema import ValidationError
    from jsonschema.validators import _Validator


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> OutsidePattern | str:
    """The compiled pattern, or why RE2 cannot run it."""
    try:
        return OutsidePattern(pattern)
    except PatternError as exc:
        return f"the schema's pattern {pattern!r} cannot be checked: {exc}"


def _error(message: str) -> ValidationError:
    from jsonschema import ValidationError

    return ValidationError(message)


def _key_matches(pattern: str, key: str) -> bool:
    """Whether a `patternProperties` pattern covers the property name `key` (never, for a
    pattern RE2 cannot run: such a key counts as not covered)."""
    compiled = _compiled(pattern)
    return not isinstance(compiled, str) and compiled.found_in(key)


def pattern(
    validator: _Validator, pattern: str, instance: Any, _schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    compiled = _compiled(pattern)
    if isinstance(compiled, str):
        yield _error(compiled)
    elif not compiled.found_in(instance):
        yield _error(f"{instance!r} does not match {pattern!r}")


def pattern_properties(
    validator: _Validator,
    patterns: Mapping[str, Any],
    instance: Any,
    _schema: Mapping[str, Any],
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for each, subschema in patterns.items():
        compiled = _compiled(each)
        if isinstance(compiled, str):
            yield _error(compiled)
            continue
        for key, value in instance.items():
            if compiled.found_in(key):
                yield from validator.descend(value, subschema, path=key, schema_path=each)


def additional_properties(
    validator: _Validator, allowed: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = additional_keys(instance, schema)
    if validator.is_type(allowed, "object"):
        for key in extras:
            yield from validator.descend(instance[key], allowed, path=key)
    elif allowed is False and extras:
        named = ", ".join(repr(key) for key in extras)
        yield _error(f"additional properties are not allowed ({named} unexpected)")


def additional_keys(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """The keys of `instance` that neither `properties` nor `patternProperties` cover."""
    known = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [
        key
        for key in instance
        if key not in known and not any(_key_matches(each, key) for each in patterns)
    ]
