"""Time per `browser_navigate` + `browser_extract` on a local page, through the real tools.

Serves a page of about 20 KB (headings, paragraphs, a list of links, a small form) on
127.0.0.1, starts one headless Chromium (timed apart, as the first navigation), then navigates
to the page and extracts it N times (default 30) and prints the median, p90 and minimum per
round trip, and per step. Every request passes the URL policy twice (route interception and
the filtering proxy), so the numbers include that cost.

    python bench/browser_extract.py [N]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from heron.safety.url_policy import UrlPolicy
from heron.safety.workspace import Workspace
from heron.tools.definition import Tool, ToolContext
from heron.toolsets.browser import browser_tools

PAGE = (
    "<!doctype html><title>Benchmark page</title><h1>Benchmark page</h1>"
    + "".join(f"<h2>Section {n}</h2><p>{'Some readable prose. ' * 30}</p>" for n in range(20))
    + "<ul>"
    + "".join(f'<li><a href="/item/{n}">Item {n}</a></li>' for n in range(100))
    + '</ul><form><input id="q" name="q"><button id="go" type="button">Go</button></form>'
).encode()


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


def report(label: str, samples: list[float]) -> None:
    ordered = sorted(samples)
    p90 = ordered[max(0, int(len(ordered) * 0.9) - 1)]
    print(
        f"{label:<22} median {statistics.median(samples):7.2f} ms   "
        f"p90 {p90:7.2f} ms   min {ordered[0]:7.2f} ms"
    )


async def timed(tool: Tool, **arguments: Any) -> float:
    started = time.perf_counter()
    result = await tool.execute(tool.validate(arguments), ToolContext(call_id="b", turn_id="b"))
    if not result.success:
        raise SystemExit(f"{tool.spec.name} failed: {result.error}")
    return (time.perf_counter() - started) * 1000


async def main(runs: int) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/page"
    policy = UrlPolicy(allow_hosts=("127.0.0.1",))
    with tempfile.TemporaryDirectory() as tmp:
        async with browser_tools(policy=policy, workspace=Workspace(Path(tmp))) as tools:
            tool = {t.spec.name: t for t in tools}
            navigate, extract = tool["browser_navigate"], tool["browser_extract"]
            first = await timed(navigate, url=url)
            print(f"first navigation (starts Chromium): {first:.0f} ms")
            await timed(extract)  # warm-up
            nav_ms, extract_ms, total_ms = [], [], []
            for _ in range(runs):
                nav_ms.append(await timed(navigate, url=url))
                extract_ms.append(await timed(extract))
                total_ms.append(nav_ms[-1] + extract_ms[-1])
    server.shutdown()
    print(f"{runs} rounds, page of {len(PAGE):,} bytes")
    report("navigate + extract", total_ms)
    report("  browser_navigate", nav_ms)
    report("  browser_extract", extract_ms)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 30))
