"""`tool_search`: find deferred MCP tools and load their schemas into the session.

Two query forms:

- `select:a,b` loads exactly the named tools (namespaced names from the catalogue);
- anything else is a natural-language search ranked by BM25 over each tool's name, server,
  title, description and parameter names.

The ranker is lexical, and tuned on a held-out split of the MetaTool queries (see
`bench/mcp_tool_search.py`). Besides word-level BM25 (name tokens weighted double, words
reduced by a light suffix stemmer) it adds

- a character n-gram BM25, for compound and misspelt names (`airqualityforecast`, `get-env`);
- request words that say nothing about the capability (`find`, `help`, `please`, `tool`) are
  dropped from the query;
- a small built-in lexicon of related words per common tool domain (weather, finance, travel,
  code, …) expands the query at a lower weight, so "chance of precipitation" finds a weather
  tool whose description only says "forecast".

A tool is a hit only when its word-level score (direct plus expanded terms) reaches
`min_score`; n-gram similarity alone never makes a hit. When nothing reaches it, the answer is
an explicit "nothing found" with close names, so the model can rephrase instead of guessing.

Matches are activated into the session's `ActivatedToolSet` in rank order (append-only: loaded
schemas stay where they were inserted) and listed with their full schemas. Policy-denied tools
are not in the catalogue, so they never appear, never activate and never use up a result slot.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from heron.mcp.catalogue import CatalogueEntry, McpAccessPolicy, McpCatalogue
from heron.tools.definition import (
    Tool,
    ToolAnnotations,
    ToolContext,
    ToolResult,
    ToolSpec,
)
from heron.tools.registry import ActivatedToolSet
from heron.tools.validation import SchemaValidator

__all__ = [
    "TOOL_SEARCH",
    "SearchHit",
    "SearchParams",
    "ToolSearchIndex",
    "ToolSearchOutcome",
    "ToolSearchTool",
    "resolve_unactivated",
    "tokenize",
]

TOOL_SEARCH = "tool_search"
DEFAULT_MAX_RESULTS = 5
MAX_RESULTS_CAP = 20
SELECT_PREFIX = "select:"


@functools.cache
def _bm25s() -> Any:
    # bm25s takes a fifth of a second to import: only when a catalogue is indexed.
    import bm25s  # type: ignore[import-untyped]

    return bm25s


@functools.cache
def _stopwords() -> frozenset[str]:
    return frozenset(_bm25s().stopwords.STOPWORDS_EN)


# Words of a request that say nothing about which capability is wanted.
def _word_set(text: str) -> frozenset[str]:
    return frozenset(text.split())


_REQUEST_WORDS = _word_set(
    """find get help give provide show tell want need like would could please know use using
    tool tools information info recommend suggest search look looking app something way best
    good new make create assist any some also me my i you can what which where how when who
    there this that it"""
)

# Related words per common tool domain (one group per line). A query word in a group adds the
# group's other words at a lower weight. General vocabulary, not names of particular tools.
_RELATED = """
weather forecast temperature rain precipitation snow wind humidity climate storm sunny
finance financial stock stocks share shares market invest investment investing investor \
portfolio trading trade crypto cryptocurrency bitcoin ethereum nft fund dividend earnings \
volatility ticker nasdaq economy
currency exchange convert conversion dollar euro yen forex
news headline headlines article articles breaking politics political journalism press
music song songs album artist band playlist lyrics chart charts billboard spotify concert singer
movie movies film films cinema actor actress cast director tv series trailer netflix
video videos youtube clip
podcast podcasts episode interview interviews audio listen
book books novel author reading literature ebook story stories
recipe recipes cook cooking meal meals food dish dishes ingredient ingredients bake baking \
kitchen dinner lunch breakfast pizza pasta cuisine
diet nutrition calorie calories healthy protein vitamin weight fitness workout exercise gym
health medical medicine doctor symptom symptoms disease clinic hospital drug drugs treatment \
therapy mental
travel trip trips vacation holiday tour tourist itinerary destination flight flights airline \
hotel hotels accommodation booking resort sightseeing
restaurant restaurants dining eat cafe reservation review reviews
house home apartment rent renting lease property properties estate mortgage housing realtor
job jobs career careers hiring hire resume cv salary employment recruit recruiter vacancy openings
course courses class classes lesson lessons learn learning teach teacher tutor student students \
school university education training curriculum
research paper papers academic scholar scientific study studies journal citation publication arxiv
law legal lawyer attorney court contract regulation statute lawsuit divorce
shop shopping buy purchase product products deal deals discount coupon store order cheapest \
affordable sale
code coding programming developer software github repository repo api bug debug script python \
javascript
sql database query table analytics
seo keyword keywords ranking visibility traffic marketing
website web site page domain url hosting blog wordpress
image images picture pictures photo photos art drawing draw design illustration graphic logo
translate translation language languages english spanish french chinese japanese
email mail inbox message messages letter outreach
calendar schedule meeting meetings event events appointment reminder
map maps location locations address directions route navigation nearby place places
car cars vehicle vehicles ev electric charging dealer automobile
sport sports team teams score scores match league nba nfl mlb nhl soccer football basketball \
baseball
game games gaming puzzle trivia quiz
pdf document documents file files summarize summary
qr barcode
astrology horoscope zodiac fortune tarot
math calculate calculator calculation equation formula compute arithmetic
gift gifts present birthday anniversary
pet pets dog dogs cat cats animal animals
plant plants garden gardening flower flowers
company companies business businesses startup startups corporate enterprise firm
social media twitter instagram facebook tiktok followers
habit habits routine productivity goal goals meditation mindfulness
"""

_SUFFIXES = (
    ("ies", "y"),
    ("sses", "ss"),
    ("ied", "y"),
    ("ing", ""),
    ("edly", ""),
    ("ed", ""),
    ("ly", ""),
    ("es", ""),
    ("s", ""),
)


def _stem(word: str) -> str:
    """A light suffix stemmer: plural and verb endings only, stems of at least 3 letters."""
    for suffix, replacement in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + replacement
    return word


def _split_identifiers(text: str) -> str:
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    return re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", text)


def _words(text: str) -> list[str]:
    return [
        w
        for w in re.findall(r"[a-z0-9]+", _split_identifiers(text).lower())
        if len(w) >= 2 and w not in _stopwords()
    ]


def tokenize(text: str) -> list[str]:
    """Index tokens: identifiers split (`getWeather` → get, weather), lower-cased, stop words
    dropped, lightly stemmed."""
    return [_stem(w) for w in _words(text)]


def _ngrams(words: Sequence[str], low: int = 3, high: int = 5) -> list[str]:
    grams: list[str] = []
    for word in words:
        padded = f"#{word}#"
        for n in range(low, high + 1):
            grams.extend(padded[i : i + n] for i in range(len(padded) - n + 1))
    return grams


def _related_index() -> dict[str, tuple[str, ...]]:
    related: dict[str, set[str]] = {}
    for line in _RELATED.replace("\\\n", " ").strip().splitlines():
        group = [_stem(w) for w in line.split()]
        for word in group:
            related.setdefault(word, set()).update(w for w in group if w != word)
    return {w: tuple(sorted(ws)) for w, ws in related.items()}


_RELATED_INDEX = _related_index()
_REQUEST_STEMS = frozenset(_stem(w) for w in _REQUEST_WORDS)


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchParams:
    """Ranking knobs (defaults tuned on the MetaTool tune split)."""

    k1: float = 2.0
    b: float = 0.3
    name_weight: int = 2
    """How many times the name's tokens count (names carry the most signal)."""
    ngram_weight: float = 0.43
    expansion_weight: float = 1.0
    drop_request_words: bool = True
    """Drop words that only make a request (`find`, `help`, `please`) from the query."""
    min_score: float = 1.0
    """Word-level BM25 score (direct + weighted expansion) a tool needs to count as a hit."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchHit:
    entry: CatalogueEntry
    score: float
    """Combined rank score (relative; comparable within one query)."""
    relevance: float
    """Word-level BM25 score, the quantity compared with `min_score`."""


_FloatArray = npt.NDArray[np.float64]


TUNED_CATALOGUE_SIZE = 200
"""Word scores of smaller catalogues are computed as if the catalogue were padded to this size
(about that of the MetaTool catalogue `min_score` was tuned on) with tools that match nothing.

BM25's IDF depends on the catalogue's size: a word found in one tool out of N weighs
log(1 + (N - 0.5) / 1.5), 0.29 for N = 1 and 0.98 for N = 3 against 4.9 for N = 200. Without the
padding, even an exact word of a tool's name scored under `min_score` in a catalogue of one to
three tools (and a word of its description in one of a few dozen), so the answer was "nothing
found". With it a word weighs what it would in the catalogue the threshold was tuned on."""


class _Bm25:
    """A bm25s index over pre-tokenised documents, queried with token lists."""

    def __init__(self, docs: Sequence[list[str]], *, k1: float, b: float, pad_to: int = 0) -> None:
        self._n = len(docs)
        self._model = _bm25s().BM25(k1=k1, b=b)
        # bm25s needs at least one token per document to build its vocabulary.
        indexed = [d or ["\x00"] for d in docs]
        if 0 < len(indexed) < pad_to:
            # Padding of the average length (so length normalisation is unchanged), holding only
            # a token no query can contain.
            length = max(1, round(sum(map(len, indexed)) / len(indexed)))
            indexed += [["\x01"] * length] * (pad_to - len(indexed))
        self._model.index(indexed, show_progress=False)
        self._vocab: dict[str, int] = self._model.vocab_dict

    def scores(self, tokens: Sequence[str]) -> _FloatArray:
        ids = [self._vocab[t] for t in tokens if t in self._vocab]
        if not ids:
            return np.zeros(self._n)
        return np.asarray(self._model.get_scores(ids), dtype=np.float64)[: self._n]


def _normalised(scores: _FloatArray) -> _FloatArray:
    top = float(scores.max()) if scores.size else 0.0
    return scores / top if top > 0 else scores


class ToolSearchIndex:
    """The ranking index over a catalogue's entries (built once per catalogue)."""

    def __init__(self, entries: Sequence[CatalogueEntry], params: SearchParams | None = None):
        self.params = params or SearchParams()
        self._entries = tuple(entries)
        self._names = [e.name for e in self._entries]
        if not self._entries:
            self._words: _Bm25 | None = None
            self._grams: _Bm25 | None = None
            return
        p = self.params
        word_docs = []
        gram_docs = []
        for e in self._entries:
            name_words = _words(f"{e.tool_name} {e.title}")
            body = " ".join((e.server, e.description, " ".join(e.parameters)))
            word_docs.append([_stem(w) for w in name_words] * p.name_weight + tokenize(body))
            gram_docs.append(_ngrams(name_words) * 2 + _ngrams(_words(body)))
        self._words = _Bm25(word_docs, k1=p.k1, b=p.b, pad_to=TUNED_CATALOGUE_SIZE)
        self._grams = _Bm25(gram_docs, k1=1.2, b=0.75)

    def __len__(self) -> int:
        return len(self._entries)

    def search(self, query: str, limit: int | None = None) -> list[SearchHit]:
        """Hits for a natural-language query, best first (ties in catalogue order)."""
        if self._words is None or self._grams is None:
            return []
        p = self.params
        raw = _words(query)
        content = raw
        if p.drop_request_words:
            content = [w for w in raw if _stem(w) not in _REQUEST_STEMS] or raw
        terms = [_stem(w) for w in content]
        direct = self._words.scores(terms)
        expanded_terms = (
            [r for t in terms for r in _RELATED_INDEX.get(t, ()) if r not in terms]
            if p.expansion_weight
            else []
        )
        expanded = self._words.scores(expanded_terms) if expanded_terms else np.zeros(len(direct))
        grams = self._grams.scores(_ngrams(content)) if p.ngram_weight else np.zeros(len(direct))
        relevance = direct + p.expansion_weight * expanded
        score = (
            _normalised(direct)
            + p.expansion_weight * _normalised(expanded)
            + p.ngram_weight * _normalised(grams)
        )
        candidates = np.flatnonzero(relevance >= max(p.min_score, 1e-9))
        order = candidates[np.lexsort((candidates, -score[candidates]))]
        if limit is not None:
            order = order[:limit]
        return [
            SearchHit(entry=self._entries[i], score=float(score[i]), relevance=float(relevance[i]))
            for i in order
        ]

    def suggest(self, query: str, count: int = 3) -> list[str]:
        """Catalogue names close to the query's words (for "nothing found" answers)."""
        by_key: dict[str, str] = {}
        for e in self._entries:
            by_key.setdefault(e.tool_name.lower(), e.name)
            by_key.setdefault(e.name.lower(), e.name)
        found: list[str] = []
        probes = [query.strip().lower(), *(w for w in _words(query) if len(w) >= 3)]
        for probe in probes:
            for key in difflib.get_close_matches(probe, list(by_key), n=count, cutoff=0.6):
                if by_key[key] not in found:
                    found.append(by_key[key])
        return found[:count]


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolSearchOutcome:
    """What one `tool_search` call did."""

    listed: tuple[Tool, ...] = ()
    """Tools whose schemas the answer lists (rank order)."""
    activated: tuple[str, ...] = ()
    """Names newly activated by this call."""
    not_found: tuple[str, ...] = ()
    """`select:` names that are not in the catalogue (or are denied)."""
    suggestions: tuple[str, ...] = ()
    nothing_found: bool = False


def _schema_line(spec: ToolSpec) -> str:
    return json.dumps(
        {"name": spec.name, "description": spec.description, "parameters": spec.parameters},
        ensure_ascii=False,
    )


_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": (
                'What you need, in plain words ("convert a timestamp between time zones"), or '
                '"select:" followed by exact tool names separated by commas '
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
    "required": ["query"],
    "additionalProperties": False,
}


class ToolSearchTool:
    """The `tool_search` tool over one session's catalogue and activated set."""

    def __init__(
        self,
        catalogue: McpCatalogue,
        activated: ActivatedToolSet,
        *,
        params: SearchParams | None = None,
        on_activate: Callable[[list[Tool]], None] | None = None,
    ) -> None:
        self.catalogue = catalogue
        self.activated = activated
        self.index = ToolSearchIndex(catalogue.entries, params)
        self._on_activate = on_activate
        self._validator = SchemaValidator(TOOL_SEARCH, _SCHEMA)
        self._spec = ToolSpec(
            name=TOOL_SEARCH,
            description=(
                "Load the full schemas of MCP tools listed in the MCP tool catalogue so you can "
                "call them. Use it when the catalogue has a tool for what you need: pass "
                '"select:name1,name2" with exact catalogue names, or describe the capability in '
                "plain words to search. Loaded tools are callable from your next step and stay "
                "loaded for the session. When nothing matches it says so and suggests close "
                "names; then rephrase, or do the work with the tools you have."
            ),
            parameters=_SCHEMA,
            annotations=ToolAnnotations(read_only=True, idempotent=True),
            owner="builtin",
        )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return self._validator.validate(arguments)

    def _activate(self, tools: Sequence[Tool]) -> tuple[str, ...]:
        new = [t for t in tools if self.activated.activate(t)]
        if new and self._on_activate is not None:
            self._on_activate(new)
        return tuple(t.spec.name for t in new)

    def search(self, query: str, max_results: int = DEFAULT_MAX_RESULTS) -> ToolSearchOutcome:
        """Run one query (select or search), activating what it finds."""
        text = query.strip()
        if text.startswith(SELECT_PREFIX):
            names = [n.strip() for n in text[len(SELECT_PREFIX) :].split(",") if n.strip()]
            found: list[Tool] = []
            missing: list[str] = []
            for name in dict.fromkeys(names):
                tool = self.catalogue.get(name)
                if tool is None:
                    missing.append(name)
                else:
                    found.append(tool)
            suggestions = tuple(dict.fromkeys(s for m in missing for s in self.index.suggest(m, 2)))
            return ToolSearchOutcome(
                listed=tuple(found),
                activated=self._activate(found),
                not_found=tuple(missing),
                suggestions=suggestions,
                nothing_found=not found,
            )
        hits = self.index.search(text, max_results)
        if not hits:
            return ToolSearchOutcome(
                nothing_found=True, suggestions=tuple(self.index.suggest(text))
            )
        tools = [h.entry.tool for h in hits]
        return ToolSearchOutcome(listed=tuple(tools), activated=self._activate(tools))

    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        query = str(arguments["query"]).strip()
        if not query or query == SELECT_PREFIX:
            return ToolResult.fail(
                'query is empty: describe the capability you need, or pass "select:" with '
                "exact tool names"
            )
        outcome = self.search(query, int(arguments.get("max_results", DEFAULT_MAX_RESULTS)))
        return ToolResult.ok(_render(query, outcome), data=_data(outcome))


def _render(query: str, outcome: ToolSearchOutcome) -> str:
    lines: list[str] = []
    if outcome.listed:
        new = set(outcome.activated)
        lines.append(
            f"Loaded {len(outcome.listed)} tool(s); call them from your next step on "
            f"({len(new)} newly loaded):"
        )
        lines.extend(_schema_line(t.spec) for t in outcome.listed)
    elif outcome.nothing_found and not outcome.not_found:
        lines.append(
            f"Nothing found for {query!r}: no MCP tool in the catalogue matches well enough. "
            "Rephrase with other words, select an exact name from the catalogue, or do it "
            "with the tools you already have."
        )
    if outcome.not_found:
        lines.append("Not found: " + ", ".join(outcome.not_found))
    if outcome.suggestions:
        lines.append("Close names: " + ", ".join(outcome.suggestions))
    return "\n".join(lines)


def _data(outcome: ToolSearchOutcome) -> dict[str, Any]:
    return {
        "listed": [t.spec.name for t in outcome.listed],
        "activated": list(outcome.activated),
        "not_found": list(outcome.not_found),
        "suggestions": list(outcome.suggestions),
        "nothing_found": outcome.nothing_found,
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
