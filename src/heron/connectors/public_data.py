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

Stocks come from Stooq because it is the one widely used quote source with a plain keyless CSV
endpoint (Yahoo's JSON API needs cookies and a crumb; Alpha Vantage and others need a key).
Stooq gives delayed end-of-session or intraday quotes and no guarantees; should it start asking
for a key, give its source a `Credential(env=..., query="apikey")`.

Every base URL is configurable (`sources=`), so tests run the same code against local servers.
Kinds: **search** finds candidates (paginated, with totals), **read** gets one known item,
**parse** turns a file into text, **query** asks a data service a precise question.
`perception_catalogue_section` renders a system-prompt section listing tools by kind.
"""

from __future__ import annotations

import asyncio
import csv
import datetime as dt
import html
import io
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import quote
from xml.etree import ElementTree

from pydantic import Field

from heron.connectors.http_api import ApiError, ApiResponse, ApiSource, HttpApi, RateLimit, Sleep
from heron.safety.url_policy import UrlPolicy
from heron.safety.workspace import Workspace, WorkspaceError, atomic_write
from heron.tools.definition import Tool, ToolContext, ToolResult
from heron.tools.function_tool import tool

__all__ = [
    "DEFAULT_SOURCES",
    "PERCEPTION_KINDS",
    "PerceptionKind",
    "perception_catalogue_section",
    "perception_kind",
    "public_data_tools",
]

PerceptionKind = Literal["search", "read", "parse", "query"]
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


# --- helpers -----------------------------------------------------------------------------------

_WMO = {0: "clear sky", 1: "mainly clear", 2: "partly cloudy", 3: "overcast", 45: "fog"}
_WMO |= {48: "rime fog", 51: "light drizzle", 53: "drizzle", 55: "dense drizzle"}
_WMO |= {61: "light rain", 63: "rain", 65: "heavy rain", 71: "light snow", 73: "snow"}
_WMO |= {75: "heavy snow", 80: "rain showers", 81: "rain showers", 82: "violent rain showers"}
_WMO |= {95: "thunderstorm", 96: "thunderstorm with hail", 99: "thunderstorm with heavy hail"}
_ATOM = {"a": "http://www.w3.org/2005/Atom", "os": "http://a9.com/-/spec/opensearch/1.1/"}
_ATOM["arxiv"] = "http://arxiv.org/schemas/atom"
_ARXIV_ID = re.compile(r"(\d{4}\.\d{4,5}|[a-z-]+(\.[A-Z]{2})?/\d{7})(v\d+)?")
_TAG = re.compile(r"<[^>]+>")
_QUOTE_COLUMNS = ("Symbol", "Date", "Time", "Open", "High", "Low", "Close", "Volume")

Currency = Annotated[str, Field(pattern=r"^[A-Z]{3}$")]
Cursor = Annotated[str, Field(pattern=r"^[0-9]{1,6}$")]


async def _json_object(
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


def _source_line(response: ApiResponse, base: str) -> str:
    fetched = "fetched now" if response.age_s is None else f"cached, {response.age_s:.0f} s old"
    return f"Source: {response.source} ({base}), {fetched}"


def _fmt(value: Any, unit: str) -> str:
    return "n/a" if value is None else f"{value} {unit}".replace(" %", "%")


def _sky(code: Any) -> str:
    return _WMO.get(code, f"weather code {code}") if isinstance(code, int) else "sky unknown"


def _weather_text(label: str, document: dict[str, Any]) -> list[str]:
    now, units = document["current"], document.get("current_units") or {}
    day, day_units = document["daily"], document.get("daily_units") or {}
    if (
        not isinstance(now, dict)
        or not isinstance(day, dict)
        or not isinstance(day.get("time"), list)
    ):
        raise ValueError("'current' or 'daily' is not the documented object")

    def unit(key: str, default: str) -> str:
        return str(units.get(key, default))

    lines = [
        f"Weather for {label}, timezone {document.get('timezone', '?')}",
        f"Now ({now.get('time', '?')}): "
        f"{_fmt(now.get('temperature_2m'), unit('temperature_2m', '°C'))}, "
        f"humidity {_fmt(now.get('relative_humidity_2m'), '%')}, precipitation "
        f"{_fmt(now.get('precipitation'), unit('precipitation', 'mm'))}, wind "
        f"{_fmt(now.get('wind_speed_10m'), unit('wind_speed_10m', 'km/h'))}, "
        f"{_sky(now.get('weather_code'))}",
        "Daily:",
    ]
    for i, date in enumerate(day["time"]):
        row = {k: v[i] if isinstance(v, list) and i < len(v) else None for k, v in day.items()}
        lines.append(
            f"  {date}: {row.get('temperature_2m_min')}–"
            f"{_fmt(row.get('temperature_2m_max'), day_units.get('temperature_2m_max', '°C'))}, "
            f"{_fmt(row.get('precipitation_sum'), day_units.get('precipitation_sum', 'mm'))}, "
            f"{_sky(row.get('weather_code'))}"
        )
    return lines


def _parse_atom(response: ApiResponse) -> ElementTree.Element:
    # Entity declarations are refused outright: the feed format never needs them.
    if b"<!DOCTYPE" in response.body or b"<!ENTITY" in response.body:
        raise response.bad("the feed declares a DOCTYPE or entities")
    try:
        root = ElementTree.fromstring(response.body)
    except ElementTree.ParseError as exc:
        raise response.bad(f"not an Atom feed ({exc})") from None
    if root.tag != f"{{{_ATOM['a']}}}feed":
        raise response.bad(f"root element is {root.tag}, not an Atom feed")
    return root


def _text(element: ElementTree.Element, path: str) -> str:
    found = element.find(path, _ATOM)
    return " ".join((found.text or "").split()) if found is not None else ""


def _paper(entry: ElementTree.Element) -> dict[str, Any]:
    url = _text(entry, "a:id")
    category = entry.find("arxiv:primary_category", _ATOM)
    return {
        "id": url.rsplit("/abs/", 1)[-1],
        "title": _text(entry, "a:title"),
        "authors": [_text(a, "a:name") for a in entry.findall("a:author", _ATOM)],
        "published": _text(entry, "a:published")[:10],
        "category": category.get("term", "") if category is not None else "",
        "abstract": _text(entry, "a:summary"),
        "url": url,
    }


def _paper_text(n: int, paper: dict[str, Any]) -> str:
    abstract = paper["abstract"]
    if len(abstract) > 300:
        abstract = abstract[:300] + f"… [first 300 of {len(abstract)} characters]"
    names = paper["authors"]
    authors = ", ".join(names[:5]) + (" et al." if len(names) > 5 else "")
    return (
        f"{n}. [{paper['id']}] {paper['title']}\n   {authors} — {paper['published']}, "
        f"{paper['category']}\n   {abstract}"
    )


def _page(header: str, items: list[str], next_cursor: str | None, source: str) -> str:
    lines = [header, *items]
    if next_cursor:
        lines.append(f'Next page: pass cursor="{next_cursor}".')
    return "\n".join([*lines, source])


def _total(total: Any) -> str:
    return f"{total:,} in total" if isinstance(total, int) else "total unknown"


# --- the tools ---------------------------------------------------------------------------------


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

    @tool(
        read_only=True,
        idempotent=True,
        open_world=True,
        owner="builtin",
        examples=[{"place": "Berlin"}, {"latitude": 48.85, "longitude": 2.35, "days": 7}],
    )
    async def weather_forecast(
        place: Annotated[str, Field(min_length=1, max_length=200)] | None = None,
        latitude: Annotated[float, Field(ge=-90, le=90)] | None = None,
        longitude: Annotated[float, Field(ge=-180, le=180)] | None = None,
        days: Annotated[int, Field(ge=1, le=16)] = 3,
    ) -> ToolResult:
        """Current weather and a daily forecast for a place, from Open-Meteo (free, keyless).
        Give either `place` (looked up with Open-Meteo geocoding; the best match is used and
        named in the result) or both `latitude` and `longitude`.

        Returns: the place resolved, the current conditions (temperature, humidity,
        precipitation, wind, sky) and one line per day (min-max temperature, precipitation,
        sky), in the place's local time and metric units. Cannot give past weather or hourly
        detail. About 0.5-2 s; answers are cached for 10 minutes.

        Args:
            place: A place name, e.g. `Berlin` or `Springfield, Illinois`.
            latitude: WGS84 latitude, e.g. `52.52`.
            longitude: WGS84 longitude, e.g. `13.41`.
            days: Number of forecast days (1-16).
        """
        if (latitude is None) != (longitude is None) or (place is None) == (latitude is None):
            return ToolResult.fail("give either place, or both latitude and longitude")
        label = f"{latitude}, {longitude}"
        try:
            if place is not None:
                params = {"name": place, "count": "1", "format": "json"}
                found, places = await _json_object(apis["open-meteo-geocoding"], "search", params)
                hits = places.get("results")
                if not hits:
                    return ToolResult.fail(
                        f"Open-Meteo geocoding knows no place named {place!r}; try the city "
                        "name alone, or give latitude and longitude",
                        data={"error": "not_found", "source": "open-meteo-geocoding"},
                    )
                first = hits[0] if isinstance(hits, list) and isinstance(hits[0], dict) else {}
                latitude, longitude = first.get("latitude"), first.get("longitude")
                if not isinstance(latitude, float | int) or not isinstance(longitude, float | int):
                    raise found.bad("a geocoding result without coordinates")
                named = [str(first[k]) for k in ("name", "admin1", "country") if first.get(k)]
                label = f"{', '.join(named)} ({latitude}, {longitude})"
            current = "temperature_2m,relative_humidity_2m,precipitation,weather_code"
            daily = "weather_code,temperature_2m_max,temperature_2m_min,precipitation_sum"
            params = {"latitude": str(latitude), "longitude": str(longitude), "daily": daily}
            params |= {"current": current + ",wind_speed_10m", "timezone": "auto"}
            params["forecast_days"] = str(days)
            api = apis["open-meteo"]
            response, document = await _json_object(api, "forecast", params, "current", "daily")
            try:
                lines = _weather_text(label, document)
            except (ValueError, TypeError, AttributeError) as exc:
                raise response.bad(str(exc)) from None
        except ApiError as exc:
            return exc.to_result()
        lines.append(_source_line(response, base_of("open-meteo")))
        data = {"place": label, "latitude": latitude, "longitude": longitude}
        return ToolResult.ok("\n".join(lines), data=data | {"current": document["current"]})

    @tool(
        read_only=True,
        idempotent=True,
        open_world=True,
        owner="builtin",
        examples=[
            {"base": "USD", "symbols": ["EUR", "GBP"]},
            {"base": "EUR", "symbols": ["JPY"], "amount": 250, "date": "2024-03-15"},
        ],
    )
    async def fx_rates(
        base: Currency = "EUR",
        symbols: Annotated[list[Currency], Field(min_length=1, max_length=30)] | None = None,
        amount: Annotated[float, Field(gt=0)] = 1.0,
        date: dt.date | None = None,
    ) -> ToolResult:
        """Foreign-exchange reference rates (European Central Bank, via the keyless Frankfurter
        API), latest or for a past date, optionally converting an amount. These are daily
        reference rates published around 16:00 CET on working days — not live market prices.
        For a weekend or holiday the result names the working day actually used.

        Returns: one line per currency (`1 USD = 0.92 EUR`; with `amount`, also the converted
        amount, computed here as amount × rate) and the rates' date. Codes the source does not
        know are listed as unavailable. About 0.5 s; cached for an hour.

        Args:
            base: ISO 4217 code of the base currency, e.g. `USD`.
            symbols: Target currencies, e.g. `["EUR", "GBP"]`; omit for all available.
            amount: An amount in `base` to convert, e.g. `250`.
            date: A past date (YYYY-MM-DD) for historical rates, e.g. `2024-03-15`.
        """
        params = {"base": base} | ({"symbols": ",".join(symbols)} if symbols else {})
        path = date.isoformat() if date else "latest"
        try:
            response, document = await _json_object(apis["frankfurter"], path, params, "rates")
            rates = document["rates"]
            if not isinstance(rates, dict) or not all(
                isinstance(v, int | float) for v in rates.values()
            ):
                raise response.bad("'rates' is not an object of numbers")
        except ApiError as exc:
            unknown = exc.kind in ("not_found", "rejected")
            return exc.to_result(hint=" (an unknown currency code?)" if unknown else "")
        day = str(document.get("date", "?"))
        lines = [f"ECB reference rates of {day} (base {base}):"]
        for code, rate in sorted(rates.items()):
            converted = f"; {amount:g} {base} = {amount * rate:,.4f} {code}" if amount != 1 else ""
            lines.append(f"  1 {base} = {rate} {code}{converted}")
        missing = sorted(set(symbols or ()) - set(rates) - {base})
        if missing:
            lines.append(f"Unavailable: {', '.join(missing)}")
        if date and day != date.isoformat():
            lines.append(f"Note: no rates were published on {date}; these are of {day}.")
        lines.append(_source_line(response, base_url := base_of("frankfurter")))
        data = {"base": base, "date": day, "rates": rates, "amount": amount, "unavailable": missing}
        return ToolResult.ok("\n".join(lines), data=data | {"source": base_url})

    @tool(
        read_only=True,
        idempotent=True,
        open_world=True,
        owner="builtin",
        examples=[{"symbols": ["aapl.us"]}, {"symbols": ["msft.us", "sap.de", "^spx"]}],
    )
    async def stock_quote(
        symbols: Annotated[
            list[Annotated[str, Field(pattern=r"^[A-Za-z0-9^._-]{1,20}$")]],
            Field(min_length=1, max_length=10),
        ],
    ) -> ToolResult:
        """Latest stock, index or ETF quotes from Stooq (keyless CSV; delayed, no guarantee of
        timeliness — never use for trading). Symbols use Stooq's form: ticker plus market,
        e.g. `aapl.us`, `sap.de`, `vod.uk`; indices like `^spx`. Cannot give history or
        fundamentals. One request per symbol (about 0.5 s each); cached for a minute.

        Returns: per symbol the date and time of the quote, open, high, low, close and volume,
        or "no data" when Stooq does not know the symbol.

        Args:
            symbols: Stooq symbols, e.g. `["aapl.us", "msft.us"]`.
        """
        quotes: list[dict[str, str]] = []
        lines: list[str] = []
        try:
            for symbol in symbols:
                path = f"q/l/?s={quote(symbol.lower(), safe='^.')}&f=sd2t2ohlcv&h&e=csv"
                response = await apis["stooq"].get(path)
                text = response.text()
                if "exceeded the daily hits limit" in text.lower():
                    raise ApiError(
                        "rate_limited", "stooq: the daily request limit is used up", source="stooq"
                    )
                rows = list(csv.DictReader(io.StringIO(text)))
                if len(rows) != 1 or not set(_QUOTE_COLUMNS) <= set(rows[0]):
                    raise response.bad(f"not the quote CSV; it began with {text[:60]!r}")
                row = {key: rows[0][key] or "" for key in _QUOTE_COLUMNS}
                quotes.append(row)
                if row["Close"] in ("N/D", ""):
                    lines.append(f"{row['Symbol']}: no data (unknown symbol, or no trades yet)")
                else:
                    lines.append(
                        f"{row['Symbol']}: close {row['Close']} (open {row['Open']}, high "
                        f"{row['High']}, low {row['Low']}, volume {row['Volume']}) at "
                        f"{row['Date']} {row['Time']}"
                    )
        except ApiError as exc:
            return exc.to_result()
        lines.append(_source_line(response, base_of("stooq")))
        return ToolResult.ok("\n".join(lines), data={"quotes": quotes})

    @tool(
        read_only=True,
        idempotent=True,
        open_world=True,
        owner="builtin",
        examples=[{"query": "Ada Lovelace analytical engine"}, {"query": "heron", "cursor": "10"}],
    )
    async def wikipedia_search(
        query: Annotated[str, Field(min_length=1, max_length=300)],
        cursor: Cursor | None = None,
        limit: Annotated[int, Field(ge=1, le=20)] = 10,
    ) -> ToolResult:
        """Search Wikipedia articles by keywords (MediaWiki search). Use it to find the exact
        article title, then read it with wikipedia_summary (lead section) or fetch_url on the
        article URL (the whole article).

        Returns: numbered hits with title, URL, word count and a snippet (search-match markup
        removed), the total number of hits, and a cursor for the next page. About 0.5 s.

        Args:
            query: Keywords, e.g. `Ada Lovelace analytical engine`.
            cursor: The cursor from a previous result for the next page.
            limit: Hits per page (1-20).
        """
        offset = int(cursor or 0)
        params = {"action": "query", "list": "search", "srsearch": query, "format": "json"}
        params |= {"formatversion": "2", "srlimit": str(limit), "sroffset": str(offset)}
        try:
            response, document = await _json_object(apis["wikipedia"], "w/api.php", params)
            if isinstance(document.get("error"), dict):
                info = document["error"].get("info", "unknown error")
                raise ApiError("rejected", f"wikipedia: {info}", source="wikipedia")
            block = document.get("query")
            if not isinstance(block, dict) or not isinstance(block.get("search"), list):
                raise response.bad("no query.search list")
        except ApiError as exc:
            return exc.to_result()
        total = (block.get("searchinfo") or {}).get("totalhits")
        hits = [
            {
                "title": str(hit.get("title", "")),
                "url": f"{base_of('wikipedia')}/wiki/"
                + quote(str(hit.get("title", "")).replace(" ", "_")),
                "snippet": html.unescape(_TAG.sub("", str(hit.get("snippet", "")))),
                "words": hit.get("wordcount"),
            }
            for hit in block["search"]
            if isinstance(hit, dict)
        ]
        more = (document.get("continue") or {}).get("sroffset")
        next_cursor = str(more) if isinstance(more, int) else None
        items = [
            f"{n}. {h['title']} ({h['words']} words)\n   {h['url']}\n   {h['snippet']}"
            for n, h in enumerate(hits, start=offset + 1)
        ]
        header = f"{len(hits)} Wikipedia hits for {query!r} ({_total(total)}):"
        text = _page(header, items, next_cursor, _source_line(response, base_of("wikipedia")))
        data = {"query": query, "total": total, "results": hits, "next_cursor": next_cursor}
        return ToolResult.ok(text, data=data)

    @tool(
        read_only=True,
        idempotent=True,
        open_world=True,
        owner="builtin",
        examples=[{"title": "Ada Lovelace"}],
    )
    async def wikipedia_summary(
        title: Annotated[str, Field(min_length=1, max_length=300)],
    ) -> ToolResult:
        """The lead summary of one Wikipedia article (Wikimedia REST API): a short plain-text
        extract, the one-line description and the article URL. Needs the exact title (use
        wikipedia_search first when unsure); redirects are followed. Only the lead section —
        read the article URL with fetch_url for the rest. About 0.5 s; cached for an hour.

        Args:
            title: The article title, e.g. `Ada Lovelace`.
        """
        path = "api/rest_v1/page/summary/" + quote(title.replace(" ", "_"), safe="")
        try:
            response, document = await _json_object(apis["wikipedia"], path, None, "extract")
        except ApiError as exc:
            missing = exc.kind == "not_found"
            hint = "; no article has exactly this title — try wikipedia_search"
            return exc.to_result(hint=hint if missing else "")
        urls = document.get("content_urls") or {}
        url = str((urls.get("desktop") or {}).get("page", ""))
        kind = str(document.get("type", "standard"))
        lines = [f"# {document.get('title', title)}"]
        if document.get("description"):
            lines.append(f"({document['description']})")
        if kind == "disambiguation":
            lines.append("This is a disambiguation page: the title names several articles.")
        lines += [str(document["extract"]), f"Article: {url} (only the lead section is shown)"]
        lines.append(_source_line(response, base_of("wikipedia")))
        data = {"title": document.get("title"), "type": kind, "url": url}
        return ToolResult.ok("\n".join(lines), data=data | {"extract": document["extract"]})

    @tool(
        read_only=True,
        idempotent=True,
        open_world=True,
        owner="builtin",
        examples=[
            {"query": "all:transformer AND cat:cs.CL"},
            {"query": "au:hinton", "sort": "submittedDate", "cursor": "10"},
        ],
    )
    async def arxiv_search(
        query: Annotated[str, Field(min_length=1, max_length=500)],
        cursor: Cursor | None = None,
        limit: Annotated[int, Field(ge=1, le=50)] = 10,
        sort: Literal["relevance", "submittedDate", "lastUpdatedDate"] = "relevance",
    ) -> ToolResult:
        """Search arXiv papers (arXiv's Atom query API). Query syntax: field prefixes `ti:`,
        `au:`, `abs:`, `cat:`, `all:` joined with AND / OR / ANDNOT, e.g.
        `ti:diffusion AND cat:cs.CV`; plain words search all fields. arXiv asks for at most
        one request every 3 s, so a call may wait that long first.

        Returns: numbered papers with arXiv id, title, authors, first submission date, primary
        category and the start of the abstract (first 300 characters, marked when cut; the full
        abstract is in the result data), the total, and a cursor. Get a paper's PDF with
        arxiv_download.

        Args:
            query: An arXiv search query, e.g. `all:transformer AND cat:cs.CL`.
            cursor: The cursor from a previous result for the next page.
            limit: Papers per page (1-50).
            sort: Order: relevance, submittedDate or lastUpdatedDate (newest first).
        """
        offset = int(cursor or 0)
        params = {"search_query": query, "start": str(offset), "max_results": str(limit)}
        params |= {"sortBy": sort, "sortOrder": "descending"}
        try:
            response = await apis["arxiv"].get("query", params=params)
            feed = _parse_atom(response)
            entries = feed.findall("a:entry", _ATOM)
            for entry in entries:
                if "/api/errors" in _text(entry, "a:id"):
                    message = f"arxiv refused the query: {_text(entry, 'a:summary')}"
                    raise ApiError("rejected", message, source="arxiv")
        except ApiError as exc:
            return exc.to_result()
        papers = [_paper(entry) for entry in entries]
        total_text = _text(feed, "os:totalResults")
        total = int(total_text) if total_text.isdigit() else None
        end = offset + len(papers)
        next_cursor = str(end) if papers and total is not None and end < total else None
        items = [_paper_text(n, p) for n, p in enumerate(papers, start=offset + 1)]
        header = f"{len(papers)} arXiv papers for {query!r} ({_total(total)}):"
        text = _page(header, items, next_cursor, _source_line(response, base_of("arxiv")))
        data = {"query": query, "total": total, "results": papers, "next_cursor": next_cursor}
        return ToolResult.ok(text, data=data)

    @tool(
        open_world=True,
        owner="builtin",
        examples=[{"paper_id": "1706.03762", "path": "papers/attention.pdf"}],
    )
    async def arxiv_download(
        paper_id: Annotated[str, Field(max_length=40)], path: str, ctx: ToolContext
    ) -> ToolResult:
        """Download an arXiv paper's PDF into a new workspace file (then read it with a document
        tool). Refuses ids that are not arXiv ids (`2401.01234`, `2401.01234v2`,
        `hep-th/9901001`), an existing file, paths outside the workspace, and anything that is
        not a PDF or is over the size limit (50 MB by default). Up to a minute on big papers.

        Returns: the bytes saved and the source URL.

        Args:
            paper_id: The arXiv id, e.g. `1706.03762` or `1706.03762v7`.
            path: Workspace-relative destination, e.g. `papers/attention.pdf`.
        """
        if not _ARXIV_ID.fullmatch(paper_id):
            return ToolResult.fail(
                f"{paper_id!r} is not an arXiv id (like 2401.01234, 2401.01234v2 or "
                "hep-th/9901001); nothing was downloaded"
            )
        root = workspace_root or ctx.workspace
        if root is None:
            return ToolResult.fail("arxiv_download needs a workspace, and this agent has none")
        try:
            target = Workspace(root).resolve(path)
        except WorkspaceError as exc:
            return ToolResult.fail(str(exc), data=exc.to_data())
        if target.exists():
            return ToolResult.fail(f"{path!r} already exists; choose another path")
        try:
            response = await apis["arxiv-pdf"].get(paper_id, cache=False)
            if not response.body.startswith(b"%PDF-"):
                raise response.bad(f"not a PDF (it began with {response.body[:20]!r})")
        except ApiError as exc:
            return exc.to_result()
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, response.body)
        size = len(response.body)
        return ToolResult.ok(
            f"saved {size:,} bytes (the PDF of arXiv:{paper_id}) from {response.url} to {path}",
            data={"path": path, "bytes": size, "url": response.url, "paper_id": paper_id},
        )

    return [
        weather_forecast,
        fx_rates,
        stock_quote,
        wikipedia_search,
        wikipedia_summary,
        arxiv_search,
        arxiv_download,
    ]
