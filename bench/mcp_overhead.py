"""Per-call overhead of an MCP stdio tool call through heron vs through the SDK client alone.

    python bench/mcp_overhead.py [--calls N]

Both paths call the `add` tool (structured content with an output schema) of the same SDK-built
test server (`tests/support/mcp_servers.py probe`), one call at a time after a warm-up:

- **SDK**: `mcp.Client.call_tool` on a client the benchmark holds open;
- **heron**: `McpTool.validate` + `McpTool.execute`, i.e. strict argument validation, the
  manager's connection lookup, in-flight accounting, progress plumbing and result rendering.

The difference of the medians is heron's overhead per call. Each path gets its own server
process; the order alternates between rounds so drift does not favour either.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import TextIO

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from heron.mcp.client import McpClientManager, McpTool
from heron.mcp.config import McpServerConfig
from heron.tools.definition import ToolContext

ROOT = Path(__file__).resolve().parents[1]
SERVER = [str(ROOT / "tests" / "support" / "mcp_servers.py"), "probe"]
ROUNDS = 5


async def sdk_samples(calls: int, errlog: TextIO) -> list[float]:
    params = StdioServerParameters(command=sys.executable, args=SERVER)
    async with Client(stdio_client(params, errlog=errlog), cache=None) as client:
        for i in range(20):
            await client.call_tool("add", {"a": i, "b": 1})
        samples = []
        for i in range(calls):
            t0 = time.perf_counter()
            await client.call_tool("add", {"a": i, "b": 1})
            samples.append(time.perf_counter() - t0)
    return samples


async def heron_samples(calls: int) -> list[float]:
    config = McpServerConfig(command=sys.executable, args=SERVER, health_interval_s=None)
    ctx = ToolContext(call_id="bench", turn_id="bench")
    async with McpClientManager({"probe": config}) as manager:
        tools, _ = await manager.tools()
        add: McpTool = next(t for t in tools if t.spec.name == "probe__add")
        for i in range(20):
            await add.execute(add.validate({"a": i, "b": 1}), ctx)
        samples = []
        for i in range(calls):
            t0 = time.perf_counter()
            result = await add.execute(add.validate({"a": i, "b": 1}), ctx)
            samples.append(time.perf_counter() - t0)
            assert result.success
    return samples


async def main(calls: int, errlog: TextIO) -> None:
    sdk: list[float] = []
    heron: list[float] = []
    for round_ in range(ROUNDS):
        if round_ % 2 == 0:
            sdk.extend(await sdk_samples(calls, errlog))
            heron.extend(await heron_samples(calls))
        else:
            heron.extend(await heron_samples(calls))
            sdk.extend(await sdk_samples(calls, errlog))
    sdk_ms = statistics.median(sdk) * 1000
    heron_ms = statistics.median(heron) * 1000
    print(f"MCP stdio call, median of {len(sdk)} calls per path ({ROUNDS} rounds):")
    print(f"  SDK client alone : {sdk_ms:.3f} ms")
    print(f"  through heron    : {heron_ms:.3f} ms")
    print(f"  heron overhead   : {heron_ms - sdk_ms:+.3f} ms per call")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    # The SDK server logs every call to stderr; heron keeps that in a temporary file.
    with open(os.devnull, "w") as devnull:
        asyncio.run(main(parser.parse_args().calls, devnull))
