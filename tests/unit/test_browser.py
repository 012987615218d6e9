"""The browser tools against a real headless Chromium and small web apps served on loopback.

One browser serves most tests of the module (starting Chromium takes about a second). The app
runs on 127.0.0.1, which the policy allows; a second server on 127.0.0.2 stands for a private
host the policy refuses, and records every request that reaches it.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from heron import Agent, ScriptedModel, ToolContext, ToolResult
from heron.messages import ToolResultMessage
from heron.safety.url_policy import UrlPolicy
from heron.safety.workspace import Workspace
from heron.tools.definition import Tool
from heron.toolsets.browser import BrowserLimits, BrowserTools, browser_tools
from support.engine import Events, call, calls_turn

pytestmark = pytest.mark.asyncio(loop_scope="module")

POLICY = UrlPolicy(allow_hosts=("127.0.0.1",))
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8cfc0f01f0005000201a2d6f1b30000000049454e44ae426082"
)

APP = """<!doctype html><html><head><title>Shopping list</title></head><body>
<h1>Shopping list</h1><p>Things to buy this week.</p>
<p style="display:none">invisible draft note</p>
<h2>Add an item</h2>
<label for="item">New item</label> <input id="item" type="text">
<button id="add" type="button" onclick="add()">Add</button>
<ul id="items"><li>bread</li></ul>
<a href="/about">About this list</a>
<img src="/pixel.png" alt="">
<script>
function add() {
  const li = document.createElement("li");
  li.textContent = document.getElementById("item").value;
  document.getElementById("items").appendChild(li);
  document.getElementById("item").value = "";
}
</script></body></html>"""


class Server:
    """A loopback HTTP server whose pages the test module defines; records every request."""

    def __init__(self, host: str, pages: dict[str, Any]) -> None:
        self.hits: list[str] = []
        self.release = threading.Event()  # unblocks /slow at teardown
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.hits.append(self.path)
                page = pages.get(self.path)
                if page == "slow":
                    server.release.wait(10)
                    return
                if isinstance(page, tuple):  # a redirect
                    self.send_response(302)
                    self.send_header("Location", page[0])
                    self.end_headers()
                    return
                body = page if isinstance(page, bytes) else str(page or "missing").encode()
                self.send_response(200 if page is not None else 404)
                png = body.startswith(b"\x89PNG")
                self.send_header("Content-Type", "image/png" if png else "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                """Keep the test output clean."""

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.base = f"http://{host}:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture(scope="module")
def private() -> Iterator[Server]:
    server = Server("127.0.0.2", {"/tracker.png": PIXEL, "/": "<p>private</p>"})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def site(private: Server) -> Iterator[Server]:
    pages: dict[str, Any] = {
        "/app": APP,
        "/about": "<title>About</title><h1>About</h1><p>Made for tests.</p>",
        "/pixel.png": PIXEL,
        "/long": "<title>Long</title><p>" + "word " * 1000 + "THE-END</p>",
        "/slow": "slow",
        "/hop": (f"{private.base}/tracker.png?via=redirect",),
        "/to-private": (f"{private.base}/",),
        "/leaky": f"""<title>Leaky</title><p>Leaky page</p>
            <img src="{private.base}/tracker.png?via=direct">
            <img src="/hop"><img src="/pixel.png">""",
    }
    server = Server("127.0.0.1", pages)
    yield server
    server.stop()


def entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def by_name(tools: list[Tool]) -> dict[str, Tool]:
    return {t.spec.name: t for t in tools}


async def run(tools: list[Tool], name: str, **arguments: Any) -> ToolResult:
    tool = by_name(tools)[name]
    return await tool.execute(tool.validate(arguments), ToolContext(call_id="c1", turn_id="t1"))


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("browser-workspace"))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser(workspace: Workspace) -> AsyncIterator[BrowserTools]:
    limits = BrowserLimits(navigation_timeout_s=15, action_timeout_s=5, extract_chars=2000)
    async with browser_tools(policy=POLICY, workspace=workspace, limits=limits) as tools:
        yield tools


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def hasty(workspace: Workspace) -> AsyncIterator[BrowserTools]:
    """A second browser with short deadlines, for the tests that wait for one to pass.

    It is started here, so that no test needs a page to load within those deadlines.
    """
    limits = BrowserLimits(navigation_timeout_s=0.5, action_timeout_s=0.3)
    async with browser_tools(policy=POLICY, workspace=workspace, limits=limits) as tools:
        await tools.session.open()
        yield tools


async def test_navigate_and_extract_show_title_headings_visible_text_links_and_controls(
    browser: BrowserTools, site: Server
) -> None:
    opened = await run(browser, "browser_navigate", url=f"{site.base}/app")
    assert opened.success, opened.error
    assert opened.data["status"] == 200 and opened.data["title"] == "Shopping list"
    page = await run(browser, "browser_extract")
    assert page.success, page.error
    assert "# Shopping list" in page.output and "## Add an item" in page.output
    assert "Things to buy this week." in page.output and "bread" in page.output
    assert "invisible draft note" not in page.output
    assert f"[1] About this list -> {site.base}/about" in page.output
    assert {c["selector"] for c in page.data["controls"]} == {"#item", "#add"}
    assert "input[text] #item 'New item'" in page.output


async def test_fill_then_click_changes_the_page(browser: BrowserTools, site: Server) -> None:
    await run(browser, "browser_navigate", url=f"{site.base}/app")
    filled = await run(browser, "browser_fill", selector="#item", text="oat milk")
    assert filled.success, filled.error
    clicked = await run(browser, "browser_click", selector="#add")
    assert clicked.success, clicked.error
    assert f"still at {site.base}/app" in clicked.output
    page = await run(browser, "browser_extract")
    assert "bread\noat milk" in page.output


async def test_a_closed_page_is_replaced_on_the_next_navigation(
    browser: BrowserTools, site: Server
) -> None:
    await run(browser, "browser_navigate", url=f"{site.base}/about")
    await browser.session.page().close()
    closed = await run(browser, "browser_extract")
    assert closed.error == "no page is open; call browser_navigate first"
    opened = await run(browser, "browser_navigate", url=f"{site.base}/about")
    assert opened.success, opened.error


async def test_clicking_a_link_follows_it(browser: BrowserTools, site: Server) -> None:
    await run(browser, "browser_navigate", url=f"{site.base}/app")
    clicked = await run(browser, "browser_click", selector="text=About this list")
    assert clicked.success, clicked.error
    assert clicked.data["url"] == f"{site.base}/about" and clicked.data["title"] == "About"


async def test_a_missing_or_unusable_element_fails_naming_the_selector(
    hasty: BrowserTools,
) -> None:
    await hasty.session.page().set_content(
        '<button id="hidden" style="display:none">Hidden</button><p id="text">plain text</p>'
    )
    for tool, extra in (("browser_click", {}), ("browser_fill", {"text": "x"})):
        result = await run(hasty, tool, selector="#nowhere", **extra)
        assert result.error is not None, tool
        assert result.error.startswith("no element matches selector '#nowhere'"), result.error
    hidden = await run(hasty, "browser_click", selector="#hidden")
    assert hidden.error == (
        "'#hidden' was found but could not be clicked within 0.3 s (hidden, disabled, read-only "
        "or covered by another element)"
    )
    not_a_field = await run(hasty, "browser_fill", selector="#text", text="x")
    assert not_a_field.error is not None and "not an <input>" in not_a_field.error


async def test_a_selector_matching_several_elements_is_refused(
    browser: BrowserTools, site: Server
) -> None:
    await run(browser, "browser_navigate", url=f"{site.base}/app")
    result = await run(browser, "browser_click", selector="p")
    assert not result.success
    assert result.error is not None and "strict mode violation" in result.error


async def test_screenshot_saves_a_png_of_the_viewport_into_the_workspace(
    browser: BrowserTools, site: Server, workspace: Workspace
) -> None:
    await run(browser, "browser_navigate", url=f"{site.base}/app")
    shot = await run(browser, "browser_screenshot")
    assert shot.success, shot.error
    assert shot.data["path"] == "screenshots/screenshot-1.png"
    data = (workspace.root / "screenshots/screenshot-1.png").read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR"
    assert struct.unpack(">II", data[16:24]) == (1280, 800)
    assert len(data) > 5000 and shot.data["bytes"] == len(data)
    assert "1280x800" in shot.output and "screenshots/screenshot-1.png" in shot.output
    second = await run(browser, "browser_screenshot")
    assert second.data["path"] == "screenshots/screenshot-2.png"


async def test_screenshot_refuses_existing_files_other_types_and_paths_outside(
    browser: BrowserTools, site: Server, workspace: Workspace
) -> None:
    await run(browser, "browser_navigate", url=f"{site.base}/app")
    (workspace.root / "taken.png").write_bytes(b"keep me")
    for path, problem in (
        ("taken.png", "already exists"),
        ("shot.jpg", "must end in .png"),
        ("../outside.png", "contains '..'"),
    ):
        result = await run(browser, "browser_screenshot", path=path)
        assert not result.success and result.error is not None and problem in result.error
    assert (workspace.root / "taken.png").read_bytes() == b"keep me"
    assert not (workspace.root.parent / "outside.png").exists()


async def test_requests_to_refused_hosts_are_blocked_also_behind_a_redirect(
    browser: BrowserTools, site: Server, private: Server
) -> None:
    before = len(site.hits)
    opened = await run(browser, "browser_navigate", url=f"{site.base}/leaky")
    assert opened.success, opened.error
    assert private.hits == []
    assert "/hop" in site.hits[before:] and "/pixel.png" in site.hits[before:]
    blocked = opened.data["blocked"]
    # Route interception stops the direct request; the redirect hop only the proxy sees.
    [direct] = [entry for entry in blocked if "tracker.png?via=direct" in entry]
    [redirect] = [entry for entry in blocked if "tracker.png?via=redirect" in entry]
    assert "proxy" not in direct and "connection stopped by the proxy" in redirect
    assert all("127.0.0.2" in entry and "loopback" in entry for entry in blocked)
    assert "Blocked by the URL policy (2)" in opened.output


async def test_a_page_cannot_redirect_the_browser_to_a_refused_host(
    browser: BrowserTools, site: Server, private: Server
) -> None:
    result = await run(browser, "browser_navigate", url=f"{site.base}/to-private")
    assert not result.success
    assert private.hits == []
    assert any(entry.startswith(f"{private.base}/ ") for entry in result.data["blocked"])


async def test_refused_urls_are_never_opened(browser: BrowserTools, private: Server) -> None:
    for url, reason in (
        (f"{private.base}/", "loopback address"),
        ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
        ("file:///etc/passwd", "only http:// and https://"),
        ("chrome://settings", "only http:// and https://"),
    ):
        result = await run(browser, "browser_navigate", url=url)
        assert not result.success and result.error is not None and reason in result.error, url
    assert private.hits == []


async def test_extract_cuts_long_text_with_a_marker_and_continues_at_the_offset(
    browser: BrowserTools, site: Server
) -> None:
    await run(browser, "browser_navigate", url=f"{site.base}/long")
    first = await run(browser, "browser_extract")
    total = first.data["chars"]
    assert first.data["end"] == 2000 and total == len("word " * 1000 + "THE-END")
    assert f"[… {total - 2000} more characters; pass offset=2000 to continue …]" in first.output
    assert "THE-END" not in first.output
    rest = await run(browser, "browser_extract", offset=4000)
    assert rest.output.rstrip().endswith("THE-END") and "more characters" not in rest.output
    past = await run(browser, "browser_extract", offset=total)
    assert not past.success


async def test_a_page_that_does_not_load_in_time_is_a_clear_timeout(
    hasty: BrowserTools, site: Server
) -> None:
    result = await run(hasty, "browser_navigate", url=f"{site.base}/slow")
    assert not result.success
    assert result.error == (
        f"{site.base}/slow did not finish loading within 0.5 s; what arrived may still be read "
        "with browser_extract"
    )


async def test_missing_chromium_is_reported_without_starting_anything(
    site: Server, tmp_path: Path
) -> None:
    limits = BrowserLimits(executable=str(tmp_path / "no-chromium"))
    tools = browser_tools(policy=POLICY, workspace=Workspace(tmp_path), limits=limits)
    result = await run(tools, "browser_navigate", url=f"{site.base}/app")
    assert not result.success and result.error is not None
    assert result.error.startswith(f"Chromium not found at {tmp_path / 'no-chromium'}")
    assert not tools.session.started


async def test_page_tools_before_any_navigation_ask_for_one_and_start_no_browser(
    tmp_path: Path,
) -> None:
    tools = browser_tools(policy=POLICY, workspace=Workspace(tmp_path))
    for name, arguments in (
        ("browser_extract", {}),
        ("browser_click", {"selector": "#x"}),
        ("browser_fill", {"selector": "#x", "text": "y"}),
        ("browser_screenshot", {}),
    ):
        result = await run(tools, name, **arguments)
        assert result.error == "no page is open; call browser_navigate first", name
    assert not tools.session.started and entries(tmp_path) == []


async def test_close_ends_the_browser_and_a_later_navigation_starts_a_new_one(
    site: Server, tmp_path: Path, events: Events
) -> None:
    tools = browser_tools(policy=POLICY, workspace=Workspace(tmp_path))
    script = [
        calls_turn(call("browser_navigate", "c1", url=f"{site.base}/about")),
        calls_turn(call("browser_extract", "c2")),
        {"text": "read it"},
    ]
    agent = Agent(model=ScriptedModel(script), tools=tools, autonomy="full")
    result = await agent.run("read the about page", sink=events)
    outputs = {m.call_id: m.content for m in result.history if isinstance(m, ToolResultMessage)}
    assert "Made for tests." in outputs["c2"]
    assert [e.message for e in events.of("progress")] == ["starting Chromium"]
    first = tools.session.page().context.browser
    assert first is not None and first.is_connected()
    await tools.close()
    assert not first.is_connected() and not tools.session.started
    again = await run(tools, "browser_navigate", url=f"{site.base}/about")
    assert again.success and tools.session.started
    second = tools.session.page().context.browser
    assert second is not None and second is not first
    await second.close()  # as if Chromium had crashed
    recovered = await run(tools, "browser_navigate", url=f"{site.base}/about")
    assert recovered.success, recovered.error
    await tools.close()
    await tools.close()  # a second close is harmless
