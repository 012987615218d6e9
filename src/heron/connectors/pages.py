"""Private "Notion-like" pages: search and read pages over the Notion public API.

`pages_tools(config, policy=...)` talks to `config.base_url` (`https://api.notion.com/v1`)
through `HttpApi`, with the integration token read from the environment variable
`config.token_env` at request time (sent as `Authorization: Bearer …`, never stored, shown or
logged) and the `Notion-Version` header.

- `pages_search`: `POST /search` filtered to pages, one page of results per call; Notion's
  `next_cursor` (when `has_more`) is returned as the cursor.
- `page_read`: `GET /pages/{id}` (title, properties, parent) then `GET /blocks/{id}/children`,
  rendered as readable text (headings, paragraphs, lists, to-dos, code, quotes, …). Nested
  blocks are fetched down to `config.max_depth`; the top level is paged with Notion's cursor.

Authorisation is the agent's, not the token's: a token may reach far more than the agent should
read. A page is readable only when its id is in `config.allowed_pages` or its direct parent
(page, database, data source or block id, or `"workspace"` for top-level pages) is in
`config.allowed_parents` — one level of the parent chain, so a grandchild of an allowed page
must be allowed itself. Search results outside the allowed pages are left out and counted.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

from heron.connectors.http_api import ApiError, ApiSource, Credential, HttpApi, RateLimit, Sleep
from heron.safety.url_policy import UrlPolicy
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool

__all__ = ["PagesConfig", "pages_tools"]

_UUID = r"[0-9a-fA-F]{8}(-?[0-9a-fA-F]{4}){3}-?[0-9a-fA-F]{12}"
PageId = Annotated[str, Field(pattern=f"^{_UUID}$")]
Cursor = Annotated[str, Field(min_length=1, max_length=500, pattern=r"^[A-Za-z0-9_=+/-]+$")]
_ID = re.compile(f"^{_UUID}$")
_HEADINGS = {"heading_1": "# ", "heading_2": "## ", "heading_3": "### "}
_PREFIXES = {"bulleted_list_item": "- ", "quote": "> ", "toggle": "▸ ", "paragraph": ""}
_MEDIA = ("image", "video", "audio", "file", "pdf")
_LINKS = ("bookmark", "embed", "link_preview")
# Child pages and databases are separate pages: listed, never read through their parent.
_NO_DESCENT = frozenset({"child_page", "child_database"})


@dataclass(frozen=True, kw_only=True, slots=True)
class PagesConfig:
    """Where the API is, which environment variable holds the token, and what may be read.

    At least one of `allowed_pages` / `allowed_parents` must be set: nothing is readable by
    default, whatever the token can reach."""

    base_url: str = "https://api.notion.com/v1"
    token_env: str = "NOTION_TOKEN"
    notion_version: str = "2022-06-28"
    allowed_pages: tuple[str, ...] = ()
    """Page ids the agent may read (with or without dashes)."""
    allowed_parents: tuple[str, ...] = ()
    """Parent ids whose direct child pages the agent may read; `"workspace"` allows the
    workspace's top-level pages."""
    max_depth: int = 3
    """How many levels of nested blocks `page_read` fetches below the top level."""
    timeout_s: float = 20.0
    max_wait_s: float = 10.0
    """Longest rate-limit wait absorbed by waiting."""
    requests_per_s: int = 3
    """Notion's documented average limit per integration."""

    def __post_init__(self) -> None:
        if not (self.allowed_pages or self.allowed_parents):
            raise ValueError("set allowed_pages and/or allowed_parents; none is readable")
        if self.max_depth < 0 or self.requests_per_s < 1:
            raise ValueError("max_depth must be >= 0 and requests_per_s >= 1")


def _obj(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one (Notion fields may be null)."""
    return value if isinstance(value, dict) else {}


def _norm(page_id: str) -> str:
    return page_id.replace("-", "").lower()


def _plain(rich: Any) -> str:
    """Notion rich text (`[{plain_text, href}, …]`) as plain text, links kept as `[text](url)`."""
    parts = []
    for span in rich if isinstance(rich, list) else []:
        if isinstance(span, dict):
            text, href = str(span.get("plain_text", "")), span.get("href")
            parts.append(f"[{text}]({href})" if href and href != text else text)
    return "".join(parts)


def _title(page: dict[str, Any]) -> str:
    for prop in _obj(page.get("properties")).values():
        if isinstance(prop, dict) and prop.get("type") == "title":
            return _plain(prop.get("title")) or "(untitled)"
    return "(untitled)"


def _property(prop: dict[str, Any]) -> str:
    """One page property's value as short text."""
    kind = str(prop.get("type", ""))
    value = prop.get(kind)
    if kind == "rich_text":
        return _plain(value)
    if kind in ("select", "status"):
        return str(_obj(value).get("name", ""))
    if kind == "multi_select":
        return ", ".join(str(v.get("name", "")) for v in value or [] if isinstance(v, dict))
    if kind == "date" and isinstance(value, dict):
        end = value.get("end")
        return str(value.get("start", "")) + (f" → {end}" if end else "")
    if kind == "checkbox":
        return "yes" if value else "no"
    if kind == "people":
        return ", ".join(
            str(p.get("name", p.get("id"))) for p in value or [] if isinstance(p, dict)
        )
    if kind in ("number", "url", "email", "phone_number", "created_time", "last_edited_time"):
        return "" if value is None else str(value)
    return f"({kind})"


def _page_summary(page: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": str(page.get("id", "")),
        "title": _title(page),
        "url": str(page.get("url", "")),
        "last_edited": str(page.get("last_edited_time", "")),
    }


def _block_text(block: dict[str, Any], number: int) -> list[str]:
    """One block as lines (before indentation); `number` is its place in a numbered list."""
    kind = str(block.get("type", ""))
    body = _obj(block.get(kind))
    text = _plain(body.get("rich_text"))
    if kind in _HEADINGS:
        return [_HEADINGS[kind] + text]
    if kind in _PREFIXES:
        return [_PREFIXES[kind] + text]
    if kind == "numbered_list_item":
        return [f"{number}. {text}"]
    if kind == "to_do":
        return [f"[{'x' if body.get('checked') else ' '}] {text}"]
    if kind == "callout":
        icon = _obj(body.get("icon")).get("emoji") or "!"
        return [f"> {icon} {text}"]
    if kind == "code":
        caption = _plain(body.get("caption"))
        fence = [f"```{body.get('language', '')}", *text.splitlines(), "```"]
        return fence + ([f"({caption})"] if caption else [])
    if kind == "divider":
        return ["---"]
    if kind == "equation":
        return [f"$${body.get('expression', '')}$$"]
    if kind in _NO_DESCENT:
        return [f"[{kind.removeprefix('child_')}: {body.get('title', '')} — id {block.get('id')}]"]
    if kind == "table_row":
        return [" | ".join(_plain(cell) for cell in body.get("cells") or [])]
    if kind in _MEDIA:
        where = _obj(body.get("external") or body.get("file")).get("url", "")
        caption = _plain(body.get("caption"))
        return [f"[{kind}: {caption or where}]"]
    if kind in _LINKS:
        return [f"[link: {body.get('url', '')}]"]
    return [text] if text else [f"[{kind or 'unknown'} block not shown]"]


def pages_tools(
    config: PagesConfig,
    *,
    policy: UrlPolicy,
    sleep: Sleep = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
) -> list[Tool]:
    """`pages_search` and `page_read` over the Notion API, limited to `config`'s pages."""
    source = ApiSource(
        name="notion",
        base_url=config.base_url,
        timeout_s=config.timeout_s,
        max_wait_s=config.max_wait_s,
        rate_limit=RateLimit(calls=config.requests_per_s, per_s=1.0),
        credential=Credential(env=config.token_env),
        headers={"Notion-Version": config.notion_version},
    )
    api = HttpApi(source, policy=policy, sleep=sleep, clock=clock, wall_clock=wall_clock)
    pages = {_norm(p) for p in config.allowed_pages}
    parents = {p if p == "workspace" else _norm(p) for p in config.allowed_parents}

    def allowed(page: dict[str, Any], requested: str | None = None) -> bool:
        if {_norm(str(page.get("id", ""))), _norm(requested or "")} & pages:
            return True
        parent = _obj(page.get("parent"))
        if parent.get("type") == "workspace" and "workspace" in parents:
            return True
        ids = {_norm(v) for k, v in parent.items() if k.endswith("_id") and isinstance(v, str)}
        return bool(ids & parents)

    async def listing(method: str, path: str, **options: Any) -> dict[str, Any]:
        """A Notion list object (`results`, `has_more`, `next_cursor`), shape-checked."""
        response = await api.send(method, path, **options)
        document = response.json()
        if not isinstance(document, dict) or not isinstance(document.get("results"), list):
            raise response.bad("no results list")
        document["results"] = [r for r in document["results"] if isinstance(r, dict)]
        return document

    def next_of(document: dict[str, Any]) -> str | None:
        cursor = document.get("next_cursor")
        return str(cursor) if document.get("has_more") and cursor else None

    async def children(block_id: str, cursor: str | None, size: int) -> dict[str, Any]:
        params = {"page_size": str(size)} | ({"start_cursor": cursor} if cursor else {})
        return await listing("GET", f"blocks/{block_id}/children", params=params)

    async def render(blocks: list[dict[str, Any]], depth: int) -> list[str]:
        lines: list[str] = []
        number = 0
        for block in blocks:
            number = number + 1 if block.get("type") == "numbered_list_item" else 0
            lines += ["  " * depth + line for line in _block_text(block, number)]
            kind = str(block.get("type", ""))
            # The id goes into a request path: only a well-formed one is followed.
            block_id = str(block.get("id", ""))
            if block.get("has_children") and kind not in _NO_DESCENT and _ID.match(block_id):
                if depth >= config.max_depth:
                    lines.append("  " * (depth + 1) + "… (deeper nested blocks not shown)")
                    continue
                nested = await children(block_id, None, 100)
                lines += await render(nested["results"], depth + 1)
                if next_of(nested):
                    lines.append("  " * (depth + 1) + "… (more nested blocks not shown)")
        return lines

    def refused(page_id: str) -> ToolResult:
        return ToolResult.fail(
            f"page {page_id} is not one this agent may read (allowed pages: "
            f"{', '.join(config.allowed_pages) or 'none'}; allowed parents: "
            f"{', '.join(config.allowed_parents) or 'none'})",
            data={"error": "not_allowed", "source": "notion", "page_id": page_id},
        )

    @tool(
        read_only=True,
        open_world=True,
        owner="builtin",
        examples=[{"query": "onboarding checklist"}, {"query": "roadmap", "cursor": "abc123"}],
    )
    async def pages_search(
        query: Annotated[str, Field(max_length=300)],
        cursor: Cursor | None = None,
        page_size: Annotated[int, Field(ge=1, le=100)] = 20,
    ) -> ToolResult:
        """Search the private Notion pages this agent may read, by words in their titles
        (Notion search; an empty query lists recently edited pages). Then read one with
        page_read. Pages outside the configured allowed pages are left out.

        Returns: per page its title, id, URL and last-edited time, and a cursor when there are
        more results.

        Args:
            query: Words in the page title, e.g. `onboarding checklist`; empty lists all.
            cursor: The cursor from the previous result for the next page.
            page_size: Results asked of Notion per page (1-100).
        """
        body: dict[str, Any] = {"query": query, "page_size": page_size}
        body["filter"] = {"property": "object", "value": "page"}
        if cursor:
            body["start_cursor"] = cursor
        try:
            document = await listing("POST", "search", json_body=body)
        except ApiError as exc:
            return exc.to_result()
        found = [r for r in document["results"] if r.get("object", "page") == "page"]
        shown = [_page_summary(r) for r in found if allowed(r)]
        hidden = len(found) - len(shown)
        next_cursor = next_of(document)
        lines = [f"{len(shown)} pages for {query!r}:"]
        lines += [
            f"{n}. {p['title']} (id {p['id']}, edited {p['last_edited']})\n   {p['url']}"
            for n, p in enumerate(shown, start=1)
        ]
        if hidden:
            lines.append(f"({hidden} results outside the allowed pages were left out)")
        if next_cursor:
            lines.append(f'More: pass cursor="{next_cursor}".')
        data = {"query": query, "results": shown, "hidden": hidden, "next_cursor": next_cursor}
        return ToolResult.ok("\n".join(lines), data=data)

    @tool(
        read_only=True,
        open_world=True,
        owner="builtin",
        examples=[{"page_id": "59833787-2cf9-4fdf-8782-e53db20768a5"}],
    )
    async def page_read(
        page_id: PageId,
        cursor: Cursor | None = None,
        page_size: Annotated[int, Field(ge=1, le=100)] = 50,
    ) -> ToolResult:
        """Read one private Notion page: its title, properties and content as text (headings
        as #, lists, [ ] / [x] to-dos, fenced code, quotes; nested blocks indented). Child
        pages are listed with their ids, not read. Long pages come a block page at a time.

        Returns: title, URL, last-edited time, properties, the content, and a cursor when more
        blocks follow.

        Args:
            page_id: The page id from pages_search (dashes optional).
            cursor: The cursor from the previous result for the next blocks of the same page.
            page_size: Top-level blocks per call (1-100).
        """
        try:
            response = await api.send("GET", f"pages/{page_id}")
            page = response.json()
            if not isinstance(page, dict) or page.get("object") != "page":
                raise response.bad("not a page object")
            if not allowed(page, page_id):
                return refused(page_id)
            document = await children(page_id, cursor, page_size)
            content = await render(document["results"], 0)
        except ApiError as exc:
            hint = ""
            if exc.kind == "not_found":
                hint = " (Notion also answers 404 for pages not shared with the integration)"
            return exc.to_result(hint=hint)
        summary = _page_summary(page)
        properties = {
            name: _property(prop)
            for name, prop in _obj(page.get("properties")).items()
            if isinstance(prop, dict) and prop.get("type") != "title"
        }
        next_cursor = next_of(document)
        state = " (archived)" if page.get("archived") or page.get("in_trash") else ""
        lines = [f"# {summary['title']}{state}", summary["url"]]
        lines.append(f"Last edited: {summary['last_edited']}")
        lines += [f"{name}: {value}" for name, value in properties.items()]
        lines += ["", *(content or ["(no content)"])]
        if next_cursor:
            lines.append(f'More blocks: pass cursor="{next_cursor}".')
        data = summary | {"properties": properties, "next_cursor": next_cursor}
        return ToolResult.ok("\n".join(lines), data=data)

    return [pages_search, page_read]
