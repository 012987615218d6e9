"""10,000 fuzzed tool calls through the real engine: 0 crashes, 0 hangs, 0 schema violations
reaching a tool, every call answered exactly once (`tests/support/fuzz.py`; the same run with
its counts and throughput: `python bench/fuzz_tool_calls.py`)."""

from __future__ import annotations

from pathlib import Path

from heron.mcp.client import McpClientManager
from heron.mcp.config import McpServerConfig
from support.fuzz import run_fuzz
from support.mcp_servers import probe_server

CALLS = 10_000
SEED = 20261201


async def test_ten_thousand_fuzzed_calls_never_crash_hang_or_reach_a_tool_unchecked(
    tmp_path: Path,
) -> None:
    config = McpServerConfig.model_validate(probe_server("hostile", timeout_s=60))
    async with McpClientManager({"mcp": config}) as manager:
        tools, problems = await manager.tools()
        assert problems == {}
        inspect = [t for t in tools if t.spec.name == "mcp__inspect"]
        report = await run_fuzz(calls=CALLS, seed=SEED, state_dir=tmp_path, mcp_tools=inspect)

    assert report.calls == CALLS
    assert (report.crashes, report.hangs, report.schema_violations) == (0, 0, 0), report.problems
    assert (report.unanswered, report.unserialisable) == (0, 0), report.problems
    # The fuzz is not vacuous: many calls ran, most were refused, every tool was reached.
    assert 1_000 < report.reached_tools < CALLS - 1_000
    assert report.statuses["error"] > 1_000 and report.statuses["unknown"] > 0
    assert set(report.reached) == {
        "fz_scalars",
        "fz_nested",
        "fz_point",
        "fz_schema",
        "fz_any",
        "mcp__inspect",
    }
