"""The lazy public API of `heron.mcp`: its `TYPE_CHECKING` imports, `_EXPORTS` and `__all__` agree.

A lazily exporting package names each public name twice: in `_EXPORTS` (name → module, for the
module `__getattr__`) and in the `TYPE_CHECKING` block, as `from module import X as X` (the
explicit re-export type checkers need, since they cannot read the computed
`__all__ = sorted(_EXPORTS)`). `lazy_export_problems` checks any such package; add a package
to `LAZY_PACKAGES` to have it checked.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from types import ModuleType

import pytest

LAZY_PACKAGES = ["heron.mcp"]


def _type_checking_imports(tree: ast.Module) -> tuple[dict[str, str], list[str]]:
    """(name → module) of the imports under `if TYPE_CHECKING:`, and the imports that are not
    explicit re-exports (`X as X`)."""
    imported: dict[str, str] = {}
    not_reexported: list[str] = []
    for node in tree.body:
        if not (isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"):
            continue
        for stmt in node.body:
            if not isinstance(stmt, ast.ImportFrom):
                continue
            for alias in stmt.names:
                name = alias.asname or alias.name
                imported[name] = stmt.module or ""
                if alias.asname != alias.name:
                    not_reexported.append(f"{stmt.module}.{alias.name}")
    return imported, not_reexported


def lazy_export_problems(package: str) -> list[str]:
    """Every disagreement between a lazy package's `TYPE_CHECKING` block, `_EXPORTS` and
    `__all__`, and every exported name that does not resolve (empty when all is well)."""
    module = importlib.import_module(package)
    return export_problems(module, inspect.getsource(module))


def export_problems(module: ModuleType, source: str) -> list[str]:
    """`lazy_export_problems` for a module and its source."""
    package = module.__name__
    exports: dict[str, str] = module._EXPORTS
    imported, not_reexported = _type_checking_imports(ast.parse(source))
    problems = [
        f"{package}: {n} is imported without `as` (not re-exported)" for n in not_reexported
    ]
    for name in sorted(set(imported) | set(exports)):
        if name not in exports:
            problems.append(f"{package}: {name} is imported for type checkers but not exported")
        elif name not in imported:
            problems.append(f"{package}: {name} is exported but not imported for type checkers")
        elif imported[name] != exports[name]:
            problems.append(
                f"{package}: {name} comes from {imported[name]} for type checkers "
                f"but from {exports[name]} at run time"
            )
    if module.__all__ != sorted(exports):
        problems.append(f"{package}: __all__ is not sorted(_EXPORTS)")
    for name, source in exports.items():
        try:
            value = getattr(module, name)
        except AttributeError:
            problems.append(f"{package}: {name} does not resolve from {source}")
            continue
        if value is not getattr(importlib.import_module(source), name):
            problems.append(f"{package}: {name} resolves to something else than {source}.{name}")
    return problems


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_type_checking_imports_exports_and_all_agree(package: str) -> None:
    assert lazy_export_problems(package) == []


def test_an_unknown_name_is_an_attribute_error() -> None:
    module = importlib.import_module("heron.mcp")
    with pytest.raises(AttributeError, match="no attribute 'does_not_exist'"):
        module.does_not_exist  # noqa: B018


def test_the_checker_names_each_kind_of_disagreement() -> None:
    source = textwrap.dedent(
        """
        from typing import TYPE_CHECKING

        from heron._support.lazy import lazy_getattr

        if TYPE_CHECKING:
            from heron.tools.registry import NAMESPACE_SEP as NAMESPACE_SEP
            from heron.tools.registry import ToolRegistry
            from heron.tools.registry import normalize_name as normalize_name
            from heron.tools.definition import ToolSpec as ToolSpec

        _EXPORTS = {
            "NAMESPACE_SEP": "heron.tools.registry",
            "ToolRegistry": "heron.tools.registry",
            "ToolSpec": "heron.tools.registry",
            "ToolResult": "heron.tools.definition",
            "missing": "heron.tools.definition",
        }
        __getattr__ = lazy_getattr(__name__, _EXPORTS, globals())
        __all__ = ["NAMESPACE_SEP"]
        """
    )
    module = ModuleType("lazy_sample")
    exec(compile(source, "lazy_sample", "exec"), module.__dict__)
    assert export_problems(module, source) == [
        "lazy_sample: heron.tools.registry.ToolRegistry is imported without `as` (not re-exported)",
        "lazy_sample: ToolResult is exported but not imported for type checkers",
        "lazy_sample: ToolSpec comes from heron.tools.definition for type checkers "
        "but from heron.tools.registry at run time",
        "lazy_sample: missing is exported but not imported for type checkers",
        "lazy_sample: normalize_name is imported for type checkers but not exported",
        "lazy_sample: __all__ is not sorted(_EXPORTS)",
        "lazy_sample: missing does not resolve from heron.tools.definition",
    ]
