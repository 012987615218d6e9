"""The public APIs the public data tools call: their default addresses, cache lifetimes and rate
limits, and the helpers every tool uses to read an answer and name its source."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field

from heron.connectors.http_api import ApiResponse, ApiSource, HttpApi, RateLimit

__all__ = ["DEFAULT_SOURCES", "Cursor", "describe_total", "json_object", "page", "source_line"]

_UA = "heron-agent/1.0 (public data tools)"


def _source(name: str, url: str, ttl: float, calls: int, per_s: float, **more: Any) -> ApiSource:
    limit = RateLimit(calls=calls, per_s=per_s)
    return ApiSource(
        name=name, base_url=url, cache_ttl_s=ttl, rate_limit=limit, user_agent=_UA, **more
    )


DEFAULT_SOURCES: Mapping[str, ApiSource] = {
    s.name: s
    for s in (
        _source("open-meteo", "https://api.open-meteo.com/v1", 600, 10, 1),
        _source("open-meteo-geocoding", "https://geocoding-api.open-meteo.com/v1", 86_400, 10, 1),
        _source("frankfurter", "https://api.frankfurter.dev/v1", 3600, 5, 1),
        _source("stooq", "https://stooq.com", 60, 2, 1),
        _source("wikipedia", "https://en.wikipedia.org", 3600, 10, 1),
        # arXiv's API terms ask for no more than one request every three seconds.
        _source("arxiv", "https://export.arxiv.org/api", 3600, 1, 3),
        _source("arxiv-pdf", "https://arxiv.org/pdf", 0, 1, 3, timeout_s=60, max_bytes=50_000_000),
    )
}
"""The default sources; `public_data_tools(sources=...)` replaces entries by name."""

Cursor = Annotated[str, Field(pattern=r"^[0-9]{1,6}$")]
"""A page cursor: the offset of the next result."""


async def json_object(
    api: HttpApi, path: str, params: Mapping[str, str] | None, *needs: str
) -> tuple[ApiResponse, dict[str, Any]]:
    """GET a JSON object that must hold the keys `needs`; anything else is a bad response."""
    response = await api.get(path, params=params)
    document = response.json()
    if not isinstance(document, dict):
        raise response.bad(f"a JSON {type(document).__name__}, not an object")
    missing = [key for key in needs if key not in document]
    if missing:
        raise response.bad(f"no {', '.join(missing)} in the answer")
    return response, document


def source_line(response: ApiResponse, base: str) -> str:
    fetched = "fetched now" if response.age_s is None else f"cached, {response.age_s:.0f} s old"
    return f"Source: {response.source} ({base}), {fetched}"


def page(header: str, items: list[str], next_cursor: str | None, source: str) -> str:
    lines = [header, *items]
    if next_cursor:
        lines.append(f'Next page: pass cursor="{next_cursor}".')
    return "\n".join([*lines, source])


def describe_total(total: Any) -> str:
    return f"{total:,} in total" if isinstance(total, int) else "total unknown"
