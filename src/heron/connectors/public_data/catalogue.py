"""A catalogue of perception tools by kind (search, read, parse, query), rendered as a
system-prompt section. Kinds: **search** finds candidates (paginated, with totals), **read** gets
one known item, **parse** turns a file into text, **query** asks a data service a precise
question."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal

from heron.tools.definition import Tool

__all__ = ["PERCEPTION_KINDS", "PerceptionKind", "perception_catalogue_section", "perception_kind"]

PerceptionKind = Literal["search", "read", "parse", "query"]

PERCEPTION_KINDS: Mapping[str, PerceptionKind] = {
    "weather_forecast": "query",
    "fx_rates": "query",
    "stock_quote": "query",
    "wikipedia_search": "search",
    "wikipedia_summary": "read",
    "arxiv_search": "search",
    "arxiv_download": "read",
    "web_search": "search",
    "knowledge_search": "search",
    "grep_files": "search",
    "find_files": "search",
    "fetch_url": "read",
    "download_file": "read",
    "read_file": "read",
    "list_dir": "read",
}
"""Known perception tools and their kind; other names are classified by `perception_kind`."""

_KIND_NOTES: Mapping[PerceptionKind, str] = {
    "search": "find candidates (title, location, snippet), a page at a time with a cursor and "
    "the total; then read the promising ones",
    "read": "get one known item (a page, an article, a file); long content is paged with "
    "offset/limit and truncation is always stated",
    "parse": "turn a file (PDF, Word, slides, image) into text or structure",
    "query": "ask a data service a precise question; answers carry their source and date",
}
_KIND_WORDS: tuple[tuple[PerceptionKind, tuple[str, ...]], ...] = (
    ("search", ("search", "find", "grep", "lookup")),
    ("parse", ("extract", "parse", "ocr", "analy", "document", "transcribe")),
    ("read", ("read", "fetch", "get", "summary", "download", "list", "open")),
)


def perception_kind(name: str) -> PerceptionKind:
    """The kind of a perception tool: from `PERCEPTION_KINDS`, else from words in its name."""
    if name in PERCEPTION_KINDS:
        return PERCEPTION_KINDS[name]
    lowered = name.lower()
    for kind, words in _KIND_WORDS:
        if any(word in lowered for word in words):
            return kind
    return "query"


def perception_catalogue_section(
    tools: Sequence[Tool], *, kinds: Mapping[str, PerceptionKind] | None = None
) -> str:
    """A system-prompt section listing `tools` grouped by kind (search, read, parse, query),
    each with the first sentence of its description. `kinds` overrides the classification."""
    groups: dict[PerceptionKind, list[str]] = {k: [] for k in ("search", "read", "parse", "query")}
    for item in tools:
        spec = item.spec
        kind = (kinds or {}).get(spec.name) or perception_kind(spec.name)
        first = re.split(r"(?<=\.)\s", spec.description.strip(), maxsplit=1)[0]
        groups[kind].append(f"- {spec.name}: {' '.join(first.split())}")
    if not any(groups.values()):
        return ""
    lines = [
        "## Perception tools",
        "Tools that get information, by kind. Read-only ones may run in parallel; results "
        "name their source.",
    ]
    for kind, entries in groups.items():
        if entries:
            lines += ["", f"### {kind.capitalize()} — {_KIND_NOTES[kind]}", *sorted(entries)]
    return "\n".join(lines)
