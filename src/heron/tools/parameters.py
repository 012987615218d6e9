"""A function's parameters as the model sees them: pydantic field definitions per parameter
(with the docstring's or `Annotated` descriptions), the types JSON can describe, and the JSON
Schema shown to the model (runtime-only arguments hidden, titles dropped)."""

from __future__ import annotations

import datetime as dt
import enum
import inspect
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo

from heron.tools.definition import ToolContext

__all__ = ["parameter_fields", "type_name", "unsupported_parts", "visible_schema"]

_SCALARS: tuple[Any, ...] = (str, int, float, bool, type(None), dt.datetime, dt.date)
_SUPPORTED = (
    "str, int, float, bool, None, Optional/unions, list[...], dict[str, ...], Literal, Enum, "
    "datetime, date, pydantic models, TypedDicts, Annotated[..., Field(...)]"
)


def parameter_fields(
    parameters: Sequence[inspect.Parameter],
    hints: Mapping[str, Any],
    docs: Mapping[str, str],
    problems: list[str],
) -> tuple[dict[str, str], dict[str, Any], str | None]:
    """Model field definitions per parameter (plus the ToolContext parameter, if any).

    A parameter with a problem gets a field name but no definition, so the caller can tell.
    """
    fields: dict[str, str] = {}
    definitions: dict[str, Any] = {}
    context_param: str | None = None
    for index, param in enumerate(parameters):
        where = f"parameter '{param.name}'"
        hint = hints.get(param.name)
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            problems.append(f"{where}: *args/**kwargs cannot be described to a model")
        elif param.kind is param.POSITIONAL_ONLY:
            problems.append(f"{where}: positional-only parameters cannot be passed by name")
        elif param.name not in hints:
            problems.append(f"{where}: missing type hint")
        elif hint is ToolContext:
            if context_param is not None:
                problems.append(f"{where}: only one parameter may take the ToolContext")
            context_param = param.name
            continue
        elif isinstance(param.default, FieldInfo):
            problems.append(f"{where}: put Field(...) in Annotated[...], not in the default")
        elif unsupported := unsupported_parts(hint):
            names = ", ".join(unsupported)
            problems.append(f"{where}: unsupported type {names} (supported: {_SUPPORTED})")
        else:
            default = ... if param.default is param.empty else param.default
            text = _annotated_description(hint) or docs.get(param.name)
            definitions[f"p{index}"] = (hint, Field(default, alias=param.name, description=text))
        fields[param.name] = f"p{index}"
    return fields, definitions, context_param


def unsupported_parts(hint: Any) -> list[str]:
    """The parts of `hint` that cannot be described as JSON (empty when all is well)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return unsupported_parts(args[0])
    if origin in (typing.Union, types.UnionType):
        return [part for arg in args for part in unsupported_parts(arg)]
    if origin is list and len(args) == 1:
        return unsupported_parts(args[0])
    if origin is dict and len(args) == 2:
        keys = [] if args[0] is str else [f"dict key {type_name(args[0])}"]
        return keys + unsupported_parts(args[1])
    if origin is Literal or hint in _SCALARS:
        return []
    if isinstance(hint, type) and (
        issubclass(hint, enum.Enum | BaseModel)
        or (issubclass(hint, dict) and hasattr(hint, "__required_keys__"))  # a TypedDict
    ):
        return []
    return [type_name(hint)]


def type_name(hint: Any) -> str:
    return hint.__qualname__ if isinstance(hint, type) else repr(hint)


def _annotated_description(hint: Any) -> str | None:
    """An explicit `Annotated[..., Field(description=...)]` wins over the docstring."""
    if typing.get_origin(hint) is typing.Annotated:
        for meta in reversed(typing.get_args(hint)[1:]):
            if isinstance(meta, FieldInfo) and meta.description:
                return meta.description
    return None


_VERBATIM_KEYS = frozenset({"default", "enum", "const", "examples"})
_NAME_MAP_KEYS = frozenset({"properties", "$defs", "patternProperties"})


def _clean(node: Any) -> Any:
    """Drop pydantic's `title` noise; keep descriptions, defaults, required and the rest."""
    if isinstance(node, list):
        return [_clean(item) for item in node]
    if not isinstance(node, dict):
        return node
    cleaned: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _VERBATIM_KEYS:
            cleaned[key] = value
        elif key in _NAME_MAP_KEYS and isinstance(value, dict):
            cleaned[key] = {name: _clean(schema) for name, schema in value.items()}
        else:
            cleaned[key] = _clean(value)
    if cleaned.get("type") == "object" and "properties" in cleaned:
        # Validation forbids unknown keys at every level; the schema says so too.
        cleaned.setdefault("additionalProperties", False)
    return cleaned


def visible_schema(model: type[BaseModel], hidden: Sequence[str]) -> dict[str, Any]:
    schema: dict[str, Any] = _clean(model.model_json_schema())
    for key in hidden:
        schema["properties"].pop(key, None)
    required = [key for key in schema.get("required", ()) if key not in hidden]
    schema.pop("required", None)
    if required:
        schema["required"] = required
    return schema
