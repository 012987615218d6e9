"""web_search: the SearXNG JSON API against a local server, the local back end, the errors."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from heron import ToolContext, ToolResult
from heron.tools.definition import Tool
from heron.toolsets.knowledge import KnowledgeBase
from heron.toolsets.search import (
    KnowledgeSearchBackend,
    SearchBackend,
    SearchError,
    SearxngBackend,
    search_tools,
)

RESULTS = [
    {
        "url": f"https://example.org/doc/{n}",
        "title": f"Document {n}",
        "content": f"About topic {n}.",
        "engine": "wikipedia",
    }
    for n in range(25)
]


class Searx:
    """Speaks the SearXNG `/search?format=json` API: ten results per page, 25 in all."""

    def __init__(self) -> None:
        self.requests: list[dict[str, list[str]]] = []
        self.reply: tuple[int, bytes] | None = None  # a canned answer instead of the API
        searx = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = parse_qs(parts.query)
                searx.requests.append(query)
                status, body = searx.reply or searx.answer(parts.path, query)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                """Keep the test output clean."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, bytes]:
        if path != "/search" or query.get("format") != ["json"]:
            return 403, b"Forbidden"
        page = int(query.get("pageno", ["1"])[0])
        document = {
            "query": query["q"][0],
            "number_of_results": len(RESULTS),
            "results": RESULTS[(page - 1) * 10 : page * 10],
            "answers": [],
            "suggestions": [],
            "unresponsive_engines": [["duckduckgo", "timeout"]] if page == 3 else [],
        }
        return 200, json.dumps(document).encode()


@pytest.fixture
def searx() -> Iterator[Searx]:
    searx = Searx()
    thread = threading.Thread(target=searx.server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield searx
    searx.server.shutdown()
    searx.server.server_close()
    thread.join(5)


async def search(backend: SearchBackend | None, **arguments: Any) -> ToolResult:
    (tool,) = search_tools(backend=backend)
    return await run(tool, **arguments)


async def run(tool: Tool, **arguments: Any) -> ToolResult:
    return await tool.execute(tool.validate(arguments), ToolContext(call_id="c1", turn_id="t1"))


async def test_searxng_results_are_structured_and_paged_by_cursor(searx: Searx) -> None:
    backend = SearxngBackend(searx.base + "/")
    first = await search(backend, query="topic")
    assert first.success, first.error
    assert first.data["total"] == 25 and first.data["next_cursor"] == "2"
    assert first.data["results"][0] == {
        "title": "Document 0",
        "url": "https://example.org/doc/0",
        "snippet": "About topic 0.",
    }
    assert first.output.startswith("10 results for 'topic' (25 in total; back end: searxng):\n")
    assert "1. Document 0\n   https://example.org/doc/0\n   About topic 0." in first.output
    assert first.output.endswith('Next page: pass cursor="2".')

    third = await search(backend, query="topic", cursor="3")
    assert [r["title"] for r in third.data["results"]] == [f"Document {n}" for n in range(20, 25)]
    assert "Note: engines that did not answer: duckduckgo" in third.output
    past = await search(backend, query="topic", cursor="4")
    assert past.success and past.data["results"] == [] and past.data["next_cursor"] is None
    assert [(r["q"], r["format"], r["pageno"]) for r in searx.requests] == [
        (["topic"], ["json"], [str(page)]) for page in (1, 3, 4)
    ]


async def test_garbage_from_the_search_server_is_a_clear_error(searx: Searx) -> None:
    searx.reply = (200, b"<html>Internal error</html>")
    result = await search(SearxngBackend(searx.base), query="topic")
    assert not result.success
    error = result.error or ""
    assert error.startswith(f"the SearXNG back end at {searx.base}/search did not return JSON")
    assert "'<html>Internal error</html>'" in error


async def test_json_without_results_is_a_clear_error(searx: Searx) -> None:
    searx.reply = (200, b'{"error": "oops"}')
    result = await search(SearxngBackend(searx.base), query="topic")
    assert not result.success and "JSON without a 'results' list" in (result.error or "")


async def test_a_forbidden_json_format_names_the_likely_cause(searx: Searx) -> None:
    searx.reply = (403, b"Forbidden")
    result = await search(SearxngBackend(searx.base), query="topic")
    assert not result.success
    assert "HTTP 403 Forbidden (is `json` enabled in the instance's search.formats?)" in (
        result.error or ""
    )


async def test_an_unreachable_search_server_is_a_clear_error() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = await search(SearxngBackend(f"http://127.0.0.1:{port}"), query="topic")
    assert not result.success
    assert (result.error or "").startswith(
        f"cannot reach the SearXNG back end at http://127.0.0.1:{port}/search: ConnectError"
    )


async def test_a_cursor_that_was_never_issued_is_refused(searx: Searx) -> None:
    result = await search(SearxngBackend(searx.base), query="topic", cursor="next")
    assert not result.success and "was not issued by this search" in (result.error or "")
    assert searx.requests == []


async def test_no_back_end_configured_is_a_clear_error_result() -> None:
    result = await search(None, query="anything")
    assert not result.success
    assert (result.error or "").startswith("web search is not configured")


async def test_the_local_back_end_searches_the_knowledge_folder(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for n in range(3):
        (folder / f"q{n}.md").write_text(f"# Quarter {n}\n\nRevenue grew.\n", encoding="utf-8")
    backend = KnowledgeSearchBackend(KnowledgeBase(folder, tmp_path / "state"), page_size=2)
    first = await search(backend, query="revenue")
    assert first.data["total"] == 3 and first.data["next_cursor"] == "2"
    assert first.data["results"][0] == {
        "title": "Quarter 0",
        "url": "q0.md#L1-L3",
        "snippet": "# Quarter 0 Revenue grew.",
    }
    rest = await backend.search("revenue", "2")
    assert [h.url for h in rest.hits] == ["q2.md#L1-L3"] and rest.next_cursor is None
    with pytest.raises(SearchError, match="no searchable words"):
        await backend.search("the", None)


def test_web_search_is_read_only_and_open_world() -> None:
    (tool,) = search_tools(backend=None)
    annotations = tool.spec.annotations
    assert annotations.read_only and annotations.open_world and not annotations.destructive
