"""What an agent would find: many needs searched over one catalogue file, for evaluation and for
people who want to see the ranking (`heron tools search` is this function's command line).

    from heron.discovery import search_catalogue

    for result in search_catalogue("catalogue.json", ["stock prices", "convert EUR to USD"]):
        print(result.query, [(r.server, r.name, round(r.score, 3)) for r in result.results])

The catalogue is a file (or its decoded JSON, or `ToolDoc`s) mapping each server name to its
`tools/list` result; the index is built once (embeddings from the user cache,
`default_cache_path()`) and each need is ranked as `discover_tools` ranks it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from heron.discovery.catalogue import load_catalogue, parse_catalogue
from heron.discovery.documents import ToolDoc
from heron.discovery.embeddings import Embedder
from heron.discovery.index import DiscoveryIndex, DiscoveryParams, Mode, ServerSummary
from heron.discovery.sqlite_cache import EmbeddingCache, default_cache_path

__all__ = ["RankedTool", "Ranking", "search_catalogue"]


@dataclass(frozen=True, kw_only=True, slots=True)
class RankedTool:
    server: str
    name: str
    score: float
    exact: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"server": self.server, "name": self.name, "score": round(self.score, 6)}


@dataclass(frozen=True, kw_only=True, slots=True)
class Ranking:
    """One need's answer: ranked tools, or (none close) the server directory."""

    query: str
    mode: Mode
    results: tuple[RankedTool, ...] = ()
    directory: tuple[ServerSummary, ...] = ()

    @property
    def found(self) -> bool:
        return bool(self.results)


Catalogue = Path | str | Mapping[str, Any] | Sequence[ToolDoc]


def _docs(catalogue: Catalogue) -> list[ToolDoc]:
    if isinstance(catalogue, str | Path):
        return load_catalogue(Path(catalogue))
    if isinstance(catalogue, Mapping):
        return parse_catalogue(catalogue)
    return list(catalogue)


def search_catalogue(
    catalogue: Catalogue,
    queries: Iterable[str],
    *,
    limit: int = 5,
    embedder: Embedder | Literal["auto"] | None = "auto",
    cache: EmbeddingCache | Literal["default"] | None = "default",
    params: DiscoveryParams | None = None,
) -> Iterator[Ranking]:
    """Rank the tools of `catalogue` for each query, in order (lazily: the index is built
    before the first answer). Raises `CatalogueError` for a catalogue that cannot be used."""
    docs = _docs(catalogue)
    store = EmbeddingCache(default_cache_path()) if cache == "default" else cache
    index = DiscoveryIndex(docs, embedder=embedder, cache=store, params=params)
    try:
        for query in queries:
            result = index.search(query, limit)
            yield Ranking(
                query=query,
                mode=result.mode,
                results=tuple(
                    RankedTool(server=m.doc.server, name=m.doc.name, score=m.score, exact=m.exact)
                    for m in result.matches
                ),
                directory=result.directory,
            )
    finally:
        if cache == "default" and store is not None:
            store.close()
