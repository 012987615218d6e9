"""Capability labels of tools and the lethal trifecta.

Each tool is labelled by what it can do — read private data, ingest untrusted content, send
data out — from the operator's declaration or a heuristic over its name and description. A
tool set holding all three is the *lethal trifecta*: injected content could make the agent
leak private data.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from heron.mcp.config import CapabilityLabel, name_matches
from heron.mcp.trust.pins import ToolDefinition
from heron.tools.definition import ToolSpec

__all__ = [
    "TrifectaReport",
    "capability_labels",
    "lethal_trifecta",
    "spec_capability_labels",
]


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
