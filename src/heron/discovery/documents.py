"""What the discovery engine indexes: one `ToolDoc` per tool, grouped by server.

A `ToolDoc` is the part of a tool definition that retrieval looks at (the shape of an MCP
`tools/list` entry plus the server it came from). It knows nothing of how the tool runs, so
the engine can index MCP tools, built-in tools and skills alike.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from heron.tools.registry import NAMESPACE_SEP

__all__ = ["ToolDoc", "identifier_words"]

_PARAM_DESCRIPTION_CHARS = 80


def identifier_words(text: str) -> str:
    """`getWeatherForecast` / `get_weather-forecast` → `get Weather Forecast` (spaces only)."""
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    text = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", text)
    return re.sub(r"[_\-./:]+", " ", text).strip()


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolDoc:
    """One tool as discovery sees it."""

    server: str
    """The server (or bundle) that offers the tool; the first level of hierarchical matching."""
    name: str
    """The tool's name on its server (not namespaced)."""
    description: str = ""
    title: str | None = None
    input_schema: Mapping[str, Any] = field(default_factory=dict)

    @property
    def qualified(self) -> str:
        """The namespaced name heron exposes: `<server>__<name>`."""
        return f"{self.server}{NAMESPACE_SEP}{self.name}"

    @property
    def parameters(self) -> tuple[str, ...]:
        props = self.input_schema.get("properties")
        return tuple(props) if isinstance(props, Mapping) else ()

    def definition(self) -> dict[str, Any]:
        """The definition as a server lists it (`{name, description, inputSchema}` and title)."""
        data: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": dict(self.input_schema),
        }
        if self.title is not None:
            data["title"] = self.title
        return data

    def fingerprint(self) -> str:
        """sha256 of the canonical JSON of the definition (name, description, schema, title).

        The server name is left out: the same definition served under two names is one
        embedding.
        """
        canonical = json.dumps(
            self.definition(), sort_keys=True, ensure_ascii=False, separators=(",", ":")
        )
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def embedding_text(self) -> str:
        """The passage a dense model embeds: readable name, description, parameter names."""
        head = self.title or identifier_words(self.name)
        parts = [f"{head}: {self.description.strip()}" if self.description.strip() else head]
        params = _parameter_phrases(self.input_schema)
        if params:
            parts.append("Parameters: " + "; ".join(params))
        return "\n".join(parts)


def _parameter_phrases(schema: Mapping[str, Any]) -> list[str]:
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        return []
    phrases = []
    for key, spec in props.items():
        text = identifier_words(str(key))
        described = spec.get("description") if isinstance(spec, Mapping) else None
        if isinstance(described, str) and described.strip():
            text += f" ({described.strip()[:_PARAM_DESCRIPTION_CHARS]})"
        phrases.append(text)
    return phrases
