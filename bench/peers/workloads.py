"""The three side-by-side workloads, one framework per process (so RSS is its own).

    python bench/peers/workloads.py FRAMEWORK

FRAMEWORK is `heron`, `heron-full` (every lifecycle feature on), `asyncio` (a bare loop),
`pydantic-ai`, `openai-agents` or `langgraph`; heron runs in heron's environment, the peers in
the one `bench/peers/run.py` creates. Prints one JSON object: `rss_mib` (import + agent
construction, measured first, before anything ran), `turn_us` {N: CPU µs per turn} and
`fanout_ms` (wall time of the one model turn with 50 parallel 50 ms calls, the final answer
included). Each framework uses its own scripted/function model and its defaults; only the
iteration caps are raised so that N = 400 turns fit.
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

SIZES = (20, 200, 400)
REPEATS = 3
"""Runs per figure (median); N = 200 and 400 run once for the peers, whose cost grows with N."""
FANOUT_CALLS = 50
FANOUT_SLEEP_S = 0.05

Runner = Callable[[int], Awaitable[None]]
"""Runs N turns of `add` then a final text (a fresh agent and model each time)."""


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


# -- heron -----------------------------------------------------------------------------------


def heron_setup(full: bool) -> tuple[Runner, Callable[[], Awaitable[None]]]:
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

    @tool
    async def add(a: int, b: int) -> str:
        """Add two integers.

        Args:
            a: The first.
            b: The second.
        """
        return str(a + b)

    @tool(read_only=True)
    async def wait_io(i: int) -> str:
        """Simulated 50 ms of I/O.

        Args:
            i: Call number.
        """
        await asyncio.sleep(FANOUT_SLEEP_S)
        return f"done {i}"

    class NoopHook(ToolHook):
        async def before_tool_call(self, call: Any) -> None:
            return None

        async def after_tool_call(self, call: Any, outcome: Any) -> None:
            return None

    def agent(n: int) -> Agent:
        turns: list[dict[str, Any]] = [
            {"tool_calls": [{"id": f"c{i}", "name": "add", "arguments": {"a": i, "b": 1}}]}
            for i in range(n)
        ]
        model = ScriptedModel([*turns, {"text": "done"}])
        if not full:
            # Defaults but `autonomy="full"`: under the default supervised autonomy with no
            # operator, `add` (not read-only) would be denied by policy, never run.
            return Agent(
                model=model,
                tools=[add],
                autonomy="full",
                knobs=RuntimeKnobs(max_iterations=n + 1),
            )
        return Agent(
            model=model,
            tools=[add],
            approval=ApprovalManager(policy=ApprovalPolicy(auto_approve=["add"])),
            knobs=RuntimeKnobs(max_iterations=n + 1),
            observer=RecordingObserver(),
            hooks=[NoopHook()],
            receipts=ReceiptScope("run"),
        )

    agent(1)  # construction counts in the RSS figure

    async def run(n: int) -> None:
        result = await agent(n).run("go", sink=lambda event: None)
        assert result.ok and result.text == "done", result.outcome

    async def fanout() -> None:
        calls = [
            {"id": f"f{i}", "name": "wait_io", "arguments": {"i": i}} for i in range(FANOUT_CALLS)
        ]
        model = ScriptedModel([{"tool_calls": calls}, {"text": "ok"}])
        result = await Agent(model=model, tools=[wait_io]).run("go")
        assert result.ok

    return run, fanout


# -- a bare asyncio loop: the floor ----------------------------------------------------------


def asyncio_setup() -> tuple[Runner, Callable[[], Awaitable[None]]]:
    async def add(a: int, b: int) -> str:
        return str(a + b)

    async def model(i: int, n: int) -> dict[str, Any]:
        return {"name": "add", "arguments": {"a": i, "b": 1}} if i < n else {"text": "done"}

    async def run(n: int) -> None:
        history: list[Any] = []
        for i in range(n + 1):
            step = await model(i, n)
            history.append(step)
            if "name" in step:
                history.append(await asyncio.ensure_future(add(**step["arguments"])))

    async def fanout() -> None:
        await asyncio.gather(*(asyncio.sleep(FANOUT_SLEEP_S) for _ in range(FANOUT_CALLS)))

    return run, fanout


# -- pydantic-ai -----------------------------------------------------------------------------


def pydantic_ai_setup() -> tuple[Runner, Callable[[], Awaitable[None]]]:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import UsageLimits

    async def add(a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)

    async def wait_io(i: int) -> str:
        """Simulated 50 ms of I/O."""
        await asyncio.sleep(FANOUT_SLEEP_S)
        return f"done {i}"

    def scripted(n: int) -> Callable[[list[ModelMessage], AgentInfo], ModelResponse]:
        step = 0

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            nonlocal step
            step += 1
            if step <= n:
                return ModelResponse(
                    parts=[ToolCallPart("add", {"a": step, "b": 1}, tool_call_id=f"c{step}")]
                )
            return ModelResponse(parts=[TextPart("done")])

        return respond

    Agent(FunctionModel(scripted(1)), tools=[add])
    limits = UsageLimits(request_limit=None)

    async def run(n: int) -> None:
        result = await Agent(FunctionModel(scripted(n)), tools=[add]).run("go", usage_limits=limits)
        assert result.output == "done", result.output

    async def fanout() -> None:
        first = True

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            nonlocal first
            if first:
                first = False
                return ModelResponse(
                    parts=[
                        ToolCallPart("wait_io", {"i": i}, tool_call_id=f"f{i}")
                        for i in range(FANOUT_CALLS)
                    ]
                )
            return ModelResponse(parts=[TextPart("ok")])

        result = await Agent(FunctionModel(respond), tools=[wait_io]).run("go")
        assert result.output == "ok"

    return run, fanout


# -- the OpenAI Agents SDK -------------------------------------------------------------------


def openai_agents_setup() -> tuple[Runner, Callable[[], Awaitable[None]]]:
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.testing.model import ScriptedModel, assistant_message, function_call

    set_tracing_disabled(True)  # no exporter here; tracing would only queue spans

    @function_tool
    async def add(a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)

    @function_tool
    async def wait_io(i: int) -> str:
        """Simulated 50 ms of I/O."""
        await asyncio.sleep(FANOUT_SLEEP_S)
        return f"done {i}"

    def agent(n: int) -> Agent[Any]:
        steps: list[Any] = [
            [function_call("add", {"a": i, "b": 1}, call_id=f"c{i}")] for i in range(n)
        ]
        model = ScriptedModel([*steps, [assistant_message("done")]])
        return Agent(name="bench", model=model, tools=[add])

    agent(1)

    async def run(n: int) -> None:
        result = await Runner.run(agent(n), "go", max_turns=n + 2)
        assert result.final_output == "done", result.final_output

    async def fanout() -> None:
        calls = [function_call("wait_io", {"i": i}, call_id=f"f{i}") for i in range(FANOUT_CALLS)]
        model = ScriptedModel([calls, [assistant_message("ok")]])
        result = await Runner.run(Agent(name="fan", model=model, tools=[wait_io]), "go")
        assert result.final_output == "ok"

    return run, fanout


# -- LangGraph -------------------------------------------------------------------------------


def langgraph_setup() -> tuple[Runner, Callable[[], Awaitable[None]]]:
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.prebuilt import create_react_agent

    class ScriptedChat(FakeMessagesListChatModel):
        """langchain-core's scripted chat model; tools are already in its script."""

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    @tool
    async def add(a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)

    @tool
    async def wait_io(i: int) -> str:
        """Simulated 50 ms of I/O."""
        await asyncio.sleep(FANOUT_SLEEP_S)
        return f"done {i}"

    def agent(n: int) -> Any:
        responses: list[Any] = [
            AIMessage(
                content="",
                tool_calls=[{"name": "add", "args": {"a": i, "b": 1}, "id": f"c{i}"}],
            )
            for i in range(n)
        ]
        return create_react_agent(ScriptedChat(responses=[*responses, AIMessage("done")]), [add])

    agent(1)

    async def run(n: int) -> None:
        state = await agent(n).ainvoke(
            {"messages": [("user", "go")]}, {"recursion_limit": 2 * n + 5}
        )
        assert state["messages"][-1].content == "done"

    async def fanout() -> None:
        calls = [{"name": "wait_io", "args": {"i": i}, "id": f"f{i}"} for i in range(FANOUT_CALLS)]
        model = ScriptedChat(responses=[AIMessage(content="", tool_calls=calls), AIMessage("ok")])
        state = await create_react_agent(model, [wait_io]).ainvoke({"messages": [("user", "go")]})
        assert state["messages"][-1].content == "ok"

    return run, fanout


SETUPS: dict[str, Callable[[], tuple[Runner, Callable[[], Awaitable[None]]]]] = {
    "heron": lambda: heron_setup(full=False),
    "heron-full": lambda: heron_setup(full=True),
    "asyncio": asyncio_setup,
    "pydantic-ai": pydantic_ai_setup,
    "openai-agents": openai_agents_setup,
    "langgraph": langgraph_setup,
}


def cpu_us_per_turn(run: Runner, n: int, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        gc.collect()
        started = time.process_time()
        asyncio.run(run(n))
        samples.append((time.process_time() - started) / (n + 1) * 1e6)
    return statistics.median(samples)


def fanout_ms(fanout: Callable[[], Awaitable[None]]) -> float:
    samples = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        asyncio.run(fanout())
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def main() -> None:
    framework = sys.argv[1]
    run, fanout = SETUPS[framework]()
    rss = rss_mib()
    asyncio.run(run(20))  # warm caches and lazy imports; not in the figures
    quick = framework in ("heron", "heron-full", "asyncio")
    turns = {n: cpu_us_per_turn(run, n, REPEATS if quick or n <= 20 else 1) for n in SIZES}
    print(json.dumps({"rss_mib": rss, "turn_us": turns, "fanout_ms": fanout_ms(fanout)}))


if __name__ == "__main__":
    main()
