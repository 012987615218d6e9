"""`DiscoveryIndex`: ranked tool matches for a need stated in plain words.

One query runs these steps (each knob chosen on the MetaTool tune split, docs/discovery.md):

1. **exact names win**: a query that is a tool's name (bare or `server__tool`), or contains a
   qualified name, puts that tool first whatever the rankers say;
2. **lexical** BM25 over words and n-grams (`lexical.py`) and, when the embeddings extra is
   there, **dense** cosine between the query's and each tool's embedding;
3. **fusion** of the two (`fusion.py`), or the lexical score alone in lexical mode;
4. **hierarchical** matching (optional): servers ranked first, by their summary's embedding
   and their best tools, then tools within the best servers (as MCP-Zero does);
5. the **usage prior** (`prior.py`) adds a bounded boost for tools that worked for similar
   requests;
6. **nothing close**: the query passes when its best tool's dense cosine beats the query's
   cosine with contentless descriptions by a margin, or its best lexical relevance reaches a
   threshold; then the best-ranked tools are returned (minus those far below the margin that
   share no word with the query). When it does not pass, the result says so and carries the
   server directory instead of guesses.

The index is built once per catalogue. Tool embeddings come from an `EmbeddingCache` keyed by
each definition's hash, so a rebuild embeds only new or changed tools.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from heron.discovery.documents import DenseView, ToolDoc
from heron.discovery.embeddings import Embedder, Vectors, load_embedder
from heron.discovery.fusion import FusionMethod, fuse, minmax
from heron.discovery.lexical import FloatArray, LexicalParams, LexicalRanker, normalised
from heron.discovery.prior import UsagePrior, UsageQuery
from heron.discovery.sqlite_cache import EmbeddingCache, embed_cached

__all__ = [
    "TEXT_FORMAT",
    "BuildStats",
    "DiscoveryIndex",
    "DiscoveryParams",
    "Match",
    "Mode",
    "SearchResult",
    "ServerSummary",
]

Mode = Literal["hybrid", "lexical"]
BoolArray = npt.NDArray[np.bool_]
TEXT_FORMAT = "t2"
"""Version of the texts embedded (`ToolDoc.view_text()`, the server summaries, the null
passages): part of every cache key, so a changed template is embedded afresh, never mixed in.
t2: run-together names split into words (`ToolDoc.name_words`)."""
NULL_PASSAGES = (
    "A tool.",
    "An app that helps you with many things.",
    "Utility functions.",
    "Get information.",
    "A service with an API.",
)
"""Descriptions that say nothing: the per-query baseline of the dense "nothing close" test."""
_SUMMARY_TOOLS = 12
_SUMMARY_CHARS = 160


@dataclass(frozen=True, kw_only=True, slots=True)
class DiscoveryParams:
    """Ranking knobs (defaults chosen on the MetaTool tune split)."""

    hybrid_lexical: LexicalParams = field(default_factory=LexicalParams)
    """Lexical ranker when embeddings are on (the related-words lexicon still helps there)."""
    lexical_only: LexicalParams = field(default_factory=LexicalParams)
    """Lexical ranker without embeddings."""
    fusion: FusionMethod = "linear"
    alpha: float = 0.7
    """Weight of the dense score in the linear mix."""
    dense_views: tuple[DenseView, ...] = ("full", "description", "name")
    """The texts embedded per tool; a tool's dense score is the mean of the query's cosines
    with them (one stored vector: their mean). Three views beat the full text alone by 1.9
    points of fused recall@5 on the tune split (docs/discovery.md)."""
    rrf_k: float = 60.0
    min_margin: float = -0.0075
    """The "nothing close" gate, dense half: the best tool's cosine must beat the query's
    cosine with contentless descriptions (`NULL_PASSAGES`) by this much. e5 cosines sit in a
    narrow band (0.7–0.9) that moves with the query, so a fixed cosine threshold fails."""
    min_relevance: float = 2.0
    """The gate's lexical half: or the best word-level BM25 of the query's own words.

    Both chosen on the tune split, with the default engine (onnxruntime) and the three dense
    views. The dense half must work alone (a Chinese request shares no word with an English
    catalogue): the strictest margin with at most 10 % false "nothing close" by itself (8.6 %);
    then the lexical threshold with the fewest wrong "found" answers while the gate as a whole
    stays under 2 % false "nothing close" (1.6 %)."""
    tool_floor: float = -0.04
    """Below the gate, per tool: a tool whose margin is under this and that shares no word with
    the query is never a candidate (keeps 98 % of the right tools on the tune split)."""
    lexical_min_relevance: float = 1.0
    """Lexical-only mode: the word-level BM25 (with the lexicon) a tool needs, gate and floor."""
    hierarchical: bool = False
    servers_considered: int = 3
    """With hierarchical matching: how many best servers' tools are ranked first."""
    prior_weight: float = 0.5
    """Largest boost a usage prior can add (fused scores are in [0, 1])."""
    query_cache: int = 256
    """Query embeddings kept (least recently used out): a repeated need costs no embedding."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerSummary:
    """One line of the server directory."""

    server: str
    tools: int
    summary: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Match:
    doc: ToolDoc
    score: float
    """Final rank score (relative; comparable within one query)."""
    exact: bool = False
    lexical: float = 0.0
    """Word-level BM25 relevance."""
    cosine: float | None = None
    prior: float = 0.0
    """The usage prior's boost included in `score`."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchResult:
    query: str
    mode: Mode
    matches: tuple[Match, ...] = ()
    directory: tuple[ServerSummary, ...] = ()
    """The server directory, given instead of guesses when nothing is close."""

    @property
    def found(self) -> bool:
        return bool(self.matches)


@dataclass(frozen=True, kw_only=True, slots=True)
class BuildStats:
    tools: int
    servers: int
    embedded: int
    """Texts embedded for this build (tools and server summaries not in the cache)."""
    seconds: float


def _name_key(name: str) -> str:
    return re.sub(r"[\s\-]+", "_", name.strip().casefold())


_IDENTIFIER = re.compile(r"[A-Za-z0-9][\w\-.]*")


def _identifier_like(token: str) -> bool:
    # `read_file`, `getWeather`, `time__now`: not plain words like `search` or `calculator`.
    return "_" in token or bool(re.search(r"[a-z][A-Z]", token))


class DiscoveryIndex:
    """The ranking index over a catalogue of `ToolDoc`s."""

    def __init__(
        self,
        docs: Sequence[ToolDoc],
        *,
        embedder: Embedder | Literal["auto"] | None = "auto",
        cache: EmbeddingCache | None = None,
        params: DiscoveryParams | None = None,
        server_descriptions: Mapping[str, str] | None = None,
        prior: UsagePrior | None = None,
    ) -> None:
        started = time.perf_counter()
        self.params = params or DiscoveryParams()
        self.prior = prior
        self.docs = tuple(docs)
        if embedder == "auto":
            status = load_embedder()
            self.embedder, self.mode_reason = status.embedder, status.reason
        else:
            self.embedder = embedder
            self.mode_reason = "" if embedder is not None else "no embedder was given"
        self.mode: Mode = "hybrid" if self.embedder is not None else "lexical"
        self._queries: OrderedDict[str, Vectors] = OrderedDict()
        self._query_lock = threading.Lock()

        self._by_name: dict[str, list[int]] = {}
        for i, d in enumerate(self.docs):
            self._by_name.setdefault(_name_key(d.qualified), []).append(i)
            self._by_name.setdefault(_name_key(d.name), []).append(i)
        by_server: dict[str, list[ToolDoc]] = {}
        for d in self.docs:
            by_server.setdefault(d.server, []).append(d)
        self._servers = list(by_server)
        position = {s: j for j, s in enumerate(self._servers)}
        self._server_of = np.array([position[d.server] for d in self.docs], dtype=int)
        descriptions = self._descriptions = dict(server_descriptions or {})
        self.directory = tuple(
            ServerSummary(
                server=s,
                tools=len(tools),
                summary=_server_summary(descriptions.get(s), tools),
            )
            for s, tools in by_server.items()
        )

        lexical_params = self.params.hybrid_lexical if self.embedder else self.params.lexical_only
        self._lexical = LexicalRanker(
            [
                (
                    f"{d.name_words} {d.title or ''}",
                    " ".join((d.server, d.description, " ".join(d.parameters))),
                )
                for d in self.docs
            ],
            lexical_params,
        )
        self._tool_vectors: Vectors | None = None
        self._server_vectors: Vectors | None = None
        self._null_vectors: Vectors | None = None
        embedded = 0
        if self.embedder is not None and self.docs:
            views = self.params.dense_views or ("full",)
            vectors, n_tools = embed_cached(
                self.embedder,
                ((_view_key(view, d), d.view_text(view)) for view in views for d in self.docs),
                cache,
            )
            # The mean of a tool's view vectors: its dot product with a query is the mean of
            # the query's cosines with the views.
            self._tool_vectors = vectors.reshape(len(views), len(self.docs), -1).mean(axis=0)
            embedded += n_tools
            self._null_vectors, n_null = embed_cached(
                self.embedder,
                ((f"null:{TEXT_FORMAT}:{_text_key(t)}", t) for t in NULL_PASSAGES),
                cache,
            )
            embedded += n_null
            if self.params.hierarchical:
                texts = [f"{s.server}: {s.summary}" for s in self.directory]
                self._server_vectors, n_servers = embed_cached(
                    self.embedder,
                    ((f"server:{TEXT_FORMAT}:{_text_key(t)}", t) for t in texts),
                    cache,
                )
                embedded += n_servers
        self.stats = BuildStats(
            tools=len(self.docs),
            servers=len(self._servers),
            embedded=embedded,
            seconds=time.perf_counter() - started,
        )

    def __len__(self) -> int:
        return len(self.docs)

    def embed_query(self, query: str) -> Vectors | None:
        """The query's embedding (None in lexical mode), from the recent-queries cache when the
        same text was embedded lately."""
        if self.embedder is None:
            return None
        key = query.strip()
        with self._query_lock:
            cached = self._queries.get(key)
            if cached is not None:
                self._queries.move_to_end(key)
                return cached
        vector: Vectors = self.embedder.embed_queries([key])[0]
        with self._query_lock:
            self._queries[key] = vector
            while len(self._queries) > self.params.query_cache:
                self._queries.popitem(last=False)
        return vector

    def exact(self, query: str) -> list[int]:
        """Tools named by the query: the whole query, or a qualified/identifier-like token."""
        hits = list(self._by_name.get(_name_key(query), ()))
        for token in _IDENTIFIER.findall(query):
            if _identifier_like(token):
                hits.extend(self._by_name.get(_name_key(token), ()))
        return list(dict.fromkeys(hits))

    def _dense(self, text: str, vector: Vectors | None) -> tuple[Vectors, FloatArray, FloatArray]:
        """The query vector, each tool's cosine, and each tool's margin over the baseline."""
        assert self._tool_vectors is not None and self._null_vectors is not None
        if vector is None:
            vector = self.embed_query(text)
            assert vector is not None
        cosine = np.asarray(self._tool_vectors @ vector, dtype=np.float64)
        return vector, cosine, cosine - float(np.max(self._null_vectors @ vector))

    def closeness(
        self, query: str, *, query_vector: Vectors | None = None
    ) -> tuple[FloatArray | None, FloatArray]:
        """Per tool: the dense margin over the contentless baseline (None in lexical mode) and
        the word-level BM25 relevance — the two quantities the "nothing close" test compares."""
        scores = self._lexical.scores(query)
        if self._tool_vectors is None:
            return None, scores.relevance
        return self._dense(query, query_vector)[2], scores.direct

    def search(
        self,
        query: str,
        limit: int = 5,
        *,
        query_vector: Vectors | None = None,
        prior: UsagePrior | None = None,
        allowed: BoolArray | None = None,
    ) -> SearchResult:
        """The best `limit` close tools for `query`, or a not-found result with the directory.

        `allowed` (one flag per document, from `mask`) limits the answer to a grant: other
        documents are never returned, exact names included, and the directory lists only the
        servers that have allowed documents."""
        text = query.strip()
        directory = self.directory if allowed is None else self._directory_of(allowed)
        if not text or not self.docs or (allowed is not None and not allowed.any()):
            return SearchResult(query=query, mode=self.mode, directory=directory)
        p = self.params
        exact = self.exact(text)
        within: BoolArray | slice = slice(None)
        if allowed is not None:
            exact = [i for i in exact if allowed[i]]
            within = allowed
        lexical = self._lexical.scores(text)
        cosine: FloatArray | None = None
        vector = query_vector
        if self._tool_vectors is not None:
            vector, cosine, margin = self._dense(text, vector)
            score = fuse(lexical.score, cosine, method=p.fusion, alpha=p.alpha, rrf_k=p.rrf_k)
            # The gate looks at the allowed documents only: a grant's "nothing close" is about
            # what it may use.
            gate = bool(
                margin[within].max() >= p.min_margin
                or lexical.direct[within].max() >= p.min_relevance
            )
            close = (margin >= p.tool_floor) | (lexical.direct > 0)
        else:
            score = normalised(lexical.score)
            close = lexical.relevance >= max(p.lexical_min_relevance, 1e-9)
            gate = bool(close[within].any())
        if not gate:
            close = np.zeros(len(self.docs), dtype=bool)
        if allowed is not None:
            close = close & allowed
        score = minmax(score) if p.fusion == "rrf" else score
        if p.hierarchical and len(self._servers) > 1:
            score = self._hierarchical(score, vector)
        boost = np.zeros(len(self.docs))
        use_prior = prior if prior is not None else self.prior
        if use_prior is not None:
            boost = self._prior_boost(use_prior, UsageQuery(text=text, vector=vector))
            score = score + boost
        candidates = np.flatnonzero(close)
        order = candidates[np.lexsort((candidates, -score[candidates]))]
        # Only the head of the order can be chosen (exact names may take some of its places).
        ranked = [int(i) for i in order[: limit + len(exact)] if int(i) not in exact]
        chosen = (exact + ranked)[:limit]
        if not chosen:
            return SearchResult(query=query, mode=self.mode, directory=directory)
        top = float(score[order[0]]) if len(order) else 1.0
        matches = tuple(
            Match(
                doc=self.docs[i],
                score=(max(top, 1.0) + 1.0) if i in exact else float(score[i]),
                exact=i in exact,
                lexical=float(lexical.relevance[i]),
                cosine=None if cosine is None else float(cosine[i]),
                prior=float(boost[i]),
            )
            for i in chosen
        )
        return SearchResult(query=query, mode=self.mode, matches=matches)

    def mask(self, predicate: Callable[[ToolDoc], bool]) -> BoolArray:
        """One flag per document: which ones `predicate` allows (for `search(allowed=...)`)."""
        return np.fromiter((predicate(d) for d in self.docs), dtype=bool, count=len(self.docs))

    def _directory_of(self, allowed: BoolArray) -> tuple[ServerSummary, ...]:
        # Summaries are made again from the allowed tools only: a grant never learns the names
        # of tools outside it.
        by_server: dict[str, list[ToolDoc]] = {}
        for i in np.flatnonzero(allowed):
            doc = self.docs[int(i)]
            by_server.setdefault(doc.server, []).append(doc)
        return tuple(
            ServerSummary(
                server=s,
                tools=len(tools),
                summary=_server_summary(self._descriptions.get(s), tools),
            )
            for s, tools in by_server.items()
        )

    def _hierarchical(self, score: FloatArray, vector: Vectors | None) -> FloatArray:
        """Tools of the best servers first: server score = its best tool, mixed with how well
        its summary matches; the other servers' tools keep their order after them."""
        p = self.params
        best_tool = np.full(len(self._servers), -np.inf)
        np.maximum.at(best_tool, self._server_of, score)
        server_score = minmax(best_tool)
        if self._server_vectors is not None and vector is not None:
            server_score = 0.5 * server_score + 0.5 * minmax(
                np.asarray(self._server_vectors @ vector, dtype=np.float64)
            )
        top = np.argsort(-server_score, kind="stable")[: p.servers_considered]
        lifted = np.isin(self._server_of, top)
        # A gap larger than any score range lifts the chosen servers' tools above the rest.
        return np.asarray(score + 2.0 * lifted, dtype=np.float64)

    def _prior_boost(self, prior: UsagePrior, query: UsageQuery) -> FloatArray:
        weights = prior(query)
        boost = np.zeros(len(self.docs))
        if not weights:
            return boost
        top = max(weights.values())
        if top <= 0:
            return boost
        for name, weight in weights.items():
            for i in self._by_name.get(_name_key(name), ()):
                if _name_key(self.docs[i].qualified) == _name_key(name):
                    boost[i] = self.params.prior_weight * max(weight, 0.0) / top
        return boost


def _view_key(view: DenseView, doc: ToolDoc) -> str:
    # `tool:` alone is the full view (the shape of the key before there were other views).
    prefix = "tool" if view == "full" else f"tool-{view}"
    return f"{prefix}:{TEXT_FORMAT}:{doc.fingerprint()}"


def _text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _server_summary(description: str | None, docs: Sequence[ToolDoc]) -> str:
    if description and description.strip():
        return " ".join(description.split())[:_SUMMARY_CHARS]
    names = [d.name_words for d in docs]
    shown = ", ".join(names[:_SUMMARY_TOOLS])
    more = f" and {len(names) - _SUMMARY_TOOLS} more" if len(names) > _SUMMARY_TOOLS else ""
    return f"tools: {shown}{more}"
