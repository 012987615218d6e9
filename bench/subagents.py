"""Sub-agents: spawn latency, 100 concurrent children, and the two context hand-offs.

Everything is real (SQLite bus and stores in a temporary state directory, the runtime, the
engine) except the model, a `FunctionModel` that plays parent and children.

1. spawn → first child model call: the time from the parent's model answering with a
   `spawn_subagent` call to the child's first model request (sync spawns, one after another).
2. 100 concurrent children in one process: the memory they hold while all of them wait in
   their model call, and the result-delivery latency — from a child's final answer to its
   result event being durable on the parent's session (p50, p99).
3. minimal vs distilled hand-off on a parent with a long trajectory: tokens sent in the
   child's first request, model calls, wall time.

    python bench/subagents.py
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from heron import Agent
from heron.always_on.bus.model import BusEvent
from heron.always_on.subagents.config import AgentEntry, SubagentsConfig
from heron.always_on.subagents.grant import SUBAGENT_TOOLS
from heron.always_on.subagents.service import Subagents, SubagentsSetup, open_subagents
from heron.messages import AssistantMessage, Message, ToolCallPart, ToolResultMessage, UserMessage
from heron.models.base import ModelRequest
from heron.models.scripted import FunctionModel, ModelTurn, ScriptedCall
from heron.models.tokens import count_message, counter_for_model
from heron.turn.approval import ApprovalManager, ApprovalPolicy

SPAWNS = 20
CONCURRENT = 100


def _child(request: ModelRequest) -> bool:
    return "You are the sub-agent" in request.system


def _open(state: Path, **config: Any) -> Subagents:
    setup = SubagentsSetup(
        config=SubagentsConfig(**config), entries={"worker": AgentEntry()}, agents_dir=None
    )
    return open_subagents(setup, state_dir=state, deliver=True)


def _agent(model: FunctionModel, subs: Subagents, session: str = "default") -> Agent:
    policy = ApprovalPolicy(auto_approve=sorted(SUBAGENT_TOOLS))
    return Agent(model=model, tools=subs.tools(session), approval=ApprovalManager(policy=policy))


def _spawn(i: int, **arguments: Any) -> ScriptedCall:
    return ScriptedCall(
        id=f"s{i}", name="spawn_subagent", arguments={"task": f"task {i}", **arguments}
    )


async def spawn_latency(state: Path) -> list[float]:
    subs = _open(state)
    marks: dict[str, float] = {}
    gaps: list[float] = []
    count = 0

    def decide(request: ModelRequest) -> ModelTurn | str:
        nonlocal count
        if _child(request):
            gaps.append(time.perf_counter() - marks["spawned"])
            return "status: done\nresult: ok\nopen: nothing"
        if isinstance(request.messages[-1], ToolResultMessage) and count >= SPAWNS:
            return "all done"
        count += 1
        marks["spawned"] = time.perf_counter()
        return ModelTurn(tool_calls=[_spawn(count, agent="worker")])

    agent = _agent(FunctionModel(decide), subs)
    agent.knobs = type(agent.knobs)(max_iterations=SPAWNS + 2)
    await agent.run("go")
    await subs.aclose()
    return gaps


async def concurrent(state: Path) -> tuple[float, list[float]]:
    subs = _open(state, max_concurrent=CONCURRENT)
    release, all_waiting, all_delivered = asyncio.Event(), asyncio.Event(), asyncio.Event()
    waiting = 0
    answered: dict[str, float] = {}
    delivered: dict[str, float] = {}

    async def decide(request: ModelRequest) -> ModelTurn | str:
        nonlocal waiting
        if _child(request):
            task = str(request.messages[0].content if request.messages else "")
            index = task.split("task ", 1)[1].split()[0]
            waiting += 1
            if waiting == CONCURRENT:
                all_waiting.set()
            await release.wait()
            answered[index] = time.perf_counter()
            return f"result {index}"
        if isinstance(request.messages[-1], ToolResultMessage):
            return "spawned"
        calls = [_spawn(i, agent="worker", mode="async") for i in range(CONCURRENT)]
        return ModelTurn(tool_calls=calls)

    def on_publish(event: BusEvent) -> None:
        if event.kind == "tool.result" and event.content.data.get("tool") == "spawn_subagent":
            index = event.content.text.split("result ", 1)[1].split()[0]
            delivered[index] = time.perf_counter()
            if len(delivered) == CONCURRENT:
                all_delivered.set()

    unwatch = subs.bus.watch(on_publish)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    agent = _agent(FunctionModel(decide), subs)
    await agent.run("go")
    await all_waiting.wait()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    release.set()
    await all_delivered.wait()
    unwatch()
    await subs.aclose()
    latencies = [delivered[i] - answered[i] for i in answered]
    return held, latencies


def _trajectory() -> list[Message]:
    history: list[Message] = [UserMessage(content="Audit the build scripts of the project.")]
    for i in range(30):
        history.append(
            AssistantMessage(
                text=f"Reading script {i}.",
                tool_calls=(ToolCallPart(id=f"r{i}", name="read_file", arguments={"i": i}),),
            )
        )
        history.append(
            ToolResultMessage(
                call_id=f"r{i}", name="read_file", content=f"script {i}: " + "make all; " * 60
            )
        )
    return history


async def handoff(state: Path, mode: str) -> dict[str, float]:
    subs = _open(state)
    counter = counter_for_model("openai:gpt-4o")
    seen: dict[str, float] = {"calls": 0}

    def decide(request: ModelRequest) -> ModelTurn | str:
        seen["calls"] += 1
        if _child(request):
            tokens = sum(count_message(counter, m) for m in request.messages)
            seen["child_tokens"] = tokens + counter.count(request.system)
            return "status: done\nresult: the scripts are fine\nopen: nothing"
        if "hand-off note" in request.system or "hand-off notes" in request.system:
            return (
                "Goal: audit build scripts. 30 scripts read; all call `make all`. Do not re-read."
            )
        if isinstance(request.messages[-1], ToolResultMessage) and request.messages[-1].name == (
            "spawn_subagent"
        ):
            return "done"
        return ModelTurn(tool_calls=[_spawn(0, context=mode)])

    agent = _agent(FunctionModel(decide), subs)
    started = time.perf_counter()
    await agent.run("Now delegate the summary.", history=_trajectory())
    seen["wall_ms"] = (time.perf_counter() - started) * 1000
    await subs.aclose()
    return seen


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        gaps = await spawn_latency(root / "a")
        print(
            f"spawn -> first child model call ({SPAWNS} sync spawns): "
            f"median {statistics.median(gaps) * 1000:.1f} ms, max {max(gaps) * 1000:.1f} ms"
        )
        held, latencies = await concurrent(root / "b")
        print(
            f"{CONCURRENT} concurrent children: {held / 1e6:.1f} MB held while all wait "
            f"({held / CONCURRENT / 1e3:.0f} kB each); result delivery p50 "
            f"{_pct(latencies, 0.5) * 1000:.1f} ms, p99 {_pct(latencies, 0.99) * 1000:.1f} ms"
        )
        for mode in ("minimal", "distilled"):
            seen = await handoff(root / f"c-{mode}", mode)
            print(
                f"hand-off {mode:<9}: {seen['child_tokens']:.0f} tokens in the child's first "
                f"request, {seen['calls']:.0f} model calls, {seen['wall_ms']:.0f} ms"
            )


if __name__ == "__main__":
    asyncio.run(main())
