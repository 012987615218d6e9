"""What discovery reads of a tool: its name as words, and the texts it embeds (and their keys)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_discovery import CATALOGUE, VIEWS, ConceptEmbedder, tool

from heron.discovery import DiscoveryIndex, EmbeddingCache, ToolDoc
from heron.discovery import index as index_module
from heron.discovery.documents import split_compound


def test_identifier_names_read_as_words() -> None:
    assert tool("s", "get_weather-forecast", "Forecasts.").name_words == "get weather forecast"
    assert tool("s", "getWeatherForecast", "Forecasts.").name_words == "get Weather Forecast"
    assert tool("s", "files.readFile", "Reads.").name_words == "files read File"


def test_a_run_together_name_is_split_on_the_words_of_its_own_text() -> None:
    doc = tool("s", "keywordexplorer", "Keyword Explorer lists related search terms.")
    assert doc.name_words == "keyword explorer"
    assert doc.view_text("name") == "keyword explorer"
    assert doc.embedding_text().startswith("keyword explorer: Keyword Explorer lists")
    # Parameters count as the tool's own text too.
    assert tool("s", "filewatcher", "Reports changes.", file="Watcher").name_words == "file watcher"


def test_split_compound_needs_every_piece_and_prefers_fewest() -> None:
    words = {"note", "book", "notebook", "keeper", "air", "quality"}
    assert split_compound("notebookkeeper", words) == ["notebook", "keeper"]
    assert split_compound("airqualityforeast", words) == ["airqualityforeast"]  # a typo: whole
    assert split_compound("qrgen", {"qr", "gen"}) == ["qrgen"]  # short words stay whole
    assert split_compound("notebook", {"notebook"}) == ["notebook"]  # never into itself
    assert split_compound("note" * 100, words) == ["note" * 100]  # hostile lengths: whole


def test_a_title_names_the_tool_in_the_dense_views() -> None:
    doc = tool("s", "kwx", "Finds keywords.")
    titled = ToolDoc(server="s", name="kwx", description="Finds keywords.", title="Keyword X")
    assert doc.view_text("name") == "kwx"
    assert titled.view_text("name") == "Keyword X"


def test_a_run_together_name_is_found_by_a_query_using_its_words() -> None:
    # "watcher" is nowhere but in the name (parameter descriptions are not in the lexical
    # body): only the split name gives the query word-level evidence.
    docs = [
        tool("fs", "filewatcher", "Reports changes.", file="Path of the watcher"),
        tool("fs", "read_file", "Read a file from the workspace.", path="File path"),
    ]
    index = DiscoveryIndex(docs, embedder=None)
    result = index.search("start a watcher")
    assert [m.doc.name for m in result.matches] == ["filewatcher"]
    assert result.matches[0].lexical > 0


def test_a_new_text_format_re_embeds_every_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    DiscoveryIndex(CATALOGUE, embedder=ConceptEmbedder(), cache=cache)
    warm = ConceptEmbedder()
    DiscoveryIndex(CATALOGUE, embedder=warm, cache=cache)
    assert warm.embedded == []
    # A changed template is a new text format: the old vectors are never mixed in.
    monkeypatch.setattr(index_module, "TEXT_FORMAT", "t-next")
    changed = ConceptEmbedder()
    rebuilt = DiscoveryIndex(CATALOGUE, embedder=changed, cache=cache)
    assert len(changed.embedded) == len(CATALOGUE) * len(VIEWS)
    assert rebuilt.stats.embedded == len(CATALOGUE) * len(VIEWS) + len(index_module.NULL_PASSAGES)
