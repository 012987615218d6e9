"""Fan-out: 50 parallel calls of a 50 ms async read-only tool in one model response.

Prints the batch's wall time (first pending card to last result) against the 50 ms ideal
(target ≤ 1.05×).

    python bench/fanout.py
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from heron import Agent, ScriptedModel, tool

CALLS = 50
TOOL_S = 0.05


@tool(read_only=True)
async def wait_io(i: int) -> str:
    """Simulated 50 ms of I/O.

    Args:
        i: Call number.
    """
    await asyncio.sleep(TOOL_S)
    return f"done {i}"


async def once() -> float:
    calls = [{"id": f"c{i}", "name": "wait_io", "arguments": {"i": i}} for i in range(CALLS)]
    agent = Agent(model=ScriptedModel([{"tool_calls": calls}, {"text": "ok"}]), tools=[wait_io])
    marks: dict[str, float] = {}

    def sink(event: Any) -> None:
        if event.type == "tool_call" and "first" not in marks:
            marks["first"] = time.perf_counter()
        elif event.type == "tool_result":
            marks["last"] = time.perf_counter()

    result = await agent.run("go", sink=sink)
    assert result.ok
    return marks["last"] - marks["first"]


def main() -> None:
    walls = [asyncio.run(once()) for _ in range(5)]
    wall = statistics.median(walls)
    print(
        f"{CALLS} parallel calls of a {TOOL_S * 1000:.0f} ms tool: batch wall time "
        f"{wall * 1000:.1f} ms = {wall / TOOL_S:.2f}× the ideal (target ≤ 1.05×)"
    )


if __name__ == "__main__":
    main()
