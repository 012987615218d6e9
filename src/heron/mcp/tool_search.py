"""`tool_search` and `discover_tools`: one search tool over the deferred catalogue, offered under
one name or the other per agent (`[discovery] tool`), never both.

Two query forms:

- `select:a,b` loads exactly the named tools (names from the catalogue);
- anything else is a need in plain words ("I need to look up stock prices"), ranked by the
  discovery engine (`heron.discovery`: lexical BM25 fused with multilingual embeddings when
  `heron[embeddings]` is installed, exact names first, an honest "nothing close").

The best 3–5 matches are activated into the session's `ActivatedToolSet` (append-only: loaded
schemas stay where they were inserted) and listed with their full schemas, followed by any
skills that fit the need and a one-line status of every tool loaded so far. When nothing is
close the answer says so, lists the server directory and close names, and loads nothing.

`DiscoveryEngine` holds the one ranking index over a catalogue (and the skills), built on first
use in a worker thread (the embedding model and the index cost tens of milliseconds to seconds;
the event loop never waits for them), and shared by the search tools of an agent and of its
sub-agents. A sub-agent's search sees only its grant: the index answers over the granted
tools alone, exact names included. Policy-denied tools are not in the catalogue, so they never
appear, never activate and never use up a result slot.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import difflib
import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from heron.discovery import (
    DiscoveryIndex,
    DiscoveryParams,
    Embedder,
    EmbeddingCache,
    Match,
    ServerSummary,
    ToolDoc,
    UsageRecord,
    UsageTable,
    default_cache_path,
    usage_table,
)
from heron.discovery.index import BoolArray, Mode
from heron.discovery.lexical import tokenize
from heron.mcp.catalogue import CatalogueEntry, McpAccessPolicy, McpCatalogue, loaded_status_line
from heron.tools.definition import Tool, ToolAnnotations, ToolContext, ToolResult, ToolSpec
from heron.tools.registry import ActivatedToolSet
from heron.tools.validation import SchemaValidator

__all__ = [
    "DEFAULT_MAX_RESULTS",
    "DISCOVER_TOOLS",
    "SEARCH_TOOL_NAMES",
    "TOOL_SEARCH",
    "Companion",
    "DiscoveryEngine",
    "Ranked",
    "SearchToolName",
    "ToolSearchOutcome",
    "ToolSearchTool",
    "resolve_unactivated",
]

TOOL_SEARCH: Final = "tool_search"
DISCOVER_TOOLS: Final = "discover_tools"
SearchToolName = Literal["tool_search", "discover_tools"]
SEARCH_TOOL_NAMES: tuple[SearchToolName, ...] = (TOOL_SEARCH, DISCOVER_TOOLS)
DEFAULT_MAX_RESULTS = 5
MAX_RESULTS_CAP = 20
SELECT_PREFIX = "select:"
COMPANION_SERVER = "(skills)"
"""The server of companion documents in the shared index (no MCP server can have this name)."""
MAX_COMPANIONS = 3
DIRECTORY_LINES = 12

_log = logging.getLogger("heron.mcp.tool_search")


@dataclass(frozen=True, kw_only=True, slots=True)
class Companion:
    """Something besides tools that a search also finds (a skill), and how to use it."""

    name: str
    description: str
    hint: str = ""
    """How the model uses it, for the answer's heading (`load_skill` reads one)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Ranked:
    """One search's answer from the engine, before anything is activated."""

    tools: tuple[CatalogueEntry, ...] = ()
    skills: tuple[Companion, ...] = ()
    directory: tuple[ServerSummary, ...] = ()
    mode: Mode = "lexical"
    matches: tuple[Match, ...] = ()
    """The engine's matches behind `tools` (scores, exact flags)."""


def _doc(entry: CatalogueEntry) -> ToolDoc:
    return ToolDoc(
        server=entry.server,
        name=entry.tool_name,
        description=entry.description,
        title=entry.title or None,
        input_schema=entry.tool.spec.parameters,
    )


def _default_cache() -> EmbeddingCache | None:
    try:
        return EmbeddingCache(default_cache_path())
    except (OSError, ValueError):  # an unwritable cache directory: embed without a cache
        return None


class DiscoveryEngine:
    """The ranking index over a catalogue's tools and companions (skills), built once on first
    use and shared by every search tool over the catalogue (an agent's and its sub-agents').

    `embedder`: "auto" (the bundled model when `heron[embeddings]` is installed and not
    switched off), an `Embedder`, or None for lexical ranking. `cache`: "default" (the user
    cache file, `heron.discovery.default_cache_path()`), an `EmbeddingCache`, or None.
    """

    def __init__(
        self,
        entries: Sequence[CatalogueEntry],
        *,
        companions: Sequence[Companion] = (),
        embedder: Embedder | Literal["auto"] | None = "auto",
        cache: EmbeddingCache | Literal["default"] | None = "default",
        params: DiscoveryParams | None = None,
        server_descriptions: Mapping[str, str] | None = None,
        usage: Callable[[], Sequence[UsageRecord]] | None = None,
    ) -> None:
        self.entries = tuple(entries)
        self._usage = usage
        self.companions = tuple(companions)
        self.params = params or DiscoveryParams()
        self._embedder = embedder
        self._cache = cache
        self._descriptions = dict(server_descriptions or {})
        self._index: DiscoveryIndex | None = None
        self._lock = threading.Lock()
        self._masks: dict[frozenset[str] | None, tuple[BoolArray, BoolArray]] = {}
        self._position: dict[int, int] = {}

    @property
    def built(self) -> bool:
        return self._index is not None

    def index(self) -> DiscoveryIndex:
        """The index, built on the first call (blocking: call it from a worker thread)."""
        with self._lock:
            if self._index is None:
                docs = [_doc(e) for e in self.entries] + [
                    ToolDoc(server=COMPANION_SERVER, name=c.name, description=c.description)
                    for c in self.companions
                ]
                cache = _default_cache() if self._cache == "default" else self._cache
                self._index = DiscoveryIndex(
                    docs,
                    embedder=self._embedder,
                    cache=cache if isinstance(cache, EmbeddingCache) else None,
                    params=self.params,
                    server_descriptions=self._descriptions,
                )
                n = len(self.entries)
                self._position = {id(d): i for i, d in enumerate(self._index.docs[:n])}
                if self._usage is not None:
                    self._index.prior = self._prior(self._index, cache)
            return self._index

    def _prior(self, index: DiscoveryIndex, cache: object) -> UsageTable | None:
        """The usage prior over the recorded history, its tools under the index's names."""
        assert self._usage is not None
        try:
            history = self._usage()
        except Exception as exc:  # a damaged or locked state database: rank without a prior
            _log.warning("discovery: the usage history cannot be read: %s", exc)
            return None
        qualified = {e.name: d.qualified for e, d in zip(self.entries, index.docs, strict=False)}
        records = [
            dataclasses.replace(r, tool=qualified[r.tool]) for r in history if r.tool in qualified
        ]
        if not records:
            return None
        return usage_table(
            records,
            embedder=index.embedder,
            cache=cache if isinstance(cache, EmbeddingCache) else None,
        )

    async def ready(self) -> DiscoveryIndex:
        """The index, built in a worker thread when it does not exist yet."""
        if self._index is not None:
            return self._index
        return await asyncio.to_thread(self.index)

    def _masks_for(self, granted: frozenset[str] | None) -> tuple[BoolArray, BoolArray]:
        """(tools the grant may find, companions): one flag per document of the index."""
        masks = self._masks.get(granted)
        if masks is None:
            index = self.index()
            n = len(self.entries)
            names = [e.name for e in self.entries]
            tools = index.mask(lambda _: False)
            for i, name in enumerate(names):
                tools[i] = granted is None or name in granted
            companions = index.mask(lambda _: False)
            companions[n:] = True
            masks = self._masks[granted] = (tools, companions)
        return masks

    def rank(self, need: str, limit: int, *, granted: frozenset[str] | None = None) -> Ranked:
        """The best `limit` tools of the grant (all tools when `granted` is None) and the
        companions that fit `need` (blocking: the query's embedding is CPU work)."""
        index = self.index()
        tools_mask, companions_mask = self._masks_for(granted)
        vector = index.embed_query(need)
        found = index.search(need, limit, query_vector=vector, allowed=tools_mask)
        skills: tuple[Companion, ...] = ()
        if self.companions:
            extra = index.search(need, MAX_COMPANIONS, query_vector=vector, allowed=companions_mask)
            by_name = {c.name: c for c in self.companions}
            skills = tuple(by_name[m.doc.name] for m in extra.matches if m.doc.name in by_name)
        positions = self._position
        matches = tuple(m for m in found.matches if id(m.doc) in positions)
        return Ranked(
            tools=tuple(self.entries[positions[id(m.doc)]] for m in matches),
            skills=skills,
            directory=found.directory,
            mode=index.mode,
            matches=matches,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolSearchOutcome:
    """What one search-tool call did."""

    listed: tuple[Tool, ...] = ()
    """Tools whose schemas the answer lists (rank order)."""
    activated: tuple[str, ...] = ()
    """Names newly activated by this call."""
    not_found: tuple[str, ...] = ()
    """`select:` names that are not in the catalogue (or are denied)."""
    suggestions: tuple[str, ...] = ()
    nothing_found: bool = False
    skills: tuple[Companion, ...] = ()
    directory: tuple[ServerSummary, ...] = ()
    """The server directory, when nothing was close."""
    mode: Mode | None = None
    """How the search ranked (`hybrid` or `lexical`); None for `select:`."""


def _schema_line(spec: ToolSpec) -> str:
    return json.dumps(
        {"name": spec.name, "description": spec.description, "parameters": spec.parameters},
        ensure_ascii=False,
    )


def _schema(argument: str, example: str) -> Mapping[str, Any]:
    return {
        "type": "object",
        "properties": {
            argument: {
                "type": "string",
                "description": (
                    f'What you need, in plain words ("{example}"), or "select:" followed by '
                    "exact tool names separated by commas "
                    '("select:time__convert_time,files__read_file").'
                ),
            },
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_RESULTS_CAP,
                "description": f"How many tools a search may load (default {DEFAULT_MAX_RESULTS}).",
            },
        },
        "required": [argument],
        "additionalProperties": False,
    }


_DESCRIPTIONS: Mapping[SearchToolName, str] = {
    TOOL_SEARCH: (
        "Load the full schemas of tools listed in the tool catalogue of your instructions so you "
        'can call them. Pass "select:name1,name2" with exact catalogue names, or describe the '
        "capability in plain words to search. The best matches are loaded, callable from your "
        "next step and for the rest of the session; skills that fit are named too. When "
        "nothing is close it says so and lists the tool servers; then rephrase, or do the work "
        "with the tools you have."
    ),
    DISCOVER_TOOLS: (
        "Find and load tools for a capability you do not have. When a task needs something none "
        'of your tools can do, describe the need in plain words ("I need to look up stock '
        'prices", "convert currencies"): you get the 3-5 best matching tools with their full '
        "schemas, loaded and callable from your next step for the rest of the session, plus "
        'skills that fit. "select:name1,name2" loads exact names. When nothing is close it says '
        "so and lists what exists; then rephrase, or do the work with the tools you have."
    ),
}
_ARGUMENTS: Mapping[SearchToolName, tuple[str, str]] = {
    TOOL_SEARCH: ("query", "convert a timestamp between time zones"),
    DISCOVER_TOOLS: ("need", "I need to look up stock prices"),
}


class ToolSearchTool:
    """The search tool (`tool_search` or `discover_tools`) over one session's catalogue and
    activated set.

    `engine` is shared with the other search tools over the same catalogue (a sub-agent's);
    without one, the tool builds its own over `catalogue` with `params`. The tool searches only
    `catalogue` (a narrowed catalogue is a grant).
    """

    def __init__(
        self,
        catalogue: McpCatalogue,
        activated: ActivatedToolSet,
        *,
        name: SearchToolName = TOOL_SEARCH,
        engine: DiscoveryEngine | None = None,
        params: DiscoveryParams | None = None,
        on_activate: Callable[[list[Tool]], None] | None = None,
    ) -> None:
        if name not in SEARCH_TOOL_NAMES:
            raise ValueError(
                f"a search tool is named {' or '.join(SEARCH_TOOL_NAMES)}, not {name!r}"
            )
        self.name: SearchToolName = name
        self.catalogue = catalogue
        self.activated = activated
        self.engine = engine or DiscoveryEngine(catalogue.entries, params=params)
        engine_names = {e.name for e in self.engine.entries}
        names = frozenset(catalogue.names())
        self._granted: frozenset[str] | None = None if names >= engine_names else names
        self._on_activate = on_activate
        self._argument = _ARGUMENTS[name][0]
        schema = _schema(*_ARGUMENTS[name])
        self._validator = SchemaValidator(name, schema)
        self._spec = ToolSpec(
            name=name,
            description=_DESCRIPTIONS[name],
            parameters=schema,
            annotations=ToolAnnotations(read_only=True, idempotent=True),
            owner="builtin",
        )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def over(self, activated: ActivatedToolSet) -> ToolSearchTool:
        """This search tool (catalogue, engine, schema, validator) loading into another
        session's activated set."""
        twin = copy.copy(self)
        twin.activated = activated
        return twin

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return self._validator.validate(arguments)

    def _activate(self, tools: Sequence[Tool]) -> tuple[str, ...]:
        new = [t for t in tools if self.activated.activate(t)]
        if new and self._on_activate is not None:
            self._on_activate(new)
        return tuple(t.spec.name for t in new)

    def _select(self, text: str) -> ToolSearchOutcome:
        names = [n.strip() for n in text[len(SELECT_PREFIX) :].split(",") if n.strip()]
        found: list[Tool] = []
        missing: list[str] = []
        for name in dict.fromkeys(names):
            tool = self.catalogue.get(name)
            if tool is None:
                missing.append(name)
            else:
                found.append(tool)
        suggestions = tuple(dict.fromkeys(s for m in missing for s in self.suggest(m, 2)))
        return ToolSearchOutcome(
            listed=tuple(found),
            activated=self._activate(found),
            not_found=tuple(missing),
            suggestions=suggestions,
            nothing_found=not found,
        )

    def rank(self, need: str, max_results: int = DEFAULT_MAX_RESULTS) -> Ranked:
        """The engine's answer for `need` within this tool's catalogue (blocking)."""
        return self.engine.rank(need, max_results, granted=self._granted)

    def take(self, need: str, ranked: Ranked) -> ToolSearchOutcome:
        """Activate what `rank` found (on the event loop, where the session's set lives)."""
        # Through this tool's own catalogue: a grant's tools are its own (wrapped) objects, and
        # nothing outside it can be activated whatever the shared engine ranked.
        tools = [t for e in ranked.tools if (t := self.catalogue.get(e.name)) is not None]
        if not tools:
            return ToolSearchOutcome(
                nothing_found=True,
                suggestions=tuple(self.suggest(need)),
                skills=ranked.skills,
                directory=ranked.directory,
                mode=ranked.mode,
            )
        return ToolSearchOutcome(
            listed=tuple(tools),
            activated=self._activate(tools),
            skills=ranked.skills,
            mode=ranked.mode,
        )

    def search(self, query: str, max_results: int = DEFAULT_MAX_RESULTS) -> ToolSearchOutcome:
        """Run one query (select or search) synchronously, activating what it finds."""
        text = query.strip()
        if text.startswith(SELECT_PREFIX):
            return self._select(text)
        return self.take(text, self.rank(text, max_results))

    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        query = str(arguments[self._argument]).strip()
        if not query or query == SELECT_PREFIX:
            return ToolResult.fail(
                f"{self._argument} is empty: describe the capability you need, or pass "
                '"select:" with exact tool names'
            )
        limit = int(arguments.get("max_results", DEFAULT_MAX_RESULTS))
        if query.startswith(SELECT_PREFIX):
            outcome = self._select(query)
        else:
            # The query's embedding (and, once, the index) is CPU work: off the event loop.
            ranked = await asyncio.to_thread(self.rank, query, limit)
            outcome = self.take(query, ranked)
        listed = tuple(t.spec.name for t in outcome.listed)
        return ToolResult.ok(
            self._render(query, outcome),
            data=_data(outcome, self.activated),
            loaded_tools=listed,
            keep_in_context=bool(listed),
        )

    def suggest(self, query: str, count: int = 3) -> list[str]:
        """Catalogue names close to the query's words (for "nothing found" answers)."""
        by_key: dict[str, str] = {}
        for e in self.catalogue.entries:
            by_key.setdefault(e.tool_name.lower(), e.name)
            by_key.setdefault(e.name.lower(), e.name)
        found: list[str] = []
        probes = [query.strip().lower(), *(w for w in tokenize(query) if len(w) >= 3)]
        for probe in probes:
            for key in difflib.get_close_matches(probe, list(by_key), n=count, cutoff=0.6):
                if by_key[key] not in found:
                    found.append(by_key[key])
        return found[:count]

    def _render(self, query: str, outcome: ToolSearchOutcome) -> str:
        lines: list[str] = []
        if outcome.listed:
            lines.append(
                f"Loaded {len(outcome.listed)} tool(s); call them from your next step on "
                f"({len(outcome.activated)} newly loaded):"
            )
            lines.extend(_schema_line(t.spec) for t in outcome.listed)
        elif outcome.nothing_found and not outcome.not_found:
            size = len(self.catalogue)
            lines.append(
                f"Nothing found for {query!r}: no tool among the {size} of the catalogue is "
                "close enough. Rephrase with other words, select an exact name, or do it with "
                "the tools you already have."
            )
            if outcome.directory:
                lines.append("The tool servers:")
                shown = outcome.directory[:DIRECTORY_LINES]
                lines.extend(
                    f"- {s.server} ({s.tools} tool{'' if s.tools == 1 else 's'}): {s.summary}"
                    for s in shown
                )
                if len(outcome.directory) > len(shown):
                    lines.append(f"- … and {len(outcome.directory) - len(shown)} more servers")
        if outcome.not_found:
            lines.append("Not found: " + ", ".join(outcome.not_found))
        if outcome.suggestions:
            lines.append("Close names: " + ", ".join(outcome.suggestions))
        if outcome.skills:
            hint = outcome.skills[0].hint
            lines.append("Skills that may help" + (f" ({hint}):" if hint else ":"))
            lines.extend(f"- {s.name}: {s.description}" for s in outcome.skills)
        lines.append(loaded_status_line(self.activated, "tools so far"))
        return "\n".join(lines)


def _data(outcome: ToolSearchOutcome, activated: ActivatedToolSet) -> dict[str, Any]:
    return {
        "listed": [t.spec.name for t in outcome.listed],
        "activated": list(outcome.activated),
        "not_found": list(outcome.not_found),
        "suggestions": list(outcome.suggestions),
        "nothing_found": outcome.nothing_found,
        "skills": [s.name for s in outcome.skills],
        "loaded": activated.names(),
    }


def resolve_unactivated(
    name: str,
    catalogue: McpCatalogue,
    activated: ActivatedToolSet,
    *,
    policy: McpAccessPolicy | None = None,
    activate: bool = True,
) -> Tool | None:
    """The "never unreachable" rule: a tool the model calls by its exact catalogue name
    without loading it first.

    Returns the tool when the catalogue has exactly this name and `policy` (e.g. a per-run
    narrowing) allows it; with `activate` it is also added to the activated set so its schema
    is sent from the next request on. Returns None otherwise (the engine then reports an
    unknown tool). Bare suffixes are not resolved here: the catalogue is not loaded context.
    """
    tool = catalogue.get(name)
    if tool is None:
        return None
    if policy is not None and not policy.allows(tool.spec):
        return None
    if activate:
        activated.activate(tool)
    return tool
