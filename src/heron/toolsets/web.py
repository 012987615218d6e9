"""Web perception tools: `fetch_url` (a page as readable text) and `download_file`.

Every connection goes to an address that `UrlPolicy.resolve` checked a moment before: the request
is sent to that IP with the original `Host` header (and TLS server name), so a DNS answer cannot
change between the check and the connection. Redirects are followed by hand, one checked hop at a
time. Bodies are streamed and cut at a byte cap; the whole fetch runs under one deadline.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urljoin

import httpx
from pydantic import Field

from heron.errors import HeronError
from heron.safety.url_policy import UrlPolicy, UrlRefused
from heron.safety.workspace import Workspace, WorkspaceError
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool
from heron.toolsets.file_results import config_change
from heron.toolsets.html_text import html_to_text

__all__ = ["WebLimits", "html_to_text", "web_tools"]


@dataclass(frozen=True, kw_only=True, slots=True)
class WebLimits:
    """Caps for one web tool call."""

    max_page_bytes: int = 2_000_000
    """`fetch_url` stops reading here and says the page was cut."""
    max_download_bytes: int = 50_000_000
    """`download_file` refuses (and deletes) anything larger."""
    timeout_s: float = 20.0
    """Deadline for the whole call: DNS, every redirect hop and the body."""
    page_chars: int = 20_000
    """Default number of text characters `fetch_url` shows per call."""
    user_agent: str = "heron-agent/1.0 (fetch_url)"


class _FetchError(HeronError):
    """A fetch that cannot go on (too many redirects, an oversize download)."""


# --- fetching ---------------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class _Opened:
    url: str
    hops: list[str]
    response: httpx.Response  # streaming


@asynccontextmanager
async def _open(url: str, policy: UrlPolicy, limits: WebLimits) -> AsyncIterator[_Opened]:
    """GET `url`, following redirects through the policy; yield the final streaming response."""
    hops = [url.strip()]
    headers = {"User-Agent": limits.user_agent, "Accept": "text/html,text/*;q=0.9,*/*;q=0.8"}
    timeout = httpx.Timeout(limits.timeout_s)
    # trust_env=False: a proxy would resolve the host itself and defeat the address check.
    async with httpx.AsyncClient(trust_env=False, timeout=timeout, headers=headers) as client:
        while True:
            target = await policy.resolve(hops[-1])
            original = httpx.URL(target.url)
            default_port = {"http": 80, "https": 443}[target.scheme]
            host = f"[{target.host}]" if ":" in target.host else target.host
            host_header = host if target.port == default_port else f"{host}:{target.port}"
            request = client.build_request(
                "GET",
                original.copy_with(host=target.address),
                headers={"Host": host_header},
                extensions={"sni_hostname": target.host} if target.scheme == "https" else {},
            )
            response = await client.send(request, stream=True)
            if not response.has_redirect_location:
                break
            await response.aclose()
            if len(hops) > policy.max_redirects:
                chain = " -> ".join(hops)
                raise _FetchError(
                    f"stopped after {policy.max_redirects} redirects (the limit): {chain}"
                )
            hops.append(urljoin(hops[-1], response.headers["Location"]))
        try:
            yield _Opened(url=hops[-1], hops=hops, response=response)
        finally:
            await response.aclose()


async def _read_capped(response: httpx.Response, cap: int) -> tuple[bytes, bool]:
    """The body up to `cap` bytes (after content decoding) and whether it was cut."""
    chunks: list[bytes] = []
    total = 0
    async for chunk in response.aiter_bytes():
        if total + len(chunk) > cap:
            chunks.append(chunk[: cap - total])
            return b"".join(chunks), True
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks), False


def _kind(content_type: str, body: bytes) -> Literal["html", "text", "binary"]:
    mime = content_type.split(";", 1)[0].strip().lower()
    if mime in ("text/html", "application/xhtml+xml"):
        return "html"
    textual = ("application/json", "application/xml", "application/javascript")
    if mime.startswith("text/") or mime in textual or mime.endswith(("+json", "+xml")):
        return "text"
    if mime or b"\x00" in body[:1024]:
        return "binary"
    return "html" if body.lstrip()[:1] == b"<" else "text"


def _decode(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # an unknown charset name in the header
        return body.decode("utf-8", errors="replace")


def _failure(exc: Exception, url: str, limits: WebLimits) -> ToolResult:
    if isinstance(exc, UrlRefused | _FetchError):
        return ToolResult.fail(str(exc))
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return ToolResult.fail(f"timed out after {limits.timeout_s:g} s (the limit) on {url}")
    if isinstance(exc, httpx.ConnectError):
        return ToolResult.fail(f"could not connect to {url}: {exc}")
    return ToolResult.fail(f"request for {url} failed: {type(exc).__name__}: {exc}")


# --- the tools --------------------------------------------------------------------------------

_FETCH_DOC = """Fetch one web page and return it as readable text. Use it to read a page whose URL
you know (from the user or from web_search); use download_file to keep a file instead.

Cost: downloads the whole page (up to {max_bytes:,} bytes, usually 1-10 s on large sites) on
every call, also when you only page through it with `offset`. HTML becomes text: scripts, styles
and navigation are dropped, headings become `#` lines, links are marked [n] and listed at the
end. Text is decoded with the charset the server declares (UTF-8 if none); undecodable bytes
show as U+FFFD. Binary content (PDF, images) is not shown. Refuses non-http(s) URLs (file:,
ftp:) and private, loopback and cloud-metadata addresses, also when a redirect leads there;
follows at most {redirects} redirects; gives up after {timeout:g} s.

Returns: a header (final URL, HTTP status, content type, bytes read, redirects), the text
window and the links that appear in it. A page over the byte cap is cut and the header says so;
the window line says which characters are shown and which offset continues.

Args:
    url: Absolute http:// or https:// URL, e.g. `https://example.com/docs/intro`.
    offset: First text character to show; pass the offset the previous result names.
    limit: How many text characters to show.
"""

_DOWNLOAD_DOC = """Download a URL into a new workspace file. Use it for files to keep or process
(PDF, CSV, archives); use fetch_url to read a page. The file gets the body as served, with only
transfer compression (gzip) undone.

Cost: transfers the whole file (at most {max_bytes:,} bytes) within {timeout:g} s. Refuses
an existing file (choose a new path), paths outside the workspace (`..`, absolute paths),
non-http(s) URLs, private addresses and HTTP error statuses. A file over the size limit is
deleted, never kept half-written.

Returns: the number of bytes saved, the final URL and the content type.

Args:
    url: Absolute http:// or https:// URL, e.g. `https://example.com/data.csv`.
    path: Workspace-relative destination, e.g. `downloads/data.csv`; missing folders are made.
"""


def _documented(doc: str, **values: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a tool function a docstring that states the configured limits."""

    def attach(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__doc__ = doc.format(**values)
        return fn

    return attach


def web_tools(*, policy: UrlPolicy, workspace_root: Path, limits: WebLimits) -> list[Tool]:
    """`fetch_url` and `download_file`, bound to one URL policy, workspace and set of limits."""
    errors = (UrlRefused, _FetchError, TimeoutError, OSError, httpx.HTTPError)
    common = {"timeout": limits.timeout_s, "redirects": policy.max_redirects}

    @tool(
        read_only=True,
        idempotent=True,
        open_world=True,
        owner="builtin",
        examples=[
            {"url": "https://docs.python.org/3/library/asyncio-task.html"},
            {"url": "https://example.com/report.html", "offset": 20000},
        ],
    )
    @_documented(_FETCH_DOC, max_bytes=limits.max_page_bytes, **common)
    async def fetch_url(
        url: str,
        offset: Annotated[int, Field(ge=0)] = 0,
        limit: Annotated[int, Field(ge=1, le=100_000)] = limits.page_chars,
    ) -> ToolResult:
        try:
            async with asyncio.timeout(limits.timeout_s), _open(url, policy, limits) as page:
                body, cut = await _read_capped(page.response, limits.max_page_bytes)
                response = page.response
        except errors as exc:
            return _failure(exc, url, limits)
        content_type = response.headers.get("Content-Type", "")
        kind = _kind(content_type, body)
        title, text, links = "", "", list[str]()
        if kind == "html":
            html = _decode(body, response.charset_encoding)
            title, text, links = html_to_text(html, base_url=page.url)
        elif kind == "text":
            text = _decode(body, response.charset_encoding)
        cap = limits.max_page_bytes
        header = [
            f"URL: {page.url}",
            f"Status: {response.status_code} {response.reason_phrase}".strip(),
            f"Content-Type: {content_type or 'unknown'}",
            f"Bytes: {len(body):,} bytes"
            + (f" (cut at the {cap:,}-byte limit; the rest was not read)" if cut else ""),
            *(["Redirects: " + " -> ".join(page.hops)] if len(page.hops) > 1 else []),
            *([f"Title: {title}"] if title else []),
        ]
        data: dict[str, Any] = {"url": page.url, "status": response.status_code, "cut": cut}
        data |= {"content_type": content_type, "bytes": len(body), "redirects": page.hops[1:]}
        data |= {"title": title, "chars": len(text)}
        if kind == "binary":
            header.append("Binary content is not shown; use download_file to save it.")
            return _answer(response.status_code, "\n".join(header), data)
        if offset and offset >= len(text):
            return ToolResult.fail(f"offset {offset} is past the end of the {len(text)} chars")
        shown = text[offset : offset + limit]
        end = offset + len(shown)
        window = f"Text: characters {offset}-{end} of {len(text)}"
        window += f"; pass offset={end} to continue" if end < len(text) else " (the end)"
        visible = [(n, link) for n, link in enumerate(links, 1) if f"[{n}]" in shown]
        parts = ["\n".join(header), window, shown]
        if visible:
            parts.append("Links:\n" + "\n".join(f"[{n}] {link}" for n, link in visible))
        data |= {"offset": offset, "links": [{"n": n, "url": link} for n, link in visible]}
        return _answer(response.status_code, "\n\n".join(parts), data)

    @tool(
        open_world=True,
        owner="builtin",
        approval_for=config_change(workspace_root, "path"),
        examples=[{"url": "https://example.com/files/report.pdf", "path": "downloads/report.pdf"}],
    )
    @_documented(_DOWNLOAD_DOC, max_bytes=limits.max_download_bytes, **common)
    async def download_file(url: str, path: str) -> ToolResult:
        try:
            target = _new_file(workspace_root, path)
        except WorkspaceError as exc:
            return ToolResult.fail(str(exc), data=exc.to_data())
        except FileExistsError:
            return ToolResult.fail(f"{path!r} already exists; choose another path")
        partial = target.parent / f".heron-download-{secrets.token_hex(6)}.part"
        try:
            async with asyncio.timeout(limits.timeout_s), _open(url, policy, limits) as page:
                response = page.response
                if response.status_code >= 400:
                    status = f"{response.status_code} {response.reason_phrase}".strip()
                    return ToolResult.fail(f"HTTP {status} from {page.url}; nothing saved")
                size = await _save(response, partial, limits.max_download_bytes)
            os.replace(partial, target)
        except errors as exc:
            return _failure(exc, url, limits)
        finally:
            partial.unlink(missing_ok=True)
        content_type = response.headers.get("Content-Type", "unknown")
        return ToolResult.ok(
            f"saved {size:,} bytes from {page.url} ({content_type}) to {path}",
            data={"path": path, "bytes": size, "url": page.url, "content_type": content_type},
        )

    return [fetch_url, download_file]


def _new_file(workspace_root: Path, path: str) -> Path:
    """The checked destination of a download, which must not exist yet; folders are made."""
    target = Workspace(workspace_root).resolve(path)
    if os.path.lexists(target):
        raise FileExistsError(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


async def _save(response: httpx.Response, partial: Path, cap: int) -> int:
    """Stream the raw body into `partial`; refuse (by raising) anything over `cap` bytes."""
    declared = response.headers.get("Content-Length", "")
    too_big = f"the file is larger than the {cap:,}-byte download limit; nothing saved"
    if declared.isdigit() and int(declared) > cap:
        raise _FetchError(too_big)
    size = 0
    with partial.open("xb") as handle:
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > cap:
                raise _FetchError(too_big)
            handle.write(chunk)
    return size


def _answer(status: int, output: str, data: dict[str, Any]) -> ToolResult:
    if status >= 400:
        return ToolResult.fail(f"the server answered HTTP {status}", output=output, data=data)
    return ToolResult.ok(output, data=data)
