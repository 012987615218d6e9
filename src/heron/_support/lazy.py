"""Lazy package exports: a public name is imported from its module on first access, so
importing a package (and starting the `heron` command) stays fast."""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # `typing` is not imported on the way to `heron --help`
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


def lazy_getattr(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """A module `__getattr__` resolving `exports` (name → module) and caching in `namespace`."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
