"""Wikipedia: `wikipedia_search` (MediaWiki Action API search) and `wikipedia_summary`
(Wikimedia REST page summaries)."""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping
from typing import Annotated
from urllib.parse import quote

from pydantic import Field

from heron.connectors.http_api import ApiError, HttpApi
from heron.connectors.public_data.sources import (
    Cursor,
    describe_total,
    json_object,
    page,
    source_line,
)
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool

__all__ = ["wikipedia_tools"]

_TAG = re.compile(r"<[^>]+>")


def wikipedia_tools(apis: Mapping[str, HttpApi], base_of: Callable[[str], str]) -> list[Tool]:
    """`wikipedia_search` and `wikipedia_summary` over the `wikipedia` source."""

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
            response, document = await json_object(apis["wikipedia"], "w/api.php", params)
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
        header = f"{len(hits)} Wikipedia hits for {query!r} ({describe_total(total)}):"
        text = page(header, items, next_cursor, source_line(response, base_of("wikipedia")))
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
            response, document = await json_object(apis["wikipedia"], path, None, "extract")
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
        lines.append(source_line(response, base_of("wikipedia")))
        data = {"title": document.get("title"), "type": kind, "url": url}
        return ToolResult.ok("\n".join(lines), data=data | {"extract": document["extract"]})

    return [wikipedia_search, wikipedia_summary]
