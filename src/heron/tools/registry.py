"""Tool assembly: which tools an agent, a run and an iteration may see and call.

`ToolRegistry` collects tools in named bundles. `ScopedRegistry` is the immutable effective
set for one agent (bundles, autonomy, allow-list, `excluded_tools`); `narrow()` makes a per-run
subset that can only shrink. `ActivatedToolSet` holds tools activated at run time (deferred
MCP) for the whole session.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Literal, assert_never, get_args

from heron.tools.definition import Tool, ToolDefinitionError, ToolSpec

Autonomy = Literal["read-only", "supervised", "full"]
"""How much an agent may do unasked: only read-only tools, ask before the rest, or everything."""

NAMESPACE_SEP = "__"
"""Joins a namespace and a tool name (`<server>__<tool>` for MCP tools); a bare name resolves to
the one namespaced tool it uniquely suffixes."""


def normalize_name(name: str) -> str:
    """The comparison form of a tool name for exclusion checks: trimmed and case-folded."""
    return name.strip().casefold()


class ToolRegistry:
    """All tools a process knows, grouped into bundles (`core`, `files`, `mcp:<server>`, …)."""

    def __init__(self, tools: Iterable[Tool] = (), *, bundle: str = "default") -> None:
        self._tools: dict[str, Tool] = {}
        self._bundles: dict[str, list[str]] = {}
        self.add_all(tools, bundle=bundle)

    def add(self, tool: Tool, *, bundle: str = "default") -> None:
        name = tool.spec.name
        if name in self._tools:
            raise ToolDefinitionError([f"tool {name!r} is registered twice"])
        self._tools[name] = tool
        self._bundles.setdefault(bundle, []).append(name)

    def add_all(self, tools: Iterable[Tool], *, bundle: str = "default") -> None:
        for tool in tools:
            self.add(tool, bundle=bundle)

    @property
    def bundles(self) -> Mapping[str, list[str]]:
        return self._bundles

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def tools(self) -> list[Tool]:
        return list(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def scope(
        self,
        *,
        bundles: Collection[str] | None = None,
        autonomy: Autonomy = "supervised",
        allowed_tools: Collection[str] | None = None,
        excluded_tools: Collection[str] = (),
    ) -> ScopedRegistry:
        """Assemble the effective tool set for one agent."""
        problems = [f"unknown tool bundle {b!r}" for b in bundles or () if b not in self._bundles]
        if autonomy not in get_args(Autonomy):
            known = ", ".join(map(repr, get_args(Autonomy)))
            problems.append(f"unknown autonomy {autonomy!r} (known: {known})")
        if problems:
            raise ToolDefinitionError(problems)
        names = (
            [n for b in bundles for n in self._bundles[b]]
            if bundles is not None
            else list(self._tools)
        )
        tools = [self._tools[n] for n in names]
        match autonomy:
            case "read-only":
                tools = [t for t in tools if t.spec.annotations.read_only]
            case "supervised" | "full":
                pass
            case unknown:
                assert_never(unknown)
        if allowed_tools is not None:
            allowed = set(allowed_tools)
            tools = [t for t in tools if t.spec.name in allowed]
        return ScopedRegistry(tools, excluded_tools=excluded_tools, autonomy=autonomy)


class ScopedRegistry:
    """The immutable effective tool set of one agent. Specs are built once and shared."""

    __slots__ = ("_by_name", "_excluded", "_specs", "_suffix", "autonomy")

    def __init__(
        self,
        tools: Iterable[Tool],
        *,
        excluded_tools: Collection[str] = (),
        autonomy: Autonomy = "supervised",
    ) -> None:
        self._excluded = frozenset(normalize_name(n) for n in excluded_tools)
        self.autonomy: Autonomy = autonomy
        self._by_name: dict[str, Tool] = {
            t.spec.name: t for t in tools if not self.is_excluded(t.spec.name)
        }
        self._specs: tuple[ToolSpec, ...] = tuple(t.spec for t in self._by_name.values())
        self._suffix = _suffix_index(self._by_name)

    @property
    def excluded(self) -> frozenset[str]:
        return self._excluded

    def is_excluded(self, name: str) -> bool:
        return normalize_name(name) in self._excluded

    def specs(self) -> tuple[ToolSpec, ...]:
        return self._specs

    def names(self) -> list[str]:
        return list(self._by_name)

    def get(self, name: str) -> Tool | None:
        """Exact name, else a namespaced tool whose suffix after `__` uniquely equals `name`."""
        tool = self._by_name.get(name)
        if tool is None and NAMESPACE_SEP not in name:
            tool = self._suffix.get(name)
        return tool

    def narrow(self, allowed_tools: Collection[str]) -> ScopedRegistry:
        """A per-run subset. It can only narrow: names outside this registry grant nothing."""
        allowed = set(allowed_tools)
        return ScopedRegistry(
            (t for n, t in self._by_name.items() if n in allowed),
            excluded_tools=self._excluded,
            autonomy=self.autonomy,
        )


def _suffix_index(tools: Mapping[str, Tool]) -> dict[str, Tool]:
    """Map bare suffixes of namespaced names to their tool, dropping ambiguous suffixes."""
    seen: dict[str, Tool | None] = {}
    for name, tool in tools.items():
        _, sep, suffix = name.partition(NAMESPACE_SEP)
        if sep and suffix:
            seen[suffix] = None if suffix in seen else tool
    return {s: t for s, t in seen.items() if t is not None}


class ActivatedToolSet:
    """Tools activated at run time (deferred MCP). Lives for the session; insertion order is kept
    so loaded schemas stay where they were first inserted (prompt-cache friendly)."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._specs: tuple[ToolSpec, ...] = ()

    def activate(self, tool: Tool) -> bool:
        """Add a tool; returns False when it was already active (activation is idempotent)."""
        name = tool.spec.name
        if name in self._tools:
            return False
        self._tools[name] = tool
        self._specs = (*self._specs, tool.spec)
        return True

    def get(self, name: str) -> Tool | None:
        tool = self._tools.get(name)
        if tool is None and NAMESPACE_SEP not in name:
            tool = _suffix_index(self._tools).get(name)
        return tool

    def specs(self) -> tuple[ToolSpec, ...]:
        return self._specs

    def names(self) -> list[str]:
        return list(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)
