"""The package layout keeps its promises: no import cycle among `src/heron` modules (imports
inside functions count; `if TYPE_CHECKING:` blocks do not, they never run), packages import only
from their own layer or below (the ownership map in docs/architecture.md), and no module outside
the store implementations talks to SQLite or PostgreSQL directly."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

# Lowest first. A package may import its own layer or any layer below it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("heron._support", "heron.errors"),
    ("heron.messages", "heron.tools"),
    ("heron.safety", "heron.discovery"),
    ("heron.models", "heron.sandbox", "heron.artifacts"),
    ("heron.turn",),
    # The durable audit trails sit above the engine: the execution trail is a turn observer
    # (it reads the engine's records, events and bounds), and the approval trail implements the
    # engine's own `AuditLog`; the engine knows neither, it is handed one.
    ("heron.agent", "heron.checks", "heron.telemetry", "heron.audit"),
    (
        "heron.toolsets",
        "heron.connectors",
        "heron.mcp",
        "heron.sessions",
        "heron.collaboration",
        "heron.humans",
        "heron.skills",
    ),
    ("heron.always_on",),
    # The gateway hosts over the always-on server: its HTTP API, event streams and console.
    ("heron.gateway",),
    # Configuration: the schema and the builders that turn it into agents, built-in sets and
    # stores; above everything it assembles.
    ("heron.config",),
    ("heron.cli", "heron.demo", "heron.acp"),
)


@dataclass(frozen=True, slots=True)
class Edge:
    source: str
    target: str
    line: int


@cache
def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(name: str) -> str | None:
    """The longest existing module a dotted import name points into."""
    known = modules()
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            hidden.update(id(n) for n in ast.walk(node))
    return hidden


def _edges(module: str, path: Path) -> Iterator[Edge]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    hidden = _type_checking_nodes(tree)
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import sub` imports the submodule; `from mod import name`, the module.
            known = modules()
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            names = subs if len(subs) == len(node.names) else [base, *subs]
        for name in names:
            if name == "heron" or name.startswith("heron."):
                target = _resolve(name)
                if target and target != module:
                    yield Edge(module, target, node.lineno)


@cache
def graph() -> dict[str, tuple[Edge, ...]]:
    return {m: tuple(_edges(m, p)) for m, p in modules().items()}


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (iterative Tarjan)."""
    edges = {m: sorted({e.target for e in es}) for m, es in graph().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            targets = edges[node]
            if child < len(targets):
                work.append((node, child + 1))
                target = targets[child]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            for target in targets:
                if target in on_stack:
                    low[node] = min(low[node], low[target])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _layer(module: str) -> int | None:
    for level, packages in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in packages):
            return level
    return None


def test_no_import_cycle_among_heron_modules_counting_function_level_imports() -> None:
    assert _cycles() == []


def test_every_module_belongs_to_a_layer_of_the_ownership_map() -> None:
    unplaced = [m for m in modules() if m != "heron" and _layer(m) is None]
    assert unplaced == []


def test_packages_import_only_their_own_layer_or_below() -> None:
    upward = [
        f"{e.source}:{e.line} imports {e.target}"
        for edges in graph().values()
        for e in edges
        if e.source != "heron"
        and (src := _layer(e.source)) is not None
        and (dst := _layer(e.target)) is not None
        and dst > src
    ]
    assert upward == []


def test_the_ownership_map_in_the_docs_names_every_package() -> None:
    text = (SRC.parents[0] / "docs" / "architecture.md").read_text(encoding="utf-8")
    packages = sorted({p.removeprefix("heron.") for level in LAYERS for p in level})
    missing = [p for p in packages if f"`{p.replace('.', '/')}" not in text]
    assert missing == []


def _importers(package: str) -> dict[str, list[int]]:
    """The modules that import `package` (or a module of it), with the lines."""
    importers = defaultdict(list)
    for module, path in modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == package or n.startswith(f"{package}.") for n in names):
                importers[module].append(node.lineno)
    return importers


def test_only_store_implementations_import_sqlite3() -> None:
    importers = _importers("sqlite3")
    allowed = {
        m
        for m in importers
        if m.rsplit(".", 1)[-1].startswith("sqlite") or m == "heron._support.state"
    }
    assert sorted(set(importers) - allowed) == []


def test_only_postgresql_store_implementations_import_psycopg() -> None:
    importers = {**_importers("psycopg"), **_importers("psycopg_pool")}
    allowed = {m for m in importers if m.rsplit(".", 1)[-1].startswith(("postgres", "pg"))}
    assert sorted(set(importers) - allowed) == []
