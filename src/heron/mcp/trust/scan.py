"""Scanning MCP tool definitions: injected instructions and shadowing between servers.

A server's tool descriptions are untrusted input: they go straight into the model's context.
The scan looks at descriptions (and the descriptions inside input schemas) for requests for
secrets, "ignore previous instructions", instructions aimed at other tools, concealment from
the user and hidden Unicode (zero-width, bidi controls, tag characters). Shadowing is two
servers exposing the same bare tool name, confusable names, a name that equals a built-in tool,
or near-identical descriptions.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from heron.mcp.trust.pins import ToolDefinition

__all__ = [
    "Finding",
    "FindingKind",
    "Severity",
    "detect_shadowing",
    "scan_definition",
    "scan_definitions",
]

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
