"""Search tools: `web_search` over a pluggable back end, and `knowledge_search` over local files.

Back ends implement `SearchBackend`: one page of structured hits per call, an opaque cursor for
the next page and the total count when the back end knows it. Two ship here: `SearxngBackend`
(the JSON API of a SearXNG instance, `/search?q=…&format=json&pageno=N`) and
`KnowledgeSearchBackend` (the local knowledge base, for offline set-ups).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from heron._support.limits import parse_json
from heron.errors import HeronError
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool
from heron.toolsets.knowledge import KnowledgeBase, KnowledgeError, KnowledgeResults

__all__ = [
    "KnowledgeSearchBackend",
    "SearchBackend",
    "SearchError",
    "SearchHit",
    "SearchPage",
    "SearxngBackend",
    "knowledge_tools",
    "render_knowledge",
    "search_tools",
]


class SearchError(HeronError):
    """A back end could not answer: unreachable, an error status, or a malformed response."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchHit:
    """One candidate: what it is called, where it is, and the text around the match."""

    title: str
    url: str
    snippet: str


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchPage:
    """One page of hits from a back end."""

    hits: tuple[SearchHit, ...]
    total: int | None
    """Matches in all pages, when the back end reports it."""
    next_cursor: str | None
    notes: tuple[str, ...] = ()
    """Anything the reader should know: skipped malformed results, silent engines."""


class SearchBackend(Protocol):
    """Where `web_search` gets its results."""

    @property
    def name(self) -> str: ...

    async def search(self, query: str, cursor: str | None) -> SearchPage:
        """One page of results; `cursor` is None or a `next_cursor` this back end issued.

        Raises `SearchError` with a sentence the model can act on.
        """
        ...


class SearxngBackend:
    """A SearXNG instance's JSON API. The instance must allow `json` in `search.formats`."""

    name = "searxng"

    def __init__(
        self, base_url: str, *, timeout_s: float = 10.0, language: str | None = None
    ) -> None:
        self.endpoint = base_url.rstrip("/") + "/search"
        self.timeout_s = timeout_s
        self.language = language

    async def search(self, query: str, cursor: str | None) -> SearchPage:
        page = 1 if cursor is None else _cursor_number(cursor)
        params = {"q": query, "format": "json", "pageno": str(page)}
        if self.language:
            params["language"] = self.language
        where = f"the SearXNG back end at {self.endpoint}"
        try:
            # trust_env=False: the configured URL is the one contacted, never an inherited proxy.
            async with httpx.AsyncClient(timeout=self.timeout_s, trust_env=False) as client:
                response = await client.get(self.endpoint, params=params)
        except httpx.TimeoutException:
            raise SearchError(f"{where} did not answer within {self.timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            raise SearchError(f"cannot reach {where}: {type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            hint = {403: " (is `json` enabled in the instance's search.formats?)"}
            hint[429] = " (rate limited; try again later)"
            status = f"{response.status_code} {response.reason_phrase}".strip()
            raise SearchError(f"{where} answered HTTP {status}{hint.get(response.status_code, '')}")
        return _parse_searxng(response.content, page, where)


def _cursor_number(cursor: str) -> int:
    """The positive number inside a cursor this module issued (a page or an offset)."""
    if cursor.isdigit() and int(cursor) >= 1:
        return int(cursor)
    raise SearchError(f"cursor {cursor!r} was not issued by this search; omit it for page 1")


def _parse_searxng(body: bytes, page: int, where: str) -> SearchPage:
    try:
        document = parse_json(body)  # within heron's input limits
    except ValueError as exc:
        start = body[:60].decode("utf-8", errors="replace")
        raise SearchError(f"{where} did not return JSON ({exc}); it began with {start!r}") from None
    results = document.get("results") if isinstance(document, dict) else None
    if not isinstance(results, list):
        raise SearchError(f"{where} returned JSON without a 'results' list")
    hits: list[SearchHit] = []
    for item in results:
        if isinstance(item, dict) and isinstance(url := item.get("url"), str):
            title, content = item.get("title"), item.get("content")
            hits.append(
                SearchHit(
                    title=title if isinstance(title, str) and title else url,
                    url=url,
                    snippet=content if isinstance(content, str) else "",
                )
            )
    notes: list[str] = []
    if len(hits) < len(results):
        notes.append(f"{len(results) - len(hits)} malformed results (no URL) were skipped")
    engines = document.get("unresponsive_engines")
    silent = [str(e[0]) for e in engines or () if isinstance(e, list) and e]
    if silent:
        notes.append("engines that did not answer: " + ", ".join(silent))
    reported = document.get("number_of_results")
    # SearXNG reports 0 when its engines give no estimate, even next to a page of results.
    known = isinstance(reported, int | float) and reported > 0
    total = int(reported) if known else (0 if not hits and page == 1 else None)
    return SearchPage(
        hits=tuple(hits),
        total=total,
        next_cursor=str(page + 1) if hits else None,
        notes=tuple(notes),
    )


class KnowledgeSearchBackend:
    """The local knowledge base as a search back end; hits point at file line ranges."""

    name = "local"

    def __init__(self, kb: KnowledgeBase, *, page_size: int = 10) -> None:
        self.kb = kb
        self.page_size = page_size

    async def search(self, query: str, cursor: str | None) -> SearchPage:
        offset = 0 if cursor is None else _cursor_number(cursor)
        try:
            found = await asyncio.to_thread(
                self.kb.search, query, offset=offset, limit=self.page_size
            )
        except KnowledgeError as exc:
            raise SearchError(str(exc)) from None
        hits = tuple(
            SearchHit(
                title=h.chunk.heading or h.chunk.path,
                url=f"{h.chunk.path}#L{h.chunk.start_line}-L{h.chunk.end_line}",
                snippet=h.snippet,
            )
            for h in found.hits
        )
        following = found.next_offset
        return SearchPage(
            hits=hits, total=found.total, next_cursor=None if following is None else str(following)
        )


def search_tools(*, backend: SearchBackend | None) -> list[Tool]:
    """`web_search` over `backend`; with None the tool exists and explains it is not set up."""

    @tool(
        read_only=True,
        idempotent=True,
        open_world=True,
        owner="builtin",
        examples=[
            {"query": "python asyncio TaskGroup cancellation"},
            {"query": "python asyncio TaskGroup cancellation", "cursor": "2"},
        ],
    )
    async def web_search(query: str, cursor: str | None = None) -> ToolResult:
        """Search the web and get candidate pages (title, URL, snippet). Use it to find
        sources; then read the promising ones with fetch_url. Snippets are short excerpts,
        not the page: never answer from a snippet alone when details matter.

        Cost: one search request (about 1-3 s). Cannot search inside a given site's private
        pages or local files (use knowledge_search for the team's documents).

        Returns: numbered results, the total count when the search engine reports it, and a
        cursor for the next page.

        Args:
            query: Keywords or a phrase, e.g. `bm25 ranking formula k1 b`; operators such as
                quotes and `site:` work when the configured engine supports them.
            cursor: The `cursor` from a previous result for the next page; omit for page 1.
        """
        if backend is None:
            return ToolResult.fail(
                "web search is not configured: no search back end is set up (an operator can "
                "configure a SearXNG instance or a local index). Use fetch_url for a known URL "
                "or knowledge_search for local documents."
            )
        try:
            page = await backend.search(query, cursor)
        except SearchError as exc:
            return ToolResult.fail(str(exc))
        return _render_page(query, page, backend.name)

    return [web_search]


def _render_page(query: str, page: SearchPage, backend: str) -> ToolResult:
    total = "total unknown" if page.total is None else f"{page.total:,} in total"
    data: dict[str, Any] = {
        "query": query,
        "total": page.total,
        "results": [{"title": h.title, "url": h.url, "snippet": h.snippet} for h in page.hits],
        "next_cursor": page.next_cursor,
        "notes": list(page.notes),
    }
    if not page.hits:
        text = f"No results for {query!r} on this page ({total}; back end: {backend})."
        return ToolResult.ok("\n".join([text, *page.notes]), data=data)
    lines = [f"{len(page.hits)} results for {query!r} ({total}; back end: {backend}):"]
    for number, hit in enumerate(page.hits, start=1):
        snippet = f"\n   {hit.snippet}" if hit.snippet else ""
        lines.append(f"{number}. {hit.title}\n   {hit.url}{snippet}")
    lines.extend(f"Note: {note}" for note in page.notes)
    if page.next_cursor:
        lines.append(f'Next page: pass cursor="{page.next_cursor}".')
    return ToolResult.ok("\n".join(lines), data=data)


# --- knowledge_search -------------------------------------------------------------------------


def knowledge_tools(kb: KnowledgeBase, *, page_size: int = 8) -> list[Tool]:
    """`knowledge_search` over one knowledge base."""

    # A sync tool on purpose: indexing reads files and builds the BM25 model, so it runs in a
    # worker thread (the default for sync tools); the knowledge base's lock serialises calls.
    @tool(
        read_only=True,
        idempotent=True,
        owner="builtin",
        examples=[{"query": "rollback production deploy"}, {"query": "vpn setup", "cursor": "8"}],
    )
    def knowledge_search(query: str, cursor: str | None = None) -> ToolResult:
        """Search the local knowledge base (the team's documents) by keywords. Use it before
        the web for internal procedures, notes and decisions.

        Ranking is BM25 over words, not meaning: use the words the passage would contain,
        not a question ("vpn certificate renew", not "how do I fix my vpn?"). Searches only
        the .md, .txt, .rst and .html files of the configured folder; cannot read PDFs. Cheap:
        re-reads only files that changed since the last search.

        Returns: passages ranked by score, each cited as path and line range with its headings
        and a snippet; the total number of matching passages and a cursor for the next page.
        Says explicitly when nothing matches.

        Args:
            query: Keywords, e.g. `invoice approval limit`.
            cursor: The `cursor` from a previous result for the next page; omit for page 1.
        """
        if cursor is not None and not cursor.isdigit():
            return ToolResult.fail(f"cursor {cursor!r} was not issued by this search; omit it")
        try:
            found = kb.search(query, offset=int(cursor or 0), limit=page_size)
        except KnowledgeError as exc:
            return ToolResult.fail(str(exc))
        return render_knowledge(found)

    return [knowledge_search]


_NOT_INDEXED_SHOWN = 20
"""Documents not indexed listed in a result's data; the count says how many in all."""


def render_knowledge(found: KnowledgeResults) -> ToolResult:
    """The tool result for one page of knowledge-base hits, with an explicit "nothing found"."""
    scope = f"{found.files} files, {found.chunks} passages indexed"
    data: dict[str, Any] = {"query": found.query, "total": found.total, "next_cursor": None}
    if found.refused:
        count = len(found.refused)
        scope += f"; {count} file{'' if count == 1 else 's'} not indexed"
        listed = found.refused[:_NOT_INDEXED_SHOWN]
        data["not_indexed"] = [{"path": rel, "why": why} for rel, why in listed]
    if not found.hits:
        if found.total:
            return ToolResult.fail(f"cursor {found.offset} is past the last of {found.total} hits")
        return ToolResult.ok(
            f"Nothing found: no passage in the knowledge base ({scope}) matches "
            f"{found.query!r}. The search matches words, not meaning: try other words.",
            data=data | {"hits": []},
        )
    first, last = found.offset + 1, found.offset + len(found.hits)
    lines = [f"{found.total} passages match {found.query!r}; showing {first}-{last} ({scope})."]
    hits: list[dict[str, Any]] = []
    for number, hit in enumerate(found.hits, start=first):
        c = hit.chunk
        heading = f" — {c.heading}" if c.heading else ""
        lines.append(
            f"{number}. {c.path} lines {c.start_line}-{c.end_line} (score {hit.score:g})"
            f"{heading}\n   {hit.snippet}"
        )
        hits.append(
            {"path": c.path, "start_line": c.start_line, "end_line": c.end_line}
            | {"heading": c.heading, "score": hit.score, "snippet": hit.snippet}
        )
    if found.next_offset is not None:
        data["next_cursor"] = str(found.next_offset)
        lines.append(f'More: pass cursor="{found.next_offset}".')
    return ToolResult.ok("\n".join(lines), data=data | {"hits": hits})
