"""Per-iteration overhead of heron's turn loop, with every lifecycle feature switched on.

One iteration = one scripted model turn with one tool call + the tool's execution, with
before/after hooks, auto-approval by allow-list, duplicate guard, loop detection, HMAC
receipts, an observer and in-memory history. Prints µs per iteration at N = 20, 200, 400
beside a plain-asyncio lower bound measured in the same run.

    python bench/loop_overhead.py
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from typing import Any

from heron import (
    Agent,
    ApprovalManager,
    ApprovalPolicy,
    RecordingObserver,
    RuntimeKnobs,
    ScriptedModel,
    ToolHook,
    tool,
)
from heron.turn.receipts import ReceiptScope

SIZES = (20, 200, 400)
REPEATS = 7


@tool(thread=False)
def bump(i: int) -> str:
    """Trivial execution tool.

    Args:
        i: A counter.
    """
    return f"ok {i}"


class NoopHook(ToolHook):
    async def before_tool_call(self, call: Any) -> None:
        return None

    async def after_tool_call(self, call: Any, outcome: Any) -> None:
        return None


def script(n: int) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"id": f"c{i}", "name": "bump", "arguments": {"i": i}}]} for i in range(n)
    ]
    return [*turns, {"text": "done"}]


async def heron_run(n: int) -> float:
    agent = Agent(
        model=ScriptedModel(script(n)),
        tools=[bump],
        approval=ApprovalManager(policy=ApprovalPolicy(auto_approve=["bump"])),
        knobs=RuntimeKnobs(max_iterations=n + 1),
        observer=RecordingObserver(),
        hooks=[NoopHook()],
        receipts=ReceiptScope("run"),
    )
    events: list[Any] = []
    started = time.perf_counter()
    result = await agent.run("go", sink=events.append)
    elapsed = time.perf_counter() - started
    assert result.ok and len(result.receipts) == n, result.outcome
    return elapsed / (n + 1) * 1e6


async def plain_asyncio(n: int) -> float:
    """Lower bound: a loop that awaits a model coroutine and a tool task per iteration."""

    async def model(i: int) -> dict[str, Any]:
        return {"name": "bump", "arguments": {"i": i}}

    async def run_tool(args: dict[str, Any]) -> str:
        return f"ok {args['i']}"

    history: list[Any] = []
    started = time.perf_counter()
    for i in range(n):
        call = await model(i)
        history.append(call)
        history.append(await asyncio.ensure_future(run_tool(call["arguments"])))
    return (time.perf_counter() - started) / n * 1e6


def best(fn: Any, n: int) -> float:
    samples = []
    for _ in range(REPEATS):
        gc.collect()
        samples.append(asyncio.run(fn(n)))
    return statistics.median(samples)


def main() -> None:
    best(heron_run, 20)  # warm imports and caches
    print(f"{'N':>5} {'heron µs/iter':>14} {'asyncio µs/iter':>16} {'ratio':>7}")
    rows = {}
    for n in SIZES:
        h, p = best(heron_run, n), best(plain_asyncio, n)
        rows[n] = h
        print(f"{n:>5} {h:>14.1f} {p:>16.1f} {h / p:>7.1f}")
    print(
        f"flatness: N=400 / N=20 = {rows[400] / rows[20]:.2f} (target ≤ 1.1); target ≤ 50 µs/iter"
    )


if __name__ == "__main__":
    main()
