"""MCP server pins: what a server is bound to at its approval, and how a live server compares.

A pin records how a server is launched and which package version that resolves to, the version
the server reports, and the sha256 of its canonical tool definitions. A later start whose
version or definitions differ is refused until an operator re-approves it, and the refusal
carries a readable diff (a "rug pull" never goes unnoticed).

Pins are kept in a `TrustStore`; `heron.mcp.trust.sqlite_store.SqliteTrustStore` keeps them in
heron's state database.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import shlex
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, Protocol

from heron._support.canonical import canonical_json
from heron.mcp.config import McpServerConfig
from heron.tools.registry import NAMESPACE_SEP

__all__ = [
    "PinCheck",
    "ServerIdentity",
    "ServerPin",
    "ToolDefinition",
    "TrustStore",
    "compare_pin",
    "definitions_digest",
    "diff_definitions",
    "launch_identity",
    "new_pin",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolDefinition:
    """One tool as an MCP server lists it, before heron wraps it."""

    server: str
    name: str
    description: str = ""
    title: str | None = None
    input_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})
    output_schema: Mapping[str, Any] | None = None
    annotations: Mapping[str, Any] = field(default_factory=dict)
    """The server's raw MCP annotations (`readOnlyHint`, `destructiveHint`, …): hints only."""

    @property
    def prefixed(self) -> str:
        """The namespaced name heron exposes: `<server>__<tool>`."""
        return f"{self.server}{NAMESPACE_SEP}{self.name}"

    def canonical(self) -> dict[str, Any]:
        """The JSON form that is hashed and pinned (server name excluded: renaming the server
        in configuration does not change what the server says)."""
        data: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        }
        if self.title is not None:
            data["title"] = self.title
        if self.output_schema is not None:
            data["outputSchema"] = self.output_schema
        if self.annotations:
            data["annotations"] = self.annotations
        return data

    @classmethod
    def from_canonical(cls, server: str, data: Mapping[str, Any]) -> ToolDefinition:
        return cls(
            server=server,
            name=str(data["name"]),
            description=str(data.get("description", "")),
            title=data.get("title"),
            input_schema=data.get("inputSchema") or {"type": "object"},
            output_schema=data.get("outputSchema"),
            annotations=data.get("annotations") or {},
        )


def definitions_digest(definitions: Iterable[ToolDefinition]) -> str:
    """sha256 over the canonical definitions, in tool-name order (listing order is irrelevant)."""
    items = sorted((d.canonical() for d in definitions), key=lambda d: str(d["name"]))
    return hashlib.sha256(canonical_json(items).encode()).hexdigest()


# -- identity -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerIdentity:
    """What a pin binds a server to besides its definitions."""

    launch: str
    """`stdio <command line>` or `http <url>`."""
    package_version: str = ""
    """Versions heron could resolve for the launch (npm package, Python distribution, script
    digest); empty when nothing could be resolved."""
    server_version: str = ""
    """`name/version` the server reports at connect."""


_RUNNERS = frozenset({"npx", "bunx", "pnpx", "uvx", "pipx"})
_MAX_DIGEST_BYTES = 8 * 1024 * 1024


def _runner_package(command: str, args: Sequence[str]) -> str | None:
    """The package spec a package runner (`npx -y pkg@1.2`, `uvx pkg==1`) is asked to run."""
    if Path(command).name not in _RUNNERS:
        return None
    skip_value = {"-p", "--package", "--from", "--with", "--python"}
    items = list(args)
    if Path(command).name == "pipx" and items[:1] == ["run"]:
        items = items[1:]
    i = 0
    while i < len(items):
        arg = items[i]
        if arg in skip_value:
            i += 2
            continue
        if not arg.startswith("-"):
            return arg
        i += 1
    return None


def _npm_package(path: Path) -> str | None:
    for parent in path.parents:
        manifest = parent / "package.json"
        if manifest.is_file():
            try:
                data = json.loads(manifest.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None
            if isinstance(data, dict) and "name" in data:
                return f"{data['name']}@{data.get('version', '?')}"
        if parent.name == "node_modules":
            return None
    return None


def _console_script_dist(name: str) -> str | None:
    for entry in metadata.entry_points(group="console_scripts", name=name):
        dist = entry.dist
        if dist is not None:
            return f"{dist.metadata['Name']}=={dist.version}"
    return None


def _file_digest(path: Path) -> str | None:
    try:
        if not path.is_file() or path.stat().st_size > _MAX_DIGEST_BYTES:
            return None
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError:
        return None


def launch_identity(config: McpServerConfig) -> ServerIdentity:
    """Resolve how a server is launched into a pinnable identity (without starting it).

    For stdio servers this records the command line and, where it can be resolved, the npm
    package or Python distribution version behind the command, or the sha256 of a script the
    command runs. Upgrading the package or editing the script changes the identity.
    """
    if config.url is not None:
        return ServerIdentity(launch=f"http {config.url}")
    assert config.command is not None
    launch = "stdio " + shlex.join([config.command, *config.args])
    versions: list[str] = []
    package = _runner_package(config.command, config.args)
    if package is not None:
        versions.append(f"package {package}")
    cwd = Path(config.cwd) if config.cwd else Path.cwd()
    exe = shutil.which(config.command, path=None) or str(cwd / config.command)
    resolved = Path(exe).resolve()
    if package is None:
        found = (
            _npm_package(resolved)
            if "node_modules" in resolved.parts
            else _console_script_dist(Path(config.command).name)
        )
        if found is not None:
            versions.append(found)
    for arg in config.args:
        if arg.startswith("-"):
            continue
        candidate = Path(arg) if Path(arg).is_absolute() else cwd / arg
        digest = _file_digest(candidate)
        if digest is not None:
            versions.append(f"{arg} sha256:{digest}")
    return ServerIdentity(launch=launch, package_version="; ".join(versions))


# -- pins -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerPin:
    """An approved server: identity, definitions digest and the definitions themselves."""

    server: str
    identity: ServerIdentity
    digest: str
    definitions: tuple[ToolDefinition, ...]
    approved_at: float


@dataclass(frozen=True, kw_only=True, slots=True)
class PinCheck:
    """The verdict of comparing a live server with its pin."""

    status: Literal["unpinned", "match", "changed"]
    changes: tuple[str, ...] = ()
    """One line per change (version, added / removed / changed tools)."""
    diff: str = ""
    """A unified diff of the canonical definitions, for the operator."""

    @property
    def ok(self) -> bool:
        return self.status == "match"


def _pretty(definitions: Iterable[ToolDefinition]) -> dict[str, list[str]]:
    return {
        d.name: json.dumps(d.canonical(), indent=2, sort_keys=True, ensure_ascii=False).splitlines()
        for d in definitions
    }


def diff_definitions(old: Sequence[ToolDefinition], new: Sequence[ToolDefinition]) -> str:
    """A unified diff of two definition lists, tool by tool in name order."""
    before, after = _pretty(old), _pretty(new)
    lines: list[str] = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name, []), after.get(name, [])
        if a == b:
            continue
        lines.extend(
            difflib.unified_diff(
                a,
                b,
                fromfile=f"pinned/{name}" if a else "/dev/null",
                tofile=f"live/{name}" if b else "/dev/null",
                lineterm="",
            )
        )
    return "\n".join(lines)


def _changed_fields(a: ToolDefinition, b: ToolDefinition) -> list[str]:
    ca, cb = a.canonical(), b.canonical()
    return sorted(k for k in set(ca) | set(cb) if ca.get(k) != cb.get(k))


def compare_pin(
    pin: ServerPin | None, identity: ServerIdentity, definitions: Sequence[ToolDefinition]
) -> PinCheck:
    """Compare a live server (identity and definitions) with its pin."""
    if pin is None:
        return PinCheck(status="unpinned")
    changes: list[str] = []
    old_id = pin.identity
    if old_id.launch != identity.launch:
        changes.append(f"launch changed: {old_id.launch!r} -> {identity.launch!r}")
    if old_id.package_version != identity.package_version:
        changes.append(
            f"package version changed: {old_id.package_version or '(unknown)'!r} -> "
            f"{identity.package_version or '(unknown)'!r}"
        )
    if identity.server_version and old_id.server_version != identity.server_version:
        changes.append(
            f"reported server version changed: {old_id.server_version or '(none)'!r} -> "
            f"{identity.server_version!r}"
        )
    if definitions_digest(definitions) != pin.digest:
        old = {d.name: d for d in pin.definitions}
        new = {d.name: d for d in definitions}
        changes += [f"tool added: {n}" for n in sorted(set(new) - set(old))]
        changes += [f"tool removed: {n}" for n in sorted(set(old) - set(new))]
        for name in sorted(set(old) & set(new)):
            fields = _changed_fields(old[name], new[name])
            if fields:
                changes.append(f"tool changed: {name} ({', '.join(fields)})")
    if not changes:
        return PinCheck(status="match")
    return PinCheck(
        status="changed",
        changes=tuple(changes),
        diff=diff_definitions(pin.definitions, definitions),
    )


def new_pin(
    server: str,
    identity: ServerIdentity,
    definitions: Sequence[ToolDefinition],
    *,
    approved_at: float,
) -> ServerPin:
    """The pin that approves `server` as it is now (definitions in name order)."""
    ordered = tuple(sorted(definitions, key=lambda d: d.name))
    return ServerPin(
        server=server,
        identity=identity,
        digest=definitions_digest(ordered),
        definitions=ordered,
        approved_at=approved_at,
    )


class TrustStore(Protocol):
    """Pins of approved MCP servers, one per server name (synchronous; a back-end failure
    raises `heron.errors.StoreError`). Compare a live server with `compare_pin(store.get(name),
    ...)`."""

    def get(self, server: str) -> ServerPin | None:
        """The pin of `server`, or None when it was never approved (or was revoked)."""
        ...

    def pins(self) -> list[ServerPin]:
        """Every pin, in server-name order."""
        ...

    def approve(
        self, server: str, identity: ServerIdentity, definitions: Sequence[ToolDefinition]
    ) -> ServerPin:
        """Pin (or re-pin) `server` to this identity and these definitions (`new_pin`, approved
        now) and return the stored pin."""
        ...

    def revoke(self, server: str) -> bool:
        """Forget the pin; the server needs approval again. False when there was none."""
        ...
