"""Trust in MCP servers: pins, description scanning, shadowing and capability labels.

A server's tool descriptions are untrusted input: they go straight into the model's context.
heron therefore

- **pins** each server at its first approval: how it is launched and which package version that
  resolves to, the version the server reports, and the sha256 of its canonical tool definitions.
  A later start whose version or definitions differ is refused until an operator re-approves
  it, and the refusal carries a readable diff (a "rug pull" never goes unnoticed);
- **scans** descriptions (and the descriptions inside input schemas) for injected instructions:
  requests for secrets, "ignore previous instructions", instructions aimed at other tools,
  concealment from the user, and hidden Unicode (zero-width, bidi controls, tag characters);
- **detects shadowing**: two servers exposing the same bare tool name, confusable names, a
  name that equals a built-in tool, or near-identical descriptions;
- **labels capabilities** (reads private data, ingests untrusted content, sends data out) and
  flags the *lethal trifecta* when one tool set has all three.

The pin store is a table in heron's state database (`heron._support.state.open_db`).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import shlex
import shutil
import sqlite3
import time
import unicodedata
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from heron._support.state import open_db
from heron.mcp.config import CapabilityLabel, McpServerConfig, name_matches
from heron.tools.definition import ToolSpec

__all__ = [
    "Finding",
    "PinCheck",
    "ServerIdentity",
    "ServerPin",
    "ToolDefinition",
    "TrifectaReport",
    "TrustStore",
    "capability_labels",
    "compare_pin",
    "definitions_digest",
    "detect_shadowing",
    "diff_definitions",
    "launch_identity",
    "lethal_trifecta",
    "scan_definition",
    "scan_definitions",
    "spec_capability_labels",
]

NAMESPACE_SEP = "__"


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


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def definitions_digest(definitions: Iterable[ToolDefinition]) -> str:
    """sha256 over the canonical definitions, in tool-name order (listing order is irrelevant)."""
    items = sorted((d.canonical() for d in definitions), key=lambda d: str(d["name"]))
    return hashlib.sha256(_canonical_json(items).encode()).hexdigest()


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


_SCHEMA = """
CREATE TABLE IF NOT EXISTS mcp_server_pins (
    server TEXT PRIMARY KEY,
    launch TEXT NOT NULL,
    package_version TEXT NOT NULL,
    server_version TEXT NOT NULL,
    digest TEXT NOT NULL,
    definitions TEXT NOT NULL,
    approved_at REAL NOT NULL
)
"""


class TrustStore:
    """Pins of approved MCP servers in heron's state database."""

    def __init__(self, state_dir: Path) -> None:
        self._state_dir = state_dir

    def _connect(self) -> sqlite3.Connection:
        conn = open_db(self._state_dir)
        conn.execute(_SCHEMA)
        return conn

    def get(self, server: str) -> ServerPin | None:
        """The pin of `server`, or None when it was never approved (or was revoked)."""
        conn = self._connect()
        try:
            row = conn.execute(
                "SELECT launch, package_version, server_version, digest, definitions, "
                "approved_at FROM mcp_server_pins WHERE server = ?",
                (server,),
            ).fetchone()
        finally:
            conn.close()
        if row is None:
            return None
        launch, package_version, server_version, digest, defs, approved_at = row
        return ServerPin(
            server=server,
            identity=ServerIdentity(
                launch=launch, package_version=package_version, server_version=server_version
            ),
            digest=digest,
            definitions=tuple(ToolDefinition.from_canonical(server, d) for d in json.loads(defs)),
            approved_at=approved_at,
        )

    def pins(self) -> list[ServerPin]:
        """Every pin, in server-name order."""
        conn = self._connect()
        try:
            names = [r[0] for r in conn.execute("SELECT server FROM mcp_server_pins")]
        finally:
            conn.close()
        return [p for p in (self.get(n) for n in sorted(names)) if p is not None]

    def approve(
        self, server: str, identity: ServerIdentity, definitions: Sequence[ToolDefinition]
    ) -> ServerPin:
        """Pin (or re-pin) `server` to this identity and these definitions."""
        ordered = sorted(definitions, key=lambda d: d.name)
        pin = ServerPin(
            server=server,
            identity=identity,
            digest=definitions_digest(ordered),
            definitions=tuple(ordered),
            approved_at=time.time(),
        )
        conn = self._connect()
        try:
            with conn:
                conn.execute(
                    "INSERT OR REPLACE INTO mcp_server_pins VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        server,
                        identity.launch,
                        identity.package_version,
                        identity.server_version,
                        pin.digest,
                        _canonical_json([d.canonical() for d in ordered]),
                        pin.approved_at,
                    ),
                )
        finally:
            conn.close()
        return pin

    def revoke(self, server: str) -> bool:
        """Forget the pin; the server needs approval again. False when there was none."""
        conn = self._connect()
        try:
            with conn:
                cur = conn.execute("DELETE FROM mcp_server_pins WHERE server = ?", (server,))
        finally:
            conn.close()
        return cur.rowcount > 0

    def check(
        self, server: str, identity: ServerIdentity, definitions: Sequence[ToolDefinition]
    ) -> PinCheck:
        """Compare a live server with its stored pin."""
        return compare_pin(self.get(server), identity, definitions)


# -- description scanning -------------------------------------------------------------------

FindingKind = Literal[
    "secret_request",
    "override",
    "concealment",
    "cross_tool",
    "hidden_unicode",
    "markup",
    "exfiltration",
    "long_description",
    "shadowing",
    "similar_description",
]
Severity = Literal["high", "medium", "low"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One suspicious thing found in a server's tool definitions."""

    kind: FindingKind
    severity: Severity
    server: str
    tool: str
    message: str
    excerpt: str = ""


_SECRET_TERMS = (
    r"(?:ssh|private|gpg|pgp)[\s_-]*keys?|id_(?:rsa|dsa|ecdsa|ed25519)|\.ssh\b|\.aws\b|\.env\b|"
    r"\.netrc|\.npmrc|\.pypirc|kubeconfig|mcp\.json|api[\s_-]?keys?|access[\s_-]?tokens?|"
    r"auth[\s_-]?tokens?|bearer[\s_-]?tokens?|session[\s_-]?(?:tokens?|cookies?)|passwords?|"
    r"passphrases?|credentials?|secrets?|seed[\s_-]?phrases?|cookies?"
)
_SECRET_VERBS = (
    r"pass|send|include|provide|attach|forward|upload|share|copy|paste|read|cat|output|"
    r"return|append|add|put|supply|submit|embed|leak|transmit|post"
)

_PATTERNS: tuple[tuple[FindingKind, Severity, str, re.Pattern[str]], ...] = (
    (
        "secret_request",
        "high",
        "asks for secrets",
        re.compile(
            rf"\b(?:{_SECRET_VERBS})\b[^.\n]{{0,80}}?(?:{_SECRET_TERMS})",
            re.IGNORECASE,
        ),
    ),
    (
        "override",
        "high",
        "tries to override the agent's instructions",
        re.compile(
            r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:all\s+|any\s+|your\s+|the\s+)?"
            r"(?:previous|prior|above|earlier|other|system|safety|existing)?\s*"
            r"(?:instructions?|directions?|rules|prompts?|guidelines|policies|messages)\b"
            r"|\b(?:new|updated|real)\s+system\s+prompt\b|\byou\s+are\s+now\b",
            re.IGNORECASE,
        ),
    ),
    (
        "concealment",
        "high",
        "asks to hide something from the user",
        re.compile(
            r"\b(?:do\s+not|don't|never)\s+(?:tell|inform|mention|reveal|show|notify|alert)\b"
            r"[^.\n]{0,30}\buser\b|\bwithout\s+(?:telling|informing|notifying|asking|alerting)\s+"
            r"(?:the\s+)?user\b|\b(?:hide|conceal)\s+(?:this|it|that)\b|\buser\s+(?:must|should)"
            r"\s+not\s+(?:know|see|notice)\b",
            re.IGNORECASE,
        ),
    ),
    (
        "cross_tool",
        "medium",
        "gives instructions about when or how tools are used",
        re.compile(
            r"\b(?:before|after|instead\s+of|when(?:ever)?)\s+(?:using|calling|invoking|running)"
            r"\s+(?:any\s+|the\s+|this\s+|other\s+|another\s+)?(?:other\s+)?tools?\b|\b(?:always|must)\s+"
            r"(?:use|call|prefer|invoke)\s+this\s+tool\b|\binstead\s+of\s+(?:any\s+)?other\s+tools?\b"
            r"|\b(?:do\s+not|don't|never)\s+(?:use|call)\s+(?:any\s+)?other\s+tools?\b",
            re.IGNORECASE,
        ),
    ),
    (
        "markup",
        "medium",
        "contains directive markup aimed at the model",
        re.compile(
            r"<\s*/?\s*(?:important|system|instructions?|secret|hidden|admin)\s*>|<!--|"
            r"\[\s*(?:system|important|admin)\s*\]",
            re.IGNORECASE,
        ),
    ),
    (
        "exfiltration",
        "high",
        "asks to send data to an address",
        re.compile(
            r"\b(?:send|post|upload|forward|transmit|report)\b[^.\n]{0,60}\bto\s+"
            r"(?:https?://|[\w.+-]+@[\w-]+\.[\w.]+)",
            re.IGNORECASE,
        ),
    ),
)

_SECRET_PARAM = re.compile(
    r"(?:^|[_-])(?:ssh|private_key|password|passphrase|secret|credential|api_?key|token|"
    r"cookie)s?(?:$|[_-])",
    re.IGNORECASE,
)
_LONG_DESCRIPTION = 4000


def _invisible(ch: str) -> bool:
    code = ord(ch)
    if 0xE0000 <= code <= 0xE007F or 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF:
        return True
    return unicodedata.category(ch) == "Cf"


def _hidden_unicode(text: str) -> tuple[list[str], str]:
    """Code points of invisible characters, and the ASCII smuggled in Unicode tag characters."""
    found = sorted({f"U+{ord(c):04X}" for c in text if _invisible(c)})
    smuggled = "".join(chr(ord(c) - 0xE0000) for c in text if 0xE0020 <= ord(c) <= 0xE007E)
    return found, smuggled


def _schema_texts(schema: Any, path: str = "") -> Iterable[tuple[str, str]]:
    """(where, text) for every description, title, default and enum string in a schema."""
    if isinstance(schema, Mapping):
        for key, value in schema.items():
            where = f"{path}.{key}" if path else str(key)
            if key in ("description", "title", "default") and isinstance(value, str):
                yield where, value
            elif key == "enum" and isinstance(value, list):
                for item in value:
                    if isinstance(item, str):
                        yield where, item
            else:
                yield from _schema_texts(value, where)
    elif isinstance(schema, list):
        for i, item in enumerate(schema):
            yield from _schema_texts(item, f"{path}[{i}]")


def _excerpt(text: str, start: int, end: int) -> str:
    lo, hi = max(0, start - 30), min(len(text), end + 30)
    snippet = " ".join(text[lo:hi].split())
    return ("…" if lo else "") + snippet + ("…" if hi < len(text) else "")


def _word_in(name: str, text: str) -> re.Match[str] | None:
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text)


def scan_definition(
    definition: ToolDefinition, *, other_tools: Collection[str] = ()
) -> list[Finding]:
    """Findings for one tool definition.

    `other_tools` are names of tools the definition should not be talking about (tools of other
    servers and built-ins, bare and namespaced); a description that names one is a
    `cross_tool` finding.
    """
    texts: list[tuple[str, str]] = [("description", definition.description)]
    if definition.title:
        texts.append(("title", definition.title))
    texts.extend((f"inputSchema.{w}", t) for w, t in _schema_texts(definition.input_schema, ""))
    findings: list[Finding] = []

    def add(kind: FindingKind, severity: Severity, message: str, excerpt: str = "") -> None:
        findings.append(
            Finding(
                kind=kind,
                severity=severity,
                server=definition.server,
                tool=definition.name,
                message=message,
                excerpt=excerpt,
            )
        )

    for where, text in texts:
        hidden, smuggled = _hidden_unicode(text)
        if hidden:
            note = f"; hidden text reads {smuggled!r}" if smuggled else ""
            add(
                "hidden_unicode",
                "high",
                f"{where} contains invisible characters ({', '.join(hidden)}){note}",
            )
        visible = "".join(c for c in text if not _invisible(c))
        for kind, severity, message, pattern in _PATTERNS:
            match = pattern.search(visible)
            if match:
                add(kind, severity, f"{where} {message}", _excerpt(visible, *match.span()))
        for other in other_tools:
            if other in (definition.name, definition.prefixed):
                continue
            match = _word_in(other, visible)
            if match:
                add(
                    "cross_tool",
                    "medium",
                    f"{where} names another tool, {other!r}",
                    _excerpt(visible, *match.span()),
                )
    if len(definition.description) > _LONG_DESCRIPTION:
        add(
            "long_description",
            "low",
            f"description is unusually long ({len(definition.description)} characters)",
        )
    properties = definition.input_schema.get("properties")
    if isinstance(properties, Mapping):
        for param in properties:
            if _SECRET_PARAM.search(str(param)):
                add(
                    "secret_request",
                    "medium",
                    f"takes a secret-looking parameter {param!r}; check that it needs one",
                )
    return findings


def _normalise_name(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.casefold())


def _normalise_text(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.casefold()))


def detect_shadowing(
    definitions: Sequence[ToolDefinition], *, builtin_names: Collection[str] = ()
) -> list[Finding]:
    """Collisions between servers: same or confusable bare names, a bare name equal to a
    built-in tool, and near-identical descriptions on different servers."""
    findings: list[Finding] = []
    by_name: dict[str, list[ToolDefinition]] = defaultdict(list)
    for d in definitions:
        by_name[_normalise_name(d.name)].append(d)
    for group in by_name.values():
        servers = sorted({d.server for d in group})
        if len(servers) > 1:
            names = sorted({d.name for d in group})
            for d in group:
                findings.append(
                    Finding(
                        kind="shadowing",
                        severity="medium",
                        server=d.server,
                        tool=d.name,
                        message=(
                            f"tool name {' / '.join(names)} is exposed by servers "
                            f"{', '.join(servers)}; call it by its namespaced name"
                        ),
                    )
                )
    builtins = {_normalise_name(n): n for n in builtin_names}
    for d in definitions:
        if _normalise_name(d.name) in builtins:
            findings.append(
                Finding(
                    kind="shadowing",
                    severity="medium",
                    server=d.server,
                    tool=d.name,
                    message=(
                        f"tool name shadows the built-in tool {builtins[_normalise_name(d.name)]!r}"
                    ),
                )
            )
    texts = [(d, _normalise_text(d.description)) for d in definitions]
    for i, (a, ta) in enumerate(texts):
        if len(ta) < 20:
            continue
        for b, tb in texts[i + 1 :]:
            if a.server == b.server or len(tb) < 20:
                continue
            matcher = difflib.SequenceMatcher(None, ta, tb, autojunk=False)
            if matcher.real_quick_ratio() >= 0.9 and matcher.ratio() >= 0.9:
                for x, y in ((a, b), (b, a)):
                    findings.append(
                        Finding(
                            kind="similar_description",
                            severity="medium",
                            server=x.server,
                            tool=x.name,
                            message=f"description nearly identical to {y.prefixed}",
                        )
                    )
    return findings


def scan_definitions(
    definitions: Sequence[ToolDefinition], *, builtin_names: Collection[str] = ()
) -> list[Finding]:
    """Scan a whole catalogue: each description (naming tools of *other* servers or built-ins
    counts as a cross-tool instruction) plus shadowing between servers."""
    findings: list[Finding] = []
    by_server: dict[str, list[ToolDefinition]] = defaultdict(list)
    for d in definitions:
        by_server[d.server].append(d)
    for server, defs in by_server.items():
        others = {
            name
            for d in definitions
            if d.server != server
            for name in (d.prefixed, d.name)
            if len(name) >= 4
        } | {n for n in builtin_names if len(n) >= 4}
        own = {d.name for d in defs}
        for d in defs:
            findings.extend(scan_definition(d, other_tools=others - own))
    findings.extend(detect_shadowing(definitions, builtin_names=builtin_names))
    return findings


# -- capability labels and the lethal trifecta --------------------------------------------


def _word_set(text: str) -> frozenset[str]:
    return frozenset(text.split())


_LABEL_WORDS: Mapping[CapabilityLabel, frozenset[str]] = {
    "private_data": _word_set(
        "file files filesystem directory directories folder read_file document documents "
        "email emails mail inbox message messages chat dm calendar contact contacts database "
        "db sql query records repository repo private personal secret secrets credential "
        "credentials password env environment memory notes note drive account accounts "
        "customer customers profile history logs"
    ),
    "untrusted_content": _word_set(
        "fetch browse browser web url urls http https website webpage page pages scrape crawl "
        "download internet online search rss feed feeds email emails mail inbox issue issues "
        "comment comments ticket tickets tweet tweets post posts review reviews html "
        "message messages"
    ),
    "sends_out": _word_set(
        "send sends email mail post publish upload webhook webhooks tweet notify share submit "
        "comment reply push fetch http https url request requests browse message sms call "
        "invite"
    ),
}


def _words(text: str) -> set[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    return set(re.findall(r"[a-z0-9]+", spaced.lower()))


def _heuristic_labels(name: str, description: str) -> set[CapabilityLabel]:
    words = _words(name) | _words(description[:400])
    return {label for label, vocab in _LABEL_WORDS.items() if words & vocab}


def _declared(
    declared: Mapping[str, Sequence[CapabilityLabel]] | None, name: str
) -> set[CapabilityLabel] | None:
    if not declared:
        return None
    hits = [set(labels) for pattern, labels in declared.items() if name_matches(pattern, name)]
    return set().union(*hits) if hits else None


def capability_labels(
    definition: ToolDefinition,
    *,
    declared: Mapping[str, Sequence[CapabilityLabel]] | None = None,
) -> frozenset[CapabilityLabel]:
    """Capability labels of an MCP tool: the operator's declaration for its name if any
    (globs over the server's own tool names), else a heuristic over name and description.

    The heuristic errs towards labelling: a missed label hides a trifecta, an extra one only
    asks for a second look.
    """
    explicit = _declared(declared, definition.name)
    if explicit is not None:
        return frozenset(explicit)
    return frozenset(_heuristic_labels(definition.name, definition.description))


def spec_capability_labels(
    spec: ToolSpec, *, declared: Mapping[str, Sequence[CapabilityLabel]] | None = None
) -> frozenset[CapabilityLabel]:
    """Capability labels of any heron tool (built-ins included), by its spec.

    `declared` globs match the full tool name here.
    """
    explicit = _declared(declared, spec.name)
    if explicit is not None:
        return frozenset(explicit)
    labels = _heuristic_labels(spec.name, spec.description)
    if spec.annotations.open_world:
        labels.add("untrusted_content")
        if not spec.annotations.read_only:
            labels.add("sends_out")
    return frozenset(labels)


@dataclass(frozen=True, kw_only=True, slots=True)
class TrifectaReport:
    """Which tools of a set contribute each leg of the lethal trifecta."""

    private_data: tuple[str, ...]
    untrusted_content: tuple[str, ...]
    sends_out: tuple[str, ...]

    @property
    def present(self) -> bool:
        """All three legs are reachable with this tool set."""
        return bool(self.private_data and self.untrusted_content and self.sends_out)

    def describe(self) -> str:
        """One paragraph for the operator."""
        if not self.present:
            missing = [
                leg
                for leg, tools in (
                    ("private data", self.private_data),
                    ("untrusted content", self.untrusted_content),
                    ("an outbound channel", self.sends_out),
                )
                if not tools
            ]
            return "No lethal trifecta: nothing here gives " + " or ".join(missing) + "."
        return (
            "Lethal trifecta: this tool set can read private data ("
            + ", ".join(self.private_data)
            + "), take in untrusted content ("
            + ", ".join(self.untrusted_content)
            + ") and send data out ("
            + ", ".join(self.sends_out)
            + "). Injected content could make the agent leak private data; remove one leg "
            "or require approval for the outbound tools."
        )


def lethal_trifecta(labels: Mapping[str, Collection[CapabilityLabel]]) -> TrifectaReport:
    """Check a tool set (tool name → its labels) for the lethal trifecta."""

    def having(label: CapabilityLabel) -> tuple[str, ...]:
        return tuple(sorted(n for n, ls in labels.items() if label in ls))

    return TrifectaReport(
        private_data=having("private_data"),
        untrusted_content=having("untrusted_content"),
        sends_out=having("sends_out"),
    )
