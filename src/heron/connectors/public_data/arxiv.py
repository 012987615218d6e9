"""arXiv: `arxiv_search` (the Atom query API) and `arxiv_download` (a paper's PDF, size-capped,
into the workspace)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from xml.etree import ElementTree

from pydantic import Field

from heron.connectors.http_api import ApiError, ApiResponse, HttpApi
from heron.connectors.public_data.sources import Cursor, describe_total, page, source_line
from heron.safety.workspace import Workspace, WorkspaceError, atomic_write
from heron.tools.definition import Tool, ToolContext, ToolResult
from heron.tools.function_tool import tool

__all__ = ["arxiv_tools"]

_ATOM = {"a": "http://www.w3.org/2005/Atom", "os": "http://a9.com/-/spec/opensearch/1.1/"}
_ATOM["arxiv"] = "http://arxiv.org/schemas/atom"
_ARXIV_ID = re.compile(r"(\d{4}\.\d{4,5}|[a-z-]+(\.[A-Z]{2})?/\d{7})(v\d+)?")


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


def arxiv_tools(
    apis: Mapping[str, HttpApi], base_of: Callable[[str], str], *, workspace_root: Path | None
) -> list[Tool]:
    """`arxiv_search` (the `arxiv` source) and `arxiv_download` (`arxiv-pdf`), which
    saves into `workspace_root`, or the agent's workspace when that is None."""

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
        header = f"{len(papers)} arXiv papers for {query!r} ({describe_total(total)}):"
        text = page(header, items, next_cursor, source_line(response, base_of("arxiv")))
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

    return [arxiv_search, arxiv_download]
