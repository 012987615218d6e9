"""A headless Chromium the agent can drive: navigate, read, click, fill and take screenshots.

`browser_tools(policy=..., workspace=..., limits=...)` returns the five tools bound to one
`BrowserSession`: one browser per agent. The session starts Chromium on the first
`browser_navigate` (the other tools need an open page and never start it) and ends it on an
explicit `close()` of the returned `BrowserTools` (or when used as `async with`); a later
navigation starts a fresh one. Chromium runs from the system package (`/usr/bin/chromium`),
driven by Playwright, with a fresh temporary profile that Playwright deletes on close.

The `UrlPolicy` of `fetch_url` guards every request, in two layers:

- route interception checks each request the page makes (documents, frames, scripts, images,
  XHR) and aborts those to refused schemes or addresses, naming the URL in the tool result;
- a filtering HTTP proxy on 127.0.0.1, which Chromium must use for all traffic (loopback
  included), checks every connection again and connects to the address it checked. This catches
  what route interception cannot see: redirect hops (Playwright never routes them, so a public
  page could otherwise redirect an image into a private network), WebSockets and a DNS answer
  that changes between check and connection. Non-proxied WebRTC UDP is switched off.

Refusals by the proxy for hosts that do not resolve are not reported: those are Chromium's own
background requests (sign-in, updates) failing on a closed network, not the page's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Self

from playwright.async_api import (
    Browser,
    BrowserContext,
    Locator,
    Page,
    Playwright,
    Route,
    async_playwright,
)
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeout
from pydantic import Field

from heron.errors import HeronError
from heron.safety.url_policy import UrlPolicy, UrlRefused
from heron.safety.workspace import Workspace, WorkspaceError, atomic_write
from heron.tools.definition import Tool, ToolContext, ToolResult
from heron.tools.function_tool import tool
from heron.toolsets.browser_proxy import FilteringProxy

__all__ = ["BrowserLimits", "BrowserSession", "BrowserTools", "BrowserUnavailable", "browser_tools"]

_LAUNCH_ARGS = (
    *("--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"),
    *("--disable-background-networking", "--disable-component-update", "--disable-sync"),
    "--disable-dev-shm-usage",  # container /dev/shm is often too small for the renderer
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",  # WebRTC would skip the proxy
    "--proxy-bypass-list=<-loopback>",  # Chromium sends loopback traffic direct unless told
)
_LAUNCH_TIMEOUT_S = 60.0  # generous: a loaded CI machine can take many seconds


@dataclass(frozen=True, kw_only=True, slots=True)
class BrowserLimits:
    """Where Chromium lives and how long and how much the browser tools may take."""

    executable: str = "/usr/bin/chromium"
    navigation_timeout_s: float = 20.0
    """Deadline for a page (and its subresources) to finish loading."""
    action_timeout_s: float = 5.0
    """How long click and fill wait for their element to appear and become usable."""
    extract_chars: int = 20_000
    """Text characters `browser_extract` shows per call; `offset` continues."""
    max_items: int = 100
    """Links and form controls `browser_extract` lists, each."""
    viewport: tuple[int, int] = (1280, 800)


class BrowserUnavailable(HeronError):
    """Chromium is missing or cannot start."""


class _NoPage(HeronError):
    """A tool that needs a page was called before any navigation."""


class BrowserSession:
    """One Chromium with one browsing context, started lazily; see the module docstring."""

    def __init__(self, *, policy: UrlPolicy, limits: BrowserLimits) -> None:
        self.policy = policy
        self.limits = limits
        self.blocked: list[str] = []
        """Every request refused so far, as `url (reason)`, oldest first."""
        self._lock = asyncio.Lock()
        self._proxy = FilteringProxy(policy, self.blocked, limits.navigation_timeout_s)
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._context: BrowserContext | None = None
        self._page: Page | None = None

    @property
    def started(self) -> bool:
        return self._browser is not None

    def page(self) -> Page:
        """The page the tools act on (the newest tab); `_NoPage` before the first navigation."""
        if self._page is None or self._page.is_closed():
            raise _NoPage("no page is open; call browser_navigate first")
        return self._page

    async def open(self) -> Page:
        """The current page; starts Chromium when it is not running (or no longer is)."""
        async with self._lock:
            if self._browser is not None and not self._browser.is_connected():
                await self._stop()  # Chromium died (a crash, the OOM killer): start afresh
            if self._browser is None:
                if not os.access(self.limits.executable, os.X_OK):
                    raise BrowserUnavailable(
                        f"Chromium not found at {self.limits.executable}; install the system "
                        "package (Debian: `chromium`) or set BrowserLimits.executable"
                    )
                try:
                    await self._start()
                except BaseException:
                    await self._stop()
                    raise
            assert self._context is not None
            if self._page is None or self._page.is_closed():  # e.g. the tab was closed
                self._page = await self._context.new_page()
            return self._page

    async def _start(self) -> None:
        proxy = await self._proxy.start()
        self._playwright = await async_playwright().start()
        try:
            self._browser = await self._playwright.chromium.launch(
                executable_path=self.limits.executable,
                args=[*_LAUNCH_ARGS, f"--proxy-server={proxy}"],
                timeout=_LAUNCH_TIMEOUT_S * 1000,
            )
        except PlaywrightError as exc:
            raise BrowserUnavailable(f"Chromium failed to start: {_first_line(exc)}") from None
        width, height = self.limits.viewport
        self._context = context = await self._browser.new_context(
            viewport={"width": width, "height": height},
            service_workers="block",  # a service worker's requests would bypass routing
            accept_downloads=False,
        )
        context.set_default_navigation_timeout(self.limits.navigation_timeout_s * 1000)
        context.set_default_timeout(self.limits.action_timeout_s * 1000)
        await context.route("**/*", self._guard)
        context.on("page", self._adopt)  # a link that opens a new tab moves the session there

    def _adopt(self, page: Page) -> None:
        self._page = page

    async def _guard(self, route: Route) -> None:
        url = route.request.url
        with contextlib.suppress(PlaywrightError):  # the page may close while we decide
            try:
                await self.policy.resolve(url)
            except UrlRefused as exc:
                self.blocked.append(f"{url} ({exc})")
                await route.abort("blockedbyclient")
                return
            await route.continue_()

    async def close(self) -> None:
        """End Chromium (deleting its profile) and the proxy. Safe to call more than once."""
        async with self._lock:
            await self._stop()

    async def _stop(self) -> None:
        browser, runner = self._browser, self._playwright
        self._browser = self._playwright = self._context = self._page = None
        if browser is not None:
            with contextlib.suppress(PlaywrightError):  # already gone after a crash
                await browser.close()
        if runner is not None:
            await runner.stop()
        await self._proxy.close()


class BrowserTools(list[Tool]):
    """The browser tools (a `list[Tool]` for `Agent(tools=...)`) and the session they share."""

    def __init__(self, tools: list[Tool], session: BrowserSession) -> None:
        super().__init__(tools)
        self.session = session

    async def close(self) -> None:
        """Stop the browser. The tools stay usable: the next navigation starts a new one."""
        await self.session.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


_READ_PAGE = r"""(maxItems) => {
  const clean = (s) => (s || "").replace(/\s+/g, " ").trim();
  const quoted = (s) => '"' + s.replace(/["\\]/g, "\\$&") + '"';
  const selectorOf = (el) => {
    const tag = el.tagName.toLowerCase();
    if (el.id) return "#" + CSS.escape(el.id);
    if (el.getAttribute("name")) return `${tag}[name=${quoted(el.getAttribute("name"))}]`;
    const text = clean(el.innerText || el.value).slice(0, 40);
    return text ? `${tag}:has-text(${quoted(text)})` : tag;
  };
  const labelOf = (el) => clean((el.labels && el.labels[0] && el.labels[0].innerText)
    || el.getAttribute("aria-label") || el.placeholder
    || (el.tagName === "BUTTON" || el.type === "submit" ? el.innerText || el.value : ""));
  const headings = [...document.querySelectorAll("h1, h2, h3, h4, h5, h6")]
    .map((h) => ({level: Number(h.tagName[1]), text: clean(h.innerText)})).filter((h) => h.text);
  const links = [...document.links].filter((a) => /^https?:/.test(a.href))
    .map((a) => ({text: clean(a.innerText || a.getAttribute("aria-label")), href: a.href}));
  const controls = [...document.querySelectorAll("input, textarea, select, button")]
    .filter((el) => el.type !== "hidden").map((el) => ({
      tag: el.tagName.toLowerCase(), type: el.type || "", selector: selectorOf(el),
      label: labelOf(el), value: el.type === "password" ? "" : String(el.value ?? "").slice(0, 80),
    }));
  return {title: document.title, url: location.href, headings,
    text: document.body ? document.body.innerText : "",
    links: links.slice(0, maxItems), links_total: links.length,
    controls: controls.slice(0, maxItems), controls_total: controls.length};
}"""


def _first_line(exc: BaseException) -> str:
    message = exc.message if isinstance(exc, PlaywrightError) else str(exc)
    return message.strip().splitlines()[0] if message.strip() else type(exc).__name__


def _png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def browser_tools(
    *, policy: UrlPolicy, workspace: Workspace, limits: BrowserLimits | None = None
) -> BrowserTools:
    """The browser tools over one lazily started `BrowserSession`; `close()` the result."""
    limits = limits or BrowserLimits()
    session = BrowserSession(policy=policy, limits=limits)

    def report(
        start: int, text: str, data: dict[str, Any], failed: str | None = None
    ) -> ToolResult:
        """A result that also lists the requests refused since the call began (index `start`)."""
        blocked = session.blocked[start:]
        if blocked:
            shown = "\n".join(f"- {entry}" for entry in blocked[:10])
            more = f"\n[… {len(blocked) - 10} more …]" if len(blocked) > 10 else ""
            text += f"\nBlocked by the URL policy ({len(blocked)}):\n{shown}{more}"
        data["blocked"] = blocked
        if failed is not None:
            return ToolResult.fail(failed, output=text, data=data)
        return ToolResult.ok(text, data=data)

    async def element_problem(locator: Locator, selector: str, act: str, page: Page) -> str:
        if await locator.count() == 0:
            return (
                f"no element matches selector {selector!r} on {page.url} (waited "
                f"{limits.action_timeout_s:g} s); call browser_extract to see the page's controls"
            )
        return (
            f"{selector!r} was found but could not be {act} within {limits.action_timeout_s:g} s "
            "(hidden, disabled, read-only or covered by another element)"
        )

    @tool(open_world=True, owner="builtin", examples=[{"url": "https://example.com/login"}])
    async def browser_navigate(url: str, ctx: ToolContext) -> ToolResult:
        """Open a URL in the agent's browser (a real Chromium that runs the page's JavaScript).

        Use it for pages that need a browser: content built by scripts, forms, buttons. For plain
        pages fetch_url is faster. Starts the browser on first use (about a second). Waits for the
        page to load, up to the navigation deadline. Refuses non-http(s) URLs and private,
        loopback and cloud-metadata addresses; requests the page itself makes to such addresses
        are blocked too and listed in the result.

        Args:
            url: Absolute http:// or https:// URL.
        """
        start = len(session.blocked)
        try:
            await policy.resolve(url)
            if not session.started:
                ctx.progress("starting Chromium")
            page = await session.open()
            response = await page.goto(url.strip(), wait_until="load")
        except PlaywrightTimeout:
            late = f"{url} did not finish loading within {limits.navigation_timeout_s:g} s"
            late += "; what arrived may still be read with browser_extract"
            return report(start, f"Page so far: {session.page().url}", {"url": url}, late)
        except (UrlRefused, BrowserUnavailable) as exc:
            return ToolResult.fail(str(exc))
        except PlaywrightError as exc:
            return report(start, "", {"url": url}, f"navigation failed: {_first_line(exc)}")
        status = response.status if response is not None else None
        title = await page.title()
        data: dict[str, Any] = {"url": page.url, "status": status, "title": title}
        text = f"Opened {page.url} (HTTP {status or 'n/a'}), title {title!r}."
        text += "\nCall browser_extract to read it."
        failed = f"the server answered HTTP {status}" if status and status >= 400 else None
        return report(start, text, data, failed)

    # Not `read_only`: that would let a result cache answer a second extract of a page that has
    # changed by itself since (scripts, timers), which a model polling a page must not get.
    @tool(idempotent=True, owner="builtin", examples=[{}, {"offset": 20000}])
    async def browser_extract(offset: Annotated[int, Field(ge=0)] = 0) -> ToolResult:
        """Read the open page as it is now: title, headings, visible text, links, form controls.

        The text is what a reader sees (hidden elements left out). Controls come with a selector
        to pass to browser_fill / browser_click. Long text is cut and the cut is marked; pass the
        offset the result names to continue.

        Args:
            offset: First text character to show.
        """
        try:
            found: dict[str, Any] = await session.page().evaluate(_READ_PAGE, limits.max_items)
        except (_NoPage, PlaywrightError) as exc:
            return ToolResult.fail(_first_line(exc))
        text: str = found["text"]
        if offset and offset >= len(text):
            return ToolResult.fail(f"offset {offset} is past the end of the {len(text)} chars")
        shown = text[offset : offset + limits.extract_chars]
        end = offset + len(shown)
        lines = [f"URL: {found['url']}", f"Title: {found['title']}"]
        if found["headings"]:
            lines += ["Headings:", *(f"{'#' * h['level']} {h['text']}" for h in found["headings"])]
        lines += [f"Text (characters {offset}-{end} of {len(text)}):", shown]
        if end < len(text):
            lines.append(f"[… {len(text) - end} more characters; pass offset={end} to continue …]")
        links = [
            f"[{n}] {a['text'] or '(no text)'} -> {a['href']}"
            for n, a in enumerate(found["links"], 1)
        ]
        controls = [
            f"{c['tag']}[{c['type']}] {c['selector']} {c['label']!r} value={c['value']!r}"
            for c in found["controls"]
        ]
        for key, listed in (("links", links), ("controls", controls)):
            lines += [f"{key.capitalize()}:", *listed] if listed else []
            if found[f"{key}_total"] > len(listed):
                lines.append(f"[… {found[f'{key}_total'] - len(listed)} more {key} not shown …]")
        data = {key: found[key] for key in ("url", "title", "headings", "links", "controls")}
        data |= {"chars": len(text), "offset": offset, "end": end}
        return ToolResult.ok("\n".join(lines), data=data)

    @tool(open_world=True, owner="builtin", examples=[{"selector": "button#submit"}])
    async def browser_click(selector: str) -> ToolResult:
        """Click an element of the open page and wait for any page load it starts.

        Args:
            selector: Playwright selector: CSS (`#save`, `a[href="/next"]`) or text
                (`text=Sign in`, `button:has-text("Save")`); browser_extract lists selectors.
        """
        start = len(session.blocked)
        try:
            page = session.page()
            locator = page.locator(selector)
            before = page.url
            try:
                await locator.click()
            except PlaywrightTimeout:
                return ToolResult.fail(await element_problem(locator, selector, "clicked", page))
            page = session.page()  # the click may have opened a new tab
            with contextlib.suppress(PlaywrightTimeout):
                await page.wait_for_load_state("load")
            title = await page.title()
        except (_NoPage, PlaywrightError) as exc:
            return report(start, "", {"selector": selector}, _first_line(exc))
        moved = f"now at {page.url}" if page.url != before else f"still at {page.url}"
        text = f"Clicked {selector}; {moved}, title {title!r}."
        return report(start, text, {"selector": selector, "url": page.url, "title": title})

    @tool(open_world=True, owner="builtin", examples=[{"selector": "#email", "text": "a@b.org"}])
    async def browser_fill(selector: str, text: str) -> ToolResult:
        """Replace the value of an input, textarea or editable element on the open page.

        Args:
            selector: Playwright selector of the field, e.g. `#email` or `input[name="q"]`.
            text: The new value (replaces what is there).
        """
        try:
            page = session.page()
            locator = page.locator(selector)
            try:
                await locator.fill(text)
            except PlaywrightTimeout:
                return ToolResult.fail(await element_problem(locator, selector, "filled", page))
        except (_NoPage, PlaywrightError) as exc:
            return ToolResult.fail(_first_line(exc))
        return ToolResult.ok(
            f"Filled {selector} with {len(text)} characters.",
            data={"selector": selector, "chars": len(text)},
        )

    @tool(owner="builtin", examples=[{}, {"path": "shots/checkout.png", "full_page": True}])
    async def browser_screenshot(path: str | None = None, full_page: bool = False) -> ToolResult:
        """Save a PNG screenshot of the open page into the workspace.

        Args:
            path: Workspace-relative .png path that does not exist yet; by default the next free
                `screenshots/screenshot-<n>.png`.
            full_page: Capture the whole scrollable page instead of the visible window.
        """
        try:
            page = session.page()
            target, rel = _new_png(workspace, path)
            image = await page.screenshot(type="png", full_page=full_page)
        except WorkspaceError as exc:
            return ToolResult.fail(str(exc), data=exc.to_data())
        except (_NoPage, ValueError, PlaywrightError) as exc:
            return ToolResult.fail(_first_line(exc))
        width, height = _png_size(image)
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, image)
        return ToolResult.ok(
            f"Saved a {width}x{height} screenshot of {page.url} to {rel} ({len(image):,} bytes)",
            data={"path": rel, "bytes": len(image), "width": width, "height": height},
        )

    tools: list[Tool] = [browser_navigate, browser_extract, browser_click, browser_fill]
    return BrowserTools([*tools, browser_screenshot], session)


def _new_png(workspace: Workspace, path: str | None) -> tuple[Path, str]:
    """The checked destination of a screenshot (which must not exist) and its relative path."""
    if path is None:
        n = 1
        while os.path.lexists(workspace.resolve(f"screenshots/screenshot-{n}.png")):
            n += 1
        path = f"screenshots/screenshot-{n}.png"
    target = workspace.resolve(path)
    if target.suffix.lower() != ".png":
        raise ValueError(f"{path!r} must end in .png")
    if os.path.lexists(target):
        raise ValueError(f"{path!r} already exists; choose another path")
    return target, path
