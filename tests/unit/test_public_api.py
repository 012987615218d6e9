"""The public surface of `heron`: lazy exports, docstrings, the error family and a frozen
signature snapshot.

The snapshot (`public_api.json` beside this file) records the signature of every name in
`heron.__all__`. A change to the public API fails `test_public_api_matches_the_snapshot`;
when the change is intended, regenerate the snapshot and commit it with the change:

    HERON_UPDATE_API_SNAPSHOT=1 .venv/bin/pytest -q tests/unit/test_public_api.py
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import itertools
import json
import os
import pkgutil
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pydantic
import pytest

import heron
from heron import ConfigurationError, HeronError

SNAPSHOT = Path(__file__).with_name("public_api.json")
UPDATE = os.environ.get("HERON_UPDATE_API_SNAPSHOT") == "1"
INIT = Path(heron.__file__)


def test_every_public_name_resolves_lazily() -> None:
    for name in heron.__all__:
        assert getattr(heron, name) is not None
    with pytest.raises(AttributeError):
        heron.does_not_exist  # noqa: B018


def test_all_is_the_sorted_export_table() -> None:
    assert heron.__all__ == sorted(heron._EXPORTS)
    assert len(set(heron.__all__)) == len(heron.__all__)


def _type_checking_imports() -> dict[str, str]:
    """name → module of the `if TYPE_CHECKING:` block of `heron/__init__.py`."""
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    imports: dict[str, str] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.module is not None
        for alias in node.names:
            # `X as X` is what marks a re-export for type checkers.
            assert alias.asname == alias.name, f"import {alias.name} as {alias.name}"
            imports[alias.name] = node.module
    return imports


def test_type_checking_block_and_exports_agree() -> None:
    assert _type_checking_imports() == heron._EXPORTS


def test_exports_resolve_to_the_module_that_defines_them() -> None:
    for name, module in heron._EXPORTS.items():
        value = getattr(importlib.import_module(module), name)
        defined_in = getattr(value, "__module__", module)
        if isinstance(value, type | types.FunctionType):
            assert defined_in == module, f"{name} is defined in {defined_in}, not {module}"


# --- docstrings -------------------------------------------------------------------------------


def _alias_docstrings(module: str) -> dict[str, str]:
    """Docstrings written as a string right under a module-level assignment (type aliases)."""
    source = inspect.getsource(importlib.import_module(module))
    body = ast.parse(source).body
    found: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        target = (
            node.targets[0]
            if isinstance(node, ast.Assign)
            else node.target
            if isinstance(node, ast.AnnAssign)
            else None
        )
        if (
            isinstance(target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            found[target.id] = after.value.value
    return found


def _own_docstring(value: Any) -> str:
    if not isinstance(value, type | types.FunctionType):
        return ""
    doc = value.__dict__.get("__doc__") if isinstance(value, type) else value.__doc__
    if not isinstance(doc, str):
        return ""
    if dataclasses.is_dataclass(value) and doc.startswith(f"{value.__name__}("):
        return ""  # the signature dataclasses write when a class has no docstring
    return doc.strip()


def test_every_exported_name_has_a_docstring() -> None:
    missing = []
    for name, module in heron._EXPORTS.items():
        value = getattr(heron, name)
        doc = _own_docstring(value) or _alias_docstrings(module).get(name, "").strip()
        if not doc:
            missing.append(name)
    assert missing == []


# --- the error family -------------------------------------------------------------------------


def _every_module() -> Iterator[types.ModuleType]:
    yield heron
    for info in pkgutil.walk_packages(heron.__path__, prefix="heron."):
        yield importlib.import_module(info.name)


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module in _every_module():
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def test_every_exception_class_in_heron_derives_from_heron_error() -> None:
    classes = _exception_classes()
    assert len(classes) > 40  # the walk really saw the package
    strays = sorted(name for name, cls in classes.items() if not issubclass(cls, HeronError))
    assert strays == []


def test_every_configuration_error_is_exported() -> None:
    configuration = {
        cls for cls in _exception_classes().values() if issubclass(cls, ConfigurationError)
    }
    public = [getattr(heron, name) for name in heron.__all__]
    exported = {value for value in public if isinstance(value, type) and value in configuration}
    assert configuration == exported
    assert {cls.__name__ for cls in configuration} >= {
        "ConfigurationError",
        "ConfigError",
        "McpConfigError",
        "ProviderConfigError",
        "BuiltinError",
        "ToolDefinitionError",
    }


def test_errors_keep_the_standard_base_their_callers_catch() -> None:
    assert issubclass(heron.ToolArgumentsError, ValueError)
    assert issubclass(heron.ConfigError, ValueError)
    assert issubclass(heron.ToolDefinitionError, ValueError)
    assert issubclass(heron.ToolDefinitionError, TypeError)  # what `@tool` raised before
    assert issubclass(heron.ModelError, RuntimeError)
    assert issubclass(heron.ProviderConfigError, heron.ModelError)
    assert issubclass(heron.ProviderConfigError, ConfigurationError)


def test_a_configuration_error_lists_every_problem() -> None:
    error = ConfigurationError("heron.toml", problems=["unknown key 'a'", "'b': not an int"])
    assert error.problems == ("unknown key 'a'", "'b': not an int")
    assert str(error) == "heron.toml:\n- unknown key 'a'\n- 'b': not an int"


def test_a_configuration_error_without_a_heading_reads_as_its_problems() -> None:
    assert str(ConfigurationError("just one")) == "just one"
    assert ConfigurationError("just one").problems == ("just one",)
    assert str(ConfigurationError(problems=["only"])) == "only"
    assert str(ConfigurationError(problems=["a", "b"])) == "2 problems:\n- a\n- b"


def test_tool_definition_errors_list_every_problem() -> None:
    def undocumented(a, b: set[int]) -> None:  # type: ignore[no-untyped-def]
        pass

    with pytest.raises(heron.ToolDefinitionError) as caught:
        heron.tool(undocumented)
    assert caught.value.problems == (
        "parameter 'a': missing type hint",
        caught.value.problems[1],
        "no description: write a docstring or pass description=",
    )
    assert caught.value.problems[1].startswith("parameter 'b': unsupported type set[int]")
    assert str(caught.value).startswith("cannot make a tool from 'undocumented':\n- ")


# --- the frozen signature snapshot ------------------------------------------------------------


def _type_text(hint: Any) -> str:
    """A version-stable rendering of a type alias (Literal values, union members)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return _type_text(args[0])
    if origin is typing.Literal:
        return "Literal[" + ", ".join(repr(a) for a in args) + "]"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_text(a) for a in args)
    if isinstance(hint, type):
        return hint.__qualname__
    return repr(hint)


def _default_text(value: Any) -> str:
    if value is inspect.Parameter.empty:
        return ""
    if isinstance(value, type | types.FunctionType):
        return value.__qualname__
    text = repr(value)
    return "<object>" if " at 0x" in text else text


def _signature(fn: Any) -> str:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return "(?)"
    parts = []
    seen_star = False
    for param in signature.parameters.values():
        text = param.name
        if param.kind is param.VAR_POSITIONAL:
            text, seen_star = f"*{param.name}", True
        elif param.kind is param.VAR_KEYWORD:
            text = f"**{param.name}"
        elif param.kind is param.KEYWORD_ONLY and not seen_star:
            parts.append("*")
            seen_star = True
        if param.annotation is not param.empty:
            text += f": {_annotation(param.annotation)}"
        if param.default is not param.empty:
            text += f" = {_default_text(param.default)}"
        parts.append(text)
        if param.kind is param.POSITIONAL_ONLY and _is_last_positional_only(signature, param):
            parts.append("/")
    returns = signature.return_annotation
    tail = "" if returns is signature.empty else f" -> {_annotation(returns)}"
    return f"({', '.join(parts)}){tail}"


def _is_last_positional_only(signature: inspect.Signature, param: inspect.Parameter) -> bool:
    params = list(signature.parameters.values())
    index = params.index(param)
    return index + 1 == len(params) or params[index + 1].kind is not param.POSITIONAL_ONLY


def _annotation(annotation: Any) -> str:
    return annotation if isinstance(annotation, str) else _type_text(annotation)


def _fields(cls: type) -> dict[str, str]:
    if dataclasses.is_dataclass(cls):
        return {
            f.name: _annotation(f.type)
            + (
                f" = {_default_text(f.default)}"
                if f.default is not dataclasses.MISSING
                else " = <factory>"
                if f.default_factory is not dataclasses.MISSING
                else ""
            )
            for f in dataclasses.fields(cls)
        }
    if issubclass(cls, pydantic.BaseModel):
        hints: dict[str, str] = {}
        for base in reversed(cls.__mro__):
            if base.__module__.startswith("heron."):
                hints.update(inspect.get_annotations(base))
        return {
            name: _annotation(hints.get(name, field.annotation))
            + ("" if field.is_required() else f" = {_default_text(field.default)}")
            for name, field in cls.model_fields.items()
        }
    return {}


def _members(cls: type) -> dict[str, str]:
    members: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if not base.__module__.startswith("heron."):
            continue
        for name, value in vars(base).items():
            if name.startswith("_") and name != "__call__":
                continue
            if isinstance(value, property):
                members[name] = "property"
            elif isinstance(value, classmethod | staticmethod):
                members[name] = _signature(getattr(cls, name))
            elif isinstance(value, types.FunctionType):
                members[name] = _signature(value)
    return dict(sorted(members.items()))


def _describe(value: Any) -> dict[str, Any]:
    if isinstance(value, type):
        entry: dict[str, Any] = {
            "kind": "protocol" if getattr(value, "_is_protocol", False) else "class",
            "bases": [b.__qualname__ for b in value.__bases__ if b is not typing.Generic],
        }
        if fields := _fields(value):
            entry["fields"] = fields
        elif any("__init__" in vars(b) for b in value.__mro__ if b.__module__.startswith("heron")):
            entry["init"] = _signature(value)
        if members := _members(value):
            entry["members"] = members
        return entry
    if isinstance(value, types.FunctionType):
        return {"kind": "function", "signature": _signature(value)}
    if isinstance(value, Mapping):
        return {"kind": "constant", "keys": sorted(value)}
    return {"kind": "alias", "value": _type_text(value)}


def _current_api() -> dict[str, Any]:
    return {name: _describe(getattr(heron, name)) for name in heron.__all__}


def test_public_api_matches_the_snapshot() -> None:
    current = _current_api()
    if UPDATE:
        SNAPSHOT.write_text(json.dumps(current, indent=2, ensure_ascii=False) + "\n", "utf-8")
    recorded = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    changed = sorted(
        name for name in current.keys() | recorded.keys() if current.get(name) != recorded.get(name)
    )
    assert changed == [], (
        "the public API changed; if that is intended, regenerate the snapshot with "
        "`HERON_UPDATE_API_SNAPSHOT=1 .venv/bin/pytest -q tests/unit/test_public_api.py`"
    )
