"""Interrupt latency: a user interrupt published → running tools stopped → next model call.

Each round: a user message starts a turn whose model calls a long tool; once the tool runs, a
`user.interrupt` is published on the bus. The clock runs from just before `publish` until the
model receives its next request, which means: the event is durable, routed, the running step is
cancelled, the tool is stopped (`stop …`, cancel mode) or left running in the background
(detach mode), the cancelled round and the drained batch are written to the session, and the
model is called. Everything real except the model (a `FunctionModel`): SQLite files, the
engine, the tool.

    python bench/interrupt_latency.py [--rounds 300]

Target: p99 <= 50 ms (reported, not enforced).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from heron import Agent, FunctionModel, ModelTurn, tool
from heron.always_on.bus.loop import EventDrivenAgent
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.messages import UserMessage
from heron.models.base import ModelRequest

SESSION = "bench"


class Round:
    def __init__(self) -> None:
        self.tool_running = asyncio.Event()
        self.release = asyncio.Event()
        self.model_called_at = 0.0


async def measure(state_dir: Path, rounds: int, text: str) -> list[float]:
    current = Round()

    @tool(name="long_job")
    async def long_job() -> str:
        """Runs until released or stopped."""
        current.tool_running.set()
        await current.release.wait()
        return "finished late"

    def model(request: ModelRequest) -> ModelTurn | str:
        last = request.messages[-1]
        if isinstance(last, UserMessage) and last.content.startswith("go"):
            return ModelTurn.model_validate({"tool_calls": [{"name": "long_job"}]})
        if current.model_called_at == 0.0:
            current.model_called_at = time.perf_counter()
        return "ok"

    bus = SqliteBusStore.open(state_dir)
    agent = Agent(model=FunctionModel(model), tools=[long_job], autonomy="full")
    eda = EventDrivenAgent(agent, bus, bus.sessions, session=SESSION)
    latencies: list[float] = []
    try:
        for i in range(rounds):
            current = Round()
            await eda.publish(user("user.input", f"go {i}"))
            running = asyncio.create_task(eda.run_until_idle())
            await current.tool_running.wait()
            started = time.perf_counter()
            await eda.publish(user("user.interrupt", f"{text} {i}"))
            await running
            latencies.append((current.model_called_at - started) * 1000)
            current.release.set()  # a detached job finishes; its late result is drained next
            await eda.wait_background()
            await eda.run_until_idle()
    finally:
        await eda.aclose()
        bus.close()
    return latencies


def user(kind: str, text: str) -> BusEvent:
    return BusEvent(
        kind=kind,  # type: ignore[arg-type]
        source="user",
        channel="cli",
        session=SESSION,
        content=EventContent(text=text),
    )


def report(label: str, values: list[float]) -> None:
    ordered = sorted(values)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    print(f"{label:34} p50 {p50:6.2f} ms   p99 {p99:6.2f} ms   max {ordered[-1]:6.2f} ms")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        stop = await measure(Path(tmp) / "stop", args.rounds, "stop")
        detach = await measure(Path(tmp) / "detach", args.rounds, "what time is it?")
    report("stop (running tool cancelled)", stop)
    report("interrupt (running tool detached)", detach)
    print("target: p99 <= 50 ms")


if __name__ == "__main__":
    asyncio.run(main())
