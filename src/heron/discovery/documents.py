"""What the discovery engine indexes: one `ToolDoc` per tool, grouped by server.

A `ToolDoc` is the part of a tool definition that retrieval looks at (the shape of an MCP
`tools/list` entry plus the server it came from). It knows nothing of how the tool runs, so
the engine can index MCP tools, built-in tools and skills alike.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from heron.tools.registry import NAMESPACE_SEP

__all__ = ["DenseView", "ToolDoc", "identifier_words", "split_compound"]

DenseView = Literal["full", "description", "name"]
"""A text a dense model embeds for one tool: `full` (readable name, description, parameters),
the `description` alone, or the readable `name` alone."""

_PARAM_DESCRIPTION_CHARS = 80
_COMPOUND_MIN = 6
"""Shorter run-together words stay whole (`qrgen`, `webui`: too easy to mis-split)."""
_COMPOUND_MAX = 48
"""So do longer ones: a name from a server is hostile input, and the split is quadratic."""
_PIECE_MIN = 3


def identifier_words(text: str) -> str:
    """`getWeatherForecast` / `get_weather-forecast` → `get Weather Forecast` (spaces only)."""
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    text = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", text)
    return re.sub(r"[_\-./:]+", " ", text).strip()


def split_compound(word: str, vocabulary: Collection[str]) -> list[str]:
    """`keywordexplorer` → `[keyword, explorer]` when it is wholly made of words of
    `vocabulary` (lower-case, at least 3 letters each; the fewest pieces win); else `[word]`.

    A word shorter than 6 letters or longer than 48 stays whole; the word itself is not one of
    its pieces (the tool's own text often repeats its name)."""
    low = word.lower()
    if not _COMPOUND_MIN <= len(low) <= _COMPOUND_MAX or not low.isalpha():
        return [word]
    # best[i]: the fewest vocabulary words that make up low[:i].
    best: list[list[str] | None] = [[], *([None] * len(low))]
    for end in range(_PIECE_MIN, len(low) + 1):
        for start in range(end - _PIECE_MIN + 1):
            head, piece, known = best[start], low[start:end], best[end]
            if head is None or piece == low or piece not in vocabulary:
                continue
            if known is None or len(head) + 1 < len(known):
                best[end] = [*head, piece]
    pieces = best[-1]
    return pieces if pieces is not None and len(pieces) > 1 else [word]


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

    @property
    def name_words(self) -> str:
        """The name as words: the identifier split (`get_weather`, `getWeather` → get weather)
        and run-together words split on the words of the tool's own description and parameters
        (`keywordexplorer`, "Keyword Explorer finds…" → keyword explorer)."""
        words = identifier_words(self.name).split()
        if not any(_COMPOUND_MIN <= len(w) <= _COMPOUND_MAX and w.isalpha() for w in words):
            return " ".join(words)
        vocabulary = self._own_words()
        return " ".join(piece for w in words for piece in split_compound(w, vocabulary))

    @property
    def readable_name(self) -> str:
        """The title, else `name_words`: how the dense views name the tool."""
        return self.title or self.name_words

    def _own_words(self) -> frozenset[str]:
        texts = [self.description]
        props = self.input_schema.get("properties")
        if isinstance(props, Mapping):
            for key, spec in props.items():
                texts.append(identifier_words(str(key)))
                described = spec.get("description") if isinstance(spec, Mapping) else None
                if isinstance(described, str):
                    texts.append(described)
        low = " ".join(texts).lower()
        return frozenset(w for w in re.findall(r"[a-z]+", low) if len(w) >= _PIECE_MIN)

    def view_text(self, view: DenseView) -> str:
        """The text of one dense view of the tool (see `DenseView`)."""
        name = self.readable_name
        if view == "name":
            return name
        if view == "description":
            return self.description.strip() or name
        return self.embedding_text()

    def embedding_text(self) -> str:
        """The passage a dense model embeds: readable name, description, parameter names."""
        head = self.readable_name
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
