"""fetch_url and download_file against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from heron import Agent, ScriptedModel, ToolContext, ToolResult
from heron.messages import ToolResultMessage
from heron.safety.url_policy import UrlPolicy
from heron.tools.definition import Tool
from heron.toolsets.web import WebLimits, html_to_text, web_tools
from support.engine import Events, call, calls_turn

PAGE = b"""<!doctype html><html><head><title>Release  notes</title>
<style>body { color: red }</style><script>trackVisitor();</script></head>
<body><nav><a href="/home">Home</a> | <a href="/about">About</a></nav>
<h1>Version 2.0</h1>
<p>Read the <a href="/guide">upgrade guide</a> first &amp; back up your data.</p>
<ul><li>Faster start-up</li><li>New <a href="https://example.org/api">API</a></li></ul>
</body></html>"""


class Site:
    """A loopback web site whose routes the tests define; records every request it gets."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.hosts: list[str] = []
        self.release = threading.Event()  # unblocks /slow at teardown
        self.meeting = threading.Barrier(2, timeout=5)
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.hits.append(self.path)
                site.hosts.append(self.headers.get("Host", ""))
                site.route(self)

            def log_message(self, format: str, *args: Any) -> None:
                """Keep the test output clean."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"

    def route(self, h: BaseHTTPRequestHandler) -> None:
        path = h.path
        if path == "/page":
            send(h, 200, PAGE, "text/html; charset=utf-8")
        elif path.startswith("/redirect/"):
            left = int(path.rsplit("/", 1)[1])
            target = "/page" if left == 0 else f"/redirect/{left - 1}"
            send(h, 302, b"", "text/plain", Location=target)
        elif path == "/to-metadata":
            send(h, 302, b"", "text/plain", Location="http://169.254.169.254/latest/meta-data/")
        elif path == "/to-loopback-v6":
            send(h, 301, b"", "text/plain", Location=f"http://[::1]:{self.port}/page")
        elif path == "/big":
            send(h, 200, b"x" * 100_000, "text/plain")
        elif path == "/slow":
            self.release.wait(10)
        elif path == "/file.bin":
            send(h, 200, bytes(range(256)) * 8, "application/octet-stream")
        elif path.startswith("/meet/"):
            self.meeting.wait()
            send(h, 200, f"<p>met {path[6:]}</p>".encode(), "text/html")
        else:
            send(h, 404, b"<h1>Not here</h1>", "text/html")


def send(h: BaseHTTPRequestHandler, status: int, body: bytes, ctype: str, **headers: str) -> None:
    h.send_response(status)
    h.send_header("Content-Type", ctype)
    h.send_header("Content-Length", str(len(body)))
    for name, value in headers.items():
        h.send_header(name, value)
    h.end_headers()
    h.wfile.write(body)


@pytest.fixture
def site() -> Iterator[Site]:
    site = Site()
    thread = threading.Thread(target=site.server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield site
    site.release.set()
    site.server.shutdown()
    site.server.server_close()
    thread.join(5)


LOOPBACK = UrlPolicy(allow_hosts=("127.0.0.1",), max_redirects=3)
FAST = WebLimits(timeout_s=5.0, max_page_bytes=10_000, max_download_bytes=1_000)


def tools_for(
    tmp_path: Path, policy: UrlPolicy = LOOPBACK, limits: WebLimits = FAST
) -> dict[str, Tool]:
    return {
        t.spec.name: t for t in web_tools(policy=policy, workspace_root=tmp_path, limits=limits)
    }


async def run(tool: Tool, **arguments: Any) -> ToolResult:
    return await tool.execute(tool.validate(arguments), ToolContext(call_id="c1", turn_id="t1"))


@pytest.fixture
def fetch(tmp_path: Path) -> Callable[..., Any]:
    tool = tools_for(tmp_path)["fetch_url"]
    return lambda **arguments: run(tool, **arguments)


async def test_html_page_becomes_readable_text_with_numbered_links(site: Site, fetch: Any) -> None:
    result = await fetch(url=f"{site.base}/page")
    assert result.success, result.error
    header, window, rest = result.output.split("\n\n", 2)
    text, links = rest.split("\n\nLinks:\n")
    assert header.splitlines() == [
        f"URL: {site.base}/page",
        "Status: 200 OK",
        "Content-Type: text/html; charset=utf-8",
        f"Bytes: {len(PAGE):,} bytes",
        "Title: Release notes",
    ]
    assert window == f"Text: characters 0-{len(text)} of {len(text)} (the end)"
    assert text.splitlines() == [
        "# Version 2.0",
        "",
        "Read the upgrade guide [1] first & back up your data.",
        "",
        "- Faster start-up",
        "- New API [2]",
    ]
    assert links == f"[1] {site.base}/guide\n[2] https://example.org/api"
    assert result.data["status"] == 200 and result.data["cut"] is False


async def test_long_text_is_shown_in_windows_that_name_the_next_offset(
    site: Site, fetch: Any
) -> None:
    first = await fetch(url=f"{site.base}/page", limit=20)
    assert "Text: characters 0-20 of " in first.output
    assert "pass offset=20 to continue" in first.output
    assert "[1]" not in first.output  # links outside the window are not listed
    second = await fetch(url=f"{site.base}/page", offset=20, limit=20)
    assert "Text: characters 20-40 of " in second.output
    past = await fetch(url=f"{site.base}/page", offset=10_000)
    assert not past.success and "past the end" in (past.error or "")


async def test_redirects_within_the_limit_are_followed_and_reported(site: Site, fetch: Any) -> None:
    result = await fetch(url=f"{site.base}/redirect/2")
    assert result.success, result.error
    hops = f"{site.base}/redirect/2 -> {site.base}/redirect/1 -> {site.base}/redirect/0"
    assert f"Redirects: {hops} -> {site.base}/page" in result.output
    assert result.output.startswith(f"URL: {site.base}/page\n")


async def test_a_redirect_chain_over_the_limit_stops_with_the_chain(site: Site, fetch: Any) -> None:
    result = await fetch(url=f"{site.base}/redirect/9")
    assert not result.success
    assert (result.error or "").startswith("stopped after 3 redirects (the limit): ")
    assert site.hits == [f"/redirect/{n}" for n in (9, 8, 7, 6)]


@pytest.mark.parametrize(
    ("path", "reason"),
    [("/to-metadata", "cloud metadata service"), ("/to-loopback-v6", "::1 is a loopback")],
)
async def test_a_redirect_to_a_private_address_is_refused(
    site: Site, fetch: Any, path: str, reason: str
) -> None:
    result = await fetch(url=f"{site.base}{path}")
    assert not result.success and reason in (result.error or "")
    assert site.hits == [path]


async def test_the_default_policy_never_contacts_a_loopback_server(
    site: Site, tmp_path: Path
) -> None:
    result = await run(tools_for(tmp_path, UrlPolicy())["fetch_url"], url=f"{site.base}/page")
    assert not result.success and "127.0.0.1 is a loopback address" in (result.error or "")
    assert site.hits == []


async def test_an_oversize_body_is_cut_at_the_cap_and_says_so(site: Site, fetch: Any) -> None:
    result = await fetch(url=f"{site.base}/big", limit=50)
    assert result.success
    assert "Bytes: 10,000 bytes (cut at the 10,000-byte limit; the rest was not read)" in (
        result.output
    )
    assert result.data["bytes"] == 10_000 and result.data["cut"] is True


async def test_a_server_that_never_answers_times_out(site: Site, tmp_path: Path) -> None:
    tool = tools_for(tmp_path, limits=WebLimits(timeout_s=0.2))["fetch_url"]
    result = await run(tool, url=f"{site.base}/slow")
    assert not result.success
    assert result.error == f"timed out after 0.2 s (the limit) on {site.base}/slow"


async def test_non_http_schemes_are_refused(fetch: Any) -> None:
    result = await fetch(url="file:///etc/passwd")
    assert not result.success and "only http:// and https://" in (result.error or "")


async def test_an_http_error_status_is_a_failure_that_still_shows_the_page(
    site: Site, fetch: Any
) -> None:
    result = await fetch(url=f"{site.base}/missing")
    assert not result.success and result.error == "the server answered HTTP 404"
    assert "Status: 404 Not Found" in result.output and "# Not here" in result.output


async def test_binary_content_is_described_not_dumped(site: Site, fetch: Any) -> None:
    result = await fetch(url=f"{site.base}/file.bin")
    assert result.success and "Binary content is not shown" in result.output
    assert "Text:" not in result.output


async def test_the_host_is_looked_up_once_and_the_checked_address_is_used(
    site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebinding resolver answers loopback first and fails afterwards: one lookup only."""
    real = socket.getaddrinfo
    lookups: list[str] = []

    def rebinding(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "rebind.test":
            lookups.append(host)
            if len(lookups) > 1:
                raise socket.gaierror(socket.EAI_NONAME, "second answer")
            return real("127.0.0.1", port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    tool = tools_for(tmp_path)["fetch_url"]
    result = await run(tool, url=f"http://rebind.test:{site.port}/page")
    assert result.success, result.error
    assert lookups == ["rebind.test"]
    assert site.hosts == [f"rebind.test:{site.port}"]


async def test_download_writes_the_exact_bytes_into_the_workspace(
    site: Site, tmp_path: Path
) -> None:
    tool = tools_for(tmp_path, limits=WebLimits(max_download_bytes=4096))["download_file"]
    result = await run(tool, url=f"{site.base}/file.bin", path="downloads/file.bin")
    assert result.success, result.error
    assert (tmp_path / "downloads" / "file.bin").read_bytes() == bytes(range(256)) * 8
    assert result.output.startswith("saved 2,048 bytes from ")
    again = await run(tool, url=f"{site.base}/file.bin", path="downloads/file.bin")
    assert not again.success and "already exists" in (again.error or "")


async def test_download_refuses_paths_outside_the_workspace(site: Site, tmp_path: Path) -> None:
    tool = tools_for(tmp_path / "ws")["download_file"]
    (tmp_path / "ws").mkdir()
    result = await run(tool, url=f"{site.base}/file.bin", path="../escape.bin")
    assert not result.success and result.data["error"] == "traversal"
    assert site.hits == [] and not (tmp_path / "escape.bin").exists()


async def test_an_oversize_download_leaves_no_file_behind(site: Site, tmp_path: Path) -> None:
    tool = tools_for(tmp_path)["download_file"]  # FAST allows 1,000 bytes
    result = await run(tool, url=f"{site.base}/file.bin", path="big.bin")
    assert not result.success and "larger than the 1,000-byte download limit" in (
        result.error or ""
    )
    assert entries(tmp_path) == []  # neither the file nor the partial download


def entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


async def test_two_fetches_in_one_batch_run_in_parallel_through_the_agent(
    site: Site, tmp_path: Path, events: Events
) -> None:
    """The server lets a /meet request answer only when the other one has arrived too."""
    script = [
        calls_turn(
            call("fetch_url", "c1", url=f"{site.base}/meet/one"),
            call("fetch_url", "c2", url=f"{site.base}/meet/two"),
        ),
        {"text": "both read"},
    ]
    agent = Agent(
        model=ScriptedModel(script), tools=list(tools_for(tmp_path).values()), autonomy="full"
    )
    result = await agent.run("read both pages", sink=events)
    outputs = {m.call_id: m.content for m in result.history if isinstance(m, ToolResultMessage)}
    assert "met one" in outputs["c1"] and "met two" in outputs["c2"]
    events.assert_one_pair_per_call()


def test_html_to_text_keeps_preformatted_text_and_numbers_ordered_lists() -> None:
    html = "<ol><li>first</li><li>second</li></ol><pre>  a\n    b</pre><p>x<br>y</p>"
    title, text, links = html_to_text(html)
    assert (title, links) == ("", [])
    assert text == "1. first\n2. second\n\n  a\n    b\n\nx\ny"


def test_html_to_text_ignores_malformed_and_script_links() -> None:
    html = '<a href="http://[broken">a</a> <a href="javascript:go()">b</a> <a href="#top">c</a>'
    assert html_to_text(html, base_url="https://example.com/") == ("", "a b c", [])
