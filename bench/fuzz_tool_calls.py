"""The fuzz suite's counts: 10,000 fuzzed tool calls through the real engine.

Random and adversarial argument JSON (deep nesting, huge strings, lone surrogates, NaN and
10^400, wrong types, extra keys, unicode confusables) from a seeded RNG, emitted by a
`FunctionModel` through `heron.Agent` against function tools, class tools and a tool of a real
MCP server (`tests/support/fuzz.py`). Prints the counts — calls, crashes, hangs, schema
violations reaching a tool, calls not answered exactly once, records that do not serialise —
every one but `calls` must be 0, and the throughput. Exits 1 otherwise.

    python bench/fuzz_tool_calls.py [CALLS] [SEED]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from heron.mcp.client import McpClientManager
from heron.mcp.config import McpServerConfig
from support.fuzz import FuzzReport, run_fuzz
from support.mcp_servers import probe_server


async def main(calls: int, seed: int) -> FuzzReport:
    config = McpServerConfig.model_validate(probe_server("hostile", timeout_s=60))
    async with McpClientManager({"mcp": config}) as manager:
        tools, problems = await manager.tools()
        assert not problems, problems
        inspect = [t for t in tools if t.spec.name == "mcp__inspect"]
        with tempfile.TemporaryDirectory() as state:
            return await run_fuzz(calls=calls, seed=seed, state_dir=Path(state), mcp_tools=inspect)


if __name__ == "__main__":
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 20261201
    report = asyncio.run(main(calls, seed))
    print(f"calls                          {report.calls:>8,}")
    print(f"crashes                        {report.crashes:>8,}")
    print(f"hangs                          {report.hangs:>8,}")
    print(f"schema violations reaching a tool {report.schema_violations:>5,}")
    print(f"calls not answered exactly once {report.unanswered:>7,}")
    print(f"records that do not serialise  {report.unserialisable:>8,}")
    print(f"calls that reached a tool      {report.reached_tools:>8,}")
    print(
        "results by status              "
        + ", ".join(f"{status} {count:,}" for status, count in report.statuses.most_common())
    )
    print(f"time                           {report.seconds:>8.1f} s")
    print(f"throughput                     {report.calls_per_second:>8,.0f} calls/s")
    for problem in report.problems[:20]:
        print("  problem:", problem)
    sys.exit(0 if report.clean else 1)
