"""Public data sources as perception tools, and a catalogue of perception tools by kind.

Each tool talks to one free, keyless public API through `HttpApi` (policy-checked addresses,
caching, per-source rate limits, structured errors):

| tool | kind | source (default base URL) |
|---|---|---|
| `weather_forecast` | query | Open-Meteo forecast + geocoding APIs |
| `fx_rates` | query | Frankfurter v1 (ECB reference rates), `api.frankfurter.dev/v1` |
| `stock_quote` | query | Stooq's CSV quote endpoint `q/l/?s=…&f=sd2t2ohlcv&h&e=csv` |
| `wikipedia_search` | search | MediaWiki Action API `w/api.php?action=query&list=search` |
| `wikipedia_summary` | read | Wikimedia REST `api/rest_v1/page/summary/{title}` |
| `arxiv_search` | search | arXiv Atom query API `export.arxiv.org/api/query` |
| `arxiv_download` | read | arXiv PDFs `arxiv.org/pdf/{id}`, size-capped, into the workspace |

Every base URL is configurable (`sources=`), so tests run the same code against local servers.
One module per source family (`weather`, `markets`, `wikipedia`, `arxiv`), the addresses and
shared answer helpers in `sources`; `catalogue` (`perception_catalogue_section`) renders a
system-prompt section listing perception tools by kind (search, read, parse, query).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from heron.connectors.http_api import ApiSource, HttpApi, Sleep
from heron.connectors.public_data.arxiv import arxiv_tools
from heron.connectors.public_data.catalogue import (
    PERCEPTION_KINDS,
    PerceptionKind,
    perception_catalogue_section,
    perception_kind,
)
from heron.connectors.public_data.markets import market_tools
from heron.connectors.public_data.sources import DEFAULT_SOURCES
from heron.connectors.public_data.weather import weather_tools
from heron.connectors.public_data.wikipedia import wikipedia_tools
from heron.safety.url_policy import UrlPolicy
from heron.tools.definition import Tool

__all__ = [
    "DEFAULT_SOURCES",
    "PERCEPTION_KINDS",
    "PerceptionKind",
    "perception_catalogue_section",
    "perception_kind",
    "public_data_tools",
]


def public_data_tools(
    *,
    policy: UrlPolicy,
    sources: Mapping[str, ApiSource] | None = None,
    workspace_root: Path | None = None,
    sleep: Sleep = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
) -> list[Tool]:
    """The public data tools over `DEFAULT_SOURCES` (entries replaced by `sources`).

    `arxiv_download` saves into `workspace_root`, or the agent's workspace when that is None.
    """
    merged = {**DEFAULT_SOURCES, **(sources or {})}
    apis = {
        name: HttpApi(src, policy=policy, sleep=sleep, clock=clock, wall_clock=wall_clock)
        for name, src in merged.items()
    }

    def base_of(name: str) -> str:
        return merged[name].base_url.rstrip("/")

    return [
        *weather_tools(apis, base_of),
        *market_tools(apis, base_of),
        *wikipedia_tools(apis, base_of),
        *arxiv_tools(apis, base_of, workspace_root=workspace_root),
    ]
