"""Loading user tools: every `Tool` object (e.g. from `@heron.tool`) in a file or module."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from heron._support.own_paths import claim_config_file
from heron.tools.definition import Tool, ToolDefinitionError


def _import(source: str) -> ModuleType:
    if source.endswith(".py") or "/" in source:
        path = Path(source).resolve()
        if not path.is_file():
            raise ToolDefinitionError([f"tools file {source} does not exist"])
        claim_config_file(path)  # code heron runs: a tool may not change it unasked
        name = f"heron_user_tools_{abs(hash(str(path)))}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ToolDefinitionError([f"cannot import tools file {source}"])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    return importlib.import_module(source)


def load_tools(sources: list[str]) -> list[Tool]:
    """Import each source and collect its tools in definition order."""
    tools: list[Tool] = []
    for source in sources:
        module = _import(source)
        found = [
            v for v in vars(module).values() if isinstance(v, Tool) and not isinstance(v, type)
        ]
        if not found:
            raise ToolDefinitionError(
                [f"{source} defines no tools (decorate functions with @heron.tool)"]
            )
        tools.extend(found)
    return tools
