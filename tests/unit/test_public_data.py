"""Public data tools against a loopback server speaking each source's documented API shapes
(Open-Meteo, Frankfurter, Stooq CSV, MediaWiki/Wikimedia REST, arXiv Atom), plus the
perception catalogue."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from heron import Agent, ScriptedModel, tool
from heron.connectors.public_data import (
    DEFAULT_SOURCES,
    perception_catalogue_section,
    perception_kind,
    public_data_tools,
)
from heron.messages import ToolResultMessage
from heron.tools.definition import Tool
from support.clock import FakeTime
from support.connectors import LOCAL, ApiServer, Reply, closed_port, run
from support.engine import Events, call, calls_turn

PREFIX = {
    "open-meteo": "/om/v1",
    "open-meteo-geocoding": "/geo/v1",
    "frankfurter": "/fx/v1",
    "stooq": "/stooq",
    "wikipedia": "/wp",
    "arxiv": "/arxiv/api",
    "arxiv-pdf": "/arxiv/pdf",
}
FORECAST = {
    "latitude": 52.52,
    "longitude": 13.42,
    "timezone": "Europe/Berlin",
    "current_units": {"temperature_2m": "°C", "precipitation": "mm", "wind_speed_10m": "km/h"},
    "current": {
        "time": "2024-03-15T14:00",
        "temperature_2m": 12.3,
        "relative_humidity_2m": 61,
        "precipitation": 0.0,
        "weather_code": 2,
        "wind_speed_10m": 10.8,
    },
    "daily_units": {"temperature_2m_max": "°C", "precipitation_sum": "mm"},
    "daily": {
        "time": ["2024-03-15", "2024-03-16"],
        "weather_code": [2, 61],
        "temperature_2m_max": [14.2, 11.0],
        "temperature_2m_min": [6.1, 5.5],
        "precipitation_sum": [0.0, 4.2],
    },
}
ATOM = """<?xml version="1.0" encoding="UTF-8"?>
<feed xmlns="http://www.w3.org/2005/Atom" xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/"
      xmlns:arxiv="http://arxiv.org/schemas/atom">
  <title>arXiv Query</title>
  <opensearch:totalResults>42</opensearch:totalResults>
  <opensearch:startIndex>0</opensearch:startIndex>
  <entry>
    <id>http://arxiv.org/abs/1706.03762v7</id>
    <published>2017-06-12T17:57:34Z</published>
    <title>Attention Is All
      You Need</title>
    <summary>{summary}</summary>
    <author><name>Ashish Vaswani</name></author>
    <author><name>Noam Shazeer</name></author>
    <link title="pdf" href="http://arxiv.org/pdf/1706.03762v7" rel="related"/>
    <arxiv:primary_category term="cs.CL" scheme="http://arxiv.org/schemas/atom"/>
  </entry>
</feed>"""


def build(server_base: str, fake_time: FakeTime, root: Path | None = None) -> dict[str, Tool]:
    sources = {
        name: dataclasses.replace(source, base_url=server_base + PREFIX[name])
        for name, source in DEFAULT_SOURCES.items()
    }
    tools = public_data_tools(
        policy=LOCAL,
        sources=sources,
        workspace_root=root,
        **fake_time.seams,
    )
    return {t.spec.name: t for t in tools}


async def test_weather_for_a_place_geocodes_then_forecasts(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    place = {"name": "Berlin", "latitude": 52.52437, "longitude": 13.41053, "country": "Germany"}
    api_server.on("GET", "/geo/v1/search", Reply(body={"results": [place]}))
    api_server.on("GET", "/om/v1/forecast", Reply(body=FORECAST))
    result = await run(
        build(api_server.base, fake_time), "weather_forecast", place="Berlin", days=2
    )
    assert result.success, result.error
    forecast = api_server.hits("/om/v1/forecast")[0].query
    assert forecast["latitude"] == "52.52437" and forecast["timezone"] == "auto"
    assert forecast["forecast_days"] == "2" and "temperature_2m_max" in forecast["daily"]
    assert "Weather for Berlin, Germany (52.52437, 13.41053)" in result.output
    assert "Now (2024-03-15T14:00): 12.3 °C, humidity 61%" in result.output
    assert "2024-03-16: 5.5–11.0 °C, 4.2 mm, light rain" in result.output
    assert "Source: open-meteo" in result.output


async def test_weather_for_an_unknown_place_says_so(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    api_server.on("GET", "/geo/v1/search", Reply(body={"generationtime_ms": 0.1}))
    result = await run(build(api_server.base, fake_time), "weather_forecast", place="Atlantis")
    assert not result.success and "no place named 'Atlantis'" in (result.error or "")
    assert api_server.hits("/om/v1/forecast") == []


async def test_weather_needs_a_place_or_both_coordinates(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    result = await run(build(api_server.base, fake_time), "weather_forecast", latitude=52.5)
    assert not result.success and api_server.seen == []


async def test_forecast_without_daily_block_is_a_bad_response(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    api_server.on("GET", "/om/v1/forecast", Reply(body={"current": {}}))
    result = await run(
        build(api_server.base, fake_time), "weather_forecast", latitude=1.0, longitude=2.0
    )
    assert not result.success
    assert result.data["error"] == "bad_response" and "daily" in (result.error or "")


async def test_fx_rates_convert_and_name_the_date_actually_used(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    body = {
        "amount": 1.0,
        "base": "USD",
        "date": "2024-03-15",
        "rates": {"EUR": 0.918, "GBP": 0.78},
    }
    api_server.on("GET", "/fx/v1/2024-03-16", Reply(body=body))
    result = await run(
        build(api_server.base, fake_time),
        "fx_rates",
        base="USD",
        symbols=["EUR", "GBP", "XYZ"],
        amount=100,
        date="2024-03-16",
    )
    assert result.success, result.error
    assert api_server.seen[0].query == {"base": "USD", "symbols": "EUR,GBP,XYZ"}
    assert "1 USD = 0.918 EUR; 100 USD = 91.8000 EUR" in result.output
    assert "Unavailable: XYZ" in result.output
    assert "no rates were published on 2024-03-16; these are of 2024-03-15" in result.output


async def test_fx_rates_are_served_from_the_cache_and_say_how_old(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    api_server.on(
        "GET",
        "/fx/v1/latest",
        Reply(body={"base": "EUR", "date": "2024-03-15", "rates": {"USD": 1.09}}),
    )
    tools = build(api_server.base, fake_time)
    first = await run(tools, "fx_rates", symbols=["USD"])
    fake_time.advance(120)
    second = await run(tools, "fx_rates", symbols=["USD"])
    assert "fetched now" in first.output and "cached, 120 s old" in second.output
    assert len(api_server.seen) == 1


async def test_fx_rate_limit_with_long_retry_after_is_a_structured_error(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    api_server.on(
        "GET",
        "/fx/v1/latest",
        Reply(status=429, body={"message": "Too many"}, headers={"Retry-After": "3600"}),
    )
    result = await run(build(api_server.base, fake_time), "fx_rates")
    assert not result.success
    assert result.data == {"error": "rate_limited", "source": "frankfurter", "status": 429} | {
        "retry_after_s": 3600
    }
    assert fake_time.sleeps == []


async def test_stock_quotes_parse_the_csv_and_flag_unknown_symbols(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    def quote(seen: Any) -> Reply:
        symbol = seen.query["s"].upper()
        values = "2024-03-15,22:00:09,171.2,172.6,170.3,172.62,121752699"
        if symbol == "NOPE.US":
            values = "N/D,N/D,N/D,N/D,N/D,N/D,N/D"
        return Reply(body=f"Symbol,Date,Time,Open,High,Low,Close,Volume\r\n{symbol},{values}\r\n")

    api_server.on("GET", "/stooq/q/l/", fn=quote)
    result = await run(
        build(api_server.base, fake_time), "stock_quote", symbols=["AAPL.US", "nope.us"]
    )
    assert result.success, result.error
    assert api_server.seen[0].query == {"s": "aapl.us", "f": "sd2t2ohlcv", "h": "", "e": "csv"}
    assert "AAPL.US: close 172.62 (open 171.2" in result.output
    assert "NOPE.US: no data" in result.output


async def test_stock_quote_garbage_is_a_bad_response(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    api_server.on("GET", "/stooq/q/l/", Reply(body="<html>Please solve the captcha</html>"))
    result = await run(build(api_server.base, fake_time), "stock_quote", symbols=["aapl.us"])
    assert not result.success and result.data["error"] == "bad_response"
    assert "captcha" in (result.error or "")


async def test_wikipedia_search_strips_markup_and_pages_with_a_cursor(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    body = {
        "continue": {"sroffset": 12, "continue": "-||"},
        "query": {
            "searchinfo": {"totalhits": 431},
            "search": [
                {
                    "title": "Ada Lovelace",
                    "wordcount": 9000,
                    "snippet": '<span class="searchmatch">Ada</span> &amp; the engine',
                }
            ],
        },
    }
    api_server.on("GET", "/wp/w/api.php", Reply(body=body))
    result = await run(
        build(api_server.base, fake_time), "wikipedia_search", query="ada", cursor="10", limit=2
    )
    assert result.success, result.error
    sent = api_server.seen[0].query
    assert sent["srsearch"] == "ada" and sent["sroffset"] == "10" and sent["srlimit"] == "2"
    assert "11. Ada Lovelace (9000 words)" in result.output
    assert "Ada & the engine" in result.output and "searchmatch" not in result.output
    assert f"{api_server.base}/wp/wiki/Ada_Lovelace" in result.output
    assert result.data["total"] == 431 and result.data["next_cursor"] == "12"


async def test_wikipedia_api_error_object_is_reported(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    api_server.on(
        "GET", "/wp/w/api.php", Reply(body={"error": {"code": "x", "info": "Search is disabled"}})
    )
    result = await run(build(api_server.base, fake_time), "wikipedia_search", query="ada")
    assert not result.success and "Search is disabled" in (result.error or "")


async def test_wikipedia_summary_reads_the_lead_and_names_the_article(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    body = {
        "type": "standard",
        "title": "Ada Lovelace",
        "description": "English mathematician (1815–1852)",
        "extract": "Augusta Ada King, Countess of Lovelace, was an English mathematician.",
        "content_urls": {"desktop": {"page": "https://en.wikipedia.org/wiki/Ada_Lovelace"}},
    }
    api_server.on("GET", "/wp/api/rest_v1/page/summary/Ada_Lovelace", Reply(body=body))
    result = await run(build(api_server.base, fake_time), "wikipedia_summary", title="Ada Lovelace")
    assert result.success, result.error
    assert "# Ada Lovelace\n(English mathematician (1815–1852))" in result.output
    assert "Countess of Lovelace" in result.output
    assert "only the lead section is shown" in result.output


async def test_wikipedia_summary_of_a_missing_title_points_to_search(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    result = await run(build(api_server.base, fake_time), "wikipedia_summary", title="No such page")
    assert not result.success and result.data["error"] == "not_found"
    assert "wikipedia_search" in (result.error or "")
    assert api_server.seen[0].path == "/wp/api/rest_v1/page/summary/No_such_page"


async def test_arxiv_search_parses_the_feed_and_marks_a_cut_abstract(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    api_server.on("GET", "/arxiv/api/query", Reply(body=ATOM.format(summary="word " * 100)))
    result = await run(
        build(api_server.base, fake_time), "arxiv_search", query="all:attention", limit=1
    )
    assert result.success, result.error
    assert api_server.seen[0].query["search_query"] == "all:attention"
    assert "1. [1706.03762v7] Attention Is All You Need" in result.output
    assert "Ashish Vaswani, Noam Shazeer — 2017-06-12, cs.CL" in result.output
    assert "[first 300 of 499 characters]" in result.output
    assert len(result.data["results"][0]["abstract"]) == 499
    assert result.data["total"] == 42 and result.data["next_cursor"] == "1"


async def test_arxiv_requests_are_spaced_three_seconds_apart(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    api_server.on("GET", "/arxiv/api/query", Reply(body=ATOM.format(summary="short")))
    tools = build(api_server.base, fake_time)
    await run(tools, "arxiv_search", query="one")
    await run(tools, "arxiv_search", query="two")
    assert fake_time.sleeps == [3.0] and len(api_server.seen) == 2


async def test_arxiv_error_entry_and_doctype_are_refused(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    error_feed = ATOM.replace("http://arxiv.org/abs/1706.03762v7", "http://arxiv.org/api/errors#x")
    api_server.on(
        "GET",
        "/arxiv/api/query",
        Reply(body=error_feed.format(summary="malformed id")),
        Reply(body='<!DOCTYPE x [<!ENTITY a "aaaa">]><feed/>'),
    )
    tools = build(api_server.base, fake_time)
    refused = await run(tools, "arxiv_search", query="id:bad")
    assert not refused.success and "malformed id" in (refused.error or "")
    doctype = await run(tools, "arxiv_search", query="other")
    assert not doctype.success and doctype.data["error"] == "bad_response"


async def test_arxiv_download_saves_the_pdf_into_the_workspace(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    pdf = b"%PDF-1.4\n" + bytes(range(256)) * 4
    api_server.on(
        "GET",
        "/arxiv/pdf/1706.03762v7",
        Reply(body=pdf, headers={"Content-Type": "application/pdf"}),
    )
    api_server.on("GET", "/arxiv/pdf/2401.00001", Reply(body="<html>not here</html>"))
    tools = build(api_server.base, fake_time, tmp_path)
    saved = await run(tools, "arxiv_download", paper_id="1706.03762v7", path="papers/a.pdf")
    assert saved.success, saved.error
    assert (tmp_path / "papers" / "a.pdf").read_bytes() == pdf
    again = await run(tools, "arxiv_download", paper_id="1706.03762v7", path="papers/a.pdf")
    assert not again.success and "already exists" in (again.error or "")
    html = await run(tools, "arxiv_download", paper_id="2401.00001", path="b.pdf")
    assert not html.success and "not a PDF" in (html.error or "")
    assert not (tmp_path / "b.pdf").exists()


async def test_arxiv_download_refuses_bad_ids_and_escaping_paths(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    tools = build(api_server.base, fake_time, tmp_path)
    bad_id = await run(tools, "arxiv_download", paper_id="../../etc/passwd", path="x.pdf")
    escape = await run(tools, "arxiv_download", paper_id="1706.03762", path="../x.pdf")
    assert not bad_id.success and "not an arXiv id" in (bad_id.error or "")
    assert not escape.success
    assert api_server.seen == []


async def test_unreachable_source_is_a_structured_error(fake_time: FakeTime) -> None:
    tools = build(f"http://127.0.0.1:{closed_port()}", fake_time)
    result = await run(tools, "wikipedia_summary", title="Ada Lovelace")
    assert not result.success
    assert result.data == {"error": "unreachable", "source": "wikipedia"}


async def test_fx_rates_through_the_agent_loop(
    api_server: ApiServer, fake_time: FakeTime, events: Events
) -> None:
    api_server.on(
        "GET",
        "/fx/v1/latest",
        Reply(body={"base": "EUR", "date": "2024-03-15", "rates": {"USD": 1.09}}),
    )
    script = [calls_turn(call("fx_rates", "c1", symbols=["USD"])), {"text": "1.09"}]
    agent = Agent(
        model=ScriptedModel(script),
        tools=list(build(api_server.base, fake_time).values()),
        autonomy="full",
    )
    result = await agent.run("euro in dollars?", sink=events)
    outputs = {m.call_id: m.content for m in result.history if isinstance(m, ToolResultMessage)}
    assert "1 EUR = 1.09 USD" in outputs["c1"]
    events.assert_one_pair_per_call()


def test_catalogue_groups_tools_by_kind(api_server: ApiServer, fake_time: FakeTime) -> None:
    @tool(read_only=True)
    def read_document(path: str) -> str:
        """Extract the text of a PDF, Word or PowerPoint file. More words here.

        Args:
            path: A workspace path.
        """
        return path

    tools = [*build(api_server.base, fake_time).values(), read_document]
    section = perception_catalogue_section(tools)
    headings = [line for line in section.splitlines() if line.startswith("### ")]
    assert [h.split(" ")[1] for h in headings] == ["Search", "Read", "Parse", "Query"]
    parse = section.split("### Parse")[1].split("###")[0]
    assert "- read_document: Extract the text of a PDF, Word or PowerPoint file." in parse
    assert "More words" not in section
    query = section.split("### Query")[1]
    assert "- fx_rates:" in query and "- weather_forecast:" in query
    assert perception_kind("ocr_image") == "parse" and perception_kind("web_search") == "search"
    assert perception_catalogue_section([]) == ""
    assert "### Query" in perception_catalogue_section(
        [read_document], kinds={"read_document": "query"}
    )
