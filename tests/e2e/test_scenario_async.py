"""Experiment 4-6: a synchronous model in an asynchronous world.

A `HeronServer` runs the event-driven agent with real background jobs (detached bash
processes under a supervisor, reported on the bus). The model's decisions are scripted by
small functions that read what a model would read — the events and tool results in the
request — and everything else is real.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from heron import Agent, FunctionModel, ModelRequest, ModelTurn, RuntimeKnobs, tool
from heron.always_on.bus.model import BusEvent, EventContent, EventKind
from heron.always_on.server import HeronServer, ServeConfig
from heron.messages import AssistantMessage, Message, ToolResultMessage, UserMessage
from heron.tools.definition import Tool
from heron.turn.events import BaseEvent, FinalEvent
from support.waiting import until

BOUND = 20.0
"""Upper bound for waits; a loaded 2-core machine stays far below it."""


@dataclass
class Harness:
    """A running server, the finals it produced and the requests its model saw."""

    server: HeronServer
    workspace: Path
    finals: list[str] = field(default_factory=list)
    requests: list[list[Message]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def say(self, text: str, kind: EventKind = "user.input") -> None:
        assert self.server.agent is not None
        event = BusEvent(
            kind=kind, source="user", channel="cli", content=EventContent(text=text), session="main"
        )
        assert await self.server.agent.publish(event)

    async def until(self, predicate: Callable[[], bool]) -> None:
        """Wait (bounded) until `predicate` holds; re-checked after every final answer."""
        await until(predicate, "the finals to match", within_s=BOUND, changed=self.changed)

    def job(self, job_id: str) -> Any:
        assert self.server.jobs is not None
        return self.server.jobs.get(job_id)


PAGE = (
    '<!DOCTYPE html><html lang="ja"><body><h1>四半期報告</h1>'
    "<p>売上は12%増加、費用は横ばい。</p></body></html>"
)

Decide = Callable[[ModelRequest], "str | ModelTurn"]


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    servers: list[tuple[HeronServer, asyncio.Task[None]]] = []

    async def start(decide: Decide, extra_tools: list[Tool] | None = None) -> Harness:
        workspace = tmp_path / "ws"
        workspace.mkdir(exist_ok=True)
        config = ServeConfig(state_dir=tmp_path / "state", session="main", workspace=workspace)
        h: Harness

        def sink(event: BaseEvent) -> None:
            if isinstance(event, FinalEvent):
                h.finals.append(event.text)
                h.changed.set()

        def model(request: ModelRequest) -> str | ModelTurn:
            h.requests.append(list(request.messages))
            return decide(request)

        def make_agent(tools: list[Tool]) -> Agent:
            return Agent(
                model=FunctionModel(model),
                tools=[*tools, *(extra_tools or [])],
                autonomy="full",
                knobs=RuntimeKnobs(max_iterations=20, parallel="all"),
            )

        server = HeronServer(config, make_agent, sink=sink)
        h = Harness(server=server, workspace=workspace)
        await server.start()
        servers.append((server, asyncio.create_task(server.serve())))
        return h

    yield start
    for server, task in servers:
        server.stop()
        await asyncio.wait_for(task, BOUND)


_call_ids = itertools.count(1)


def turn(*calls: tuple[str, dict[str, Any]]) -> ModelTurn:
    return ModelTurn.model_validate(
        {
            "tool_calls": [
                {"id": f"c{next(_call_ids)}", "name": name, "arguments": args}
                for name, args in calls
            ]
        }
    )


def job_id_in(text: str) -> str:
    match = re.search(r"job-[0-9a-f]+", text)
    assert match is not None, text
    return match.group(0)


def fresh(request: ModelRequest) -> list[Message]:
    """What arrived since the model last spoke."""
    tail: list[Message] = []
    for message in reversed(request.messages):
        if isinstance(message, AssistantMessage):
            break
        tail.append(message)
    return tail[::-1]


def texts(messages: list[Message]) -> str:
    return "\n".join(m.content for m in messages if isinstance(m, UserMessage | ToolResultMessage))


def results(messages: list[Message], tool_name: str) -> list[ToolResultMessage]:
    return [m for m in messages if isinstance(m, ToolResultMessage) and m.name == tool_name]


def job_ids(text: str) -> list[str]:
    return re.findall(r"background job (job-[0-9a-f]+)", text)


# -- (1) a long command runs asynchronously ---------------------------------------------------


async def test_time_is_answered_at_once_and_the_command_result_is_presented_when_it_lands(
    harness: Callable[..., Any],
) -> None:
    def decide(request: ModelRequest) -> str | ModelTurn:
        new = fresh(request)
        said = texts(new)
        if "run the release build" in said:
            command = 'while [ ! -f go ]; do sleep 0.02; done; echo "build ok: 0 errors"'
            return turn(("start_job", {"command": command}))
        if results(new, "start_job"):
            return "The build is running in the background; I will report when it lands."
        if "what time is it?" in said:
            return "It is 10:00."
        landed = re.search(r"lines of output[^\n]*\n(.*)", said)
        if "completed" in said and landed:
            return f"The release build finished: {landed.group(1)}"
        return "Noted."

    h: Harness = await harness(decide)
    await h.say("run the release build")
    await h.until(lambda: len(h.finals) == 1)
    [started] = [r for m in h.requests for r in results(m, "start_job")]
    job_id = job_id_in(started.content)

    await h.say("what time is it?")
    await h.until(lambda: len(h.finals) == 2)
    assert h.finals[1] == "It is 10:00."
    assert h.job(job_id).state == "working"  # answered while the command still runs

    (h.workspace / "go").touch()
    await h.until(lambda: len(h.finals) == 3)
    assert h.finals[2] == "The release build finished: build ok: 0 errors"
    assert h.job(job_id).state == "completed"
    landed = h.requests[-1][-1]
    assert isinstance(landed, UserMessage)
    assert f"background job {job_id}" in landed.content and "completed" in landed.content


# -- (2) instructions sent during a long task are all honoured --------------------------------


async def test_two_instructions_sent_during_a_long_task_are_both_in_the_batch_when_it_ends(
    harness: Callable[..., Any],
) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    @tool(read_only=True)
    async def compile_report() -> str:
        """Compile the quarterly report (slow)."""
        started.set()
        await release.wait()
        return "Revenue up 12%, costs flat."

    def decide(request: ModelRequest) -> str | ModelTurn:
        new = fresh(request)
        said = texts(new)
        if "quarterly report" in said:
            return turn(("compile_report", {}))
        if "reply in Japanese" in said and "make it a web page" in said:
            return PAGE
        return "Revenue up 12%, costs flat."

    h: Harness = await harness(decide, [compile_report])
    await h.say("summarise the quarterly report")
    await asyncio.wait_for(started.wait(), BOUND)
    await h.say("reply in Japanese")
    await h.say("make it a web page")
    release.set()
    await h.until(lambda: len(h.finals) == 1)

    batch = h.requests[-1][-1]
    assert isinstance(batch, UserMessage)
    assert "reply in Japanese" in batch.content and "make it a web page" in batch.content
    assert batch.content.endswith("2 pending events: 2 user messages; address all of them.")
    assert isinstance(h.requests[-1][-2], ToolResultMessage)  # the report's real result first
    assert len(h.requests) == 2  # the model was not called while the task ran
    assert h.finals[0].startswith('<!DOCTYPE html><html lang="ja">') and "四半期報告" in h.finals[0]


# -- (3) "stop" cancels the flow and the async tools ------------------------------------------


async def test_stop_cancels_the_turn_and_the_background_job_and_the_trajectory_says_so(
    harness: Callable[..., Any],
) -> None:
    step_started = asyncio.Event()

    @tool
    async def deploy_step() -> str:
        """Roll out the next deployment step (slow)."""
        step_started.set()
        await asyncio.Event().wait()  # only cancellation ends it
        return "unreachable"

    def decide(request: ModelRequest) -> str | ModelTurn:
        new = fresh(request)
        said = texts(new)
        if "deploy everything" in said:
            return turn(("start_job", {"command": "sleep 600"}))
        if results(new, "start_job"):
            return turn(("deploy_step", {}))
        if "cancelled" in said and job_ids(said):
            return "The background job was cancelled too."
        if "stop" in said:
            return "Stopped."
        return "Noted."

    h: Harness = await harness(decide, [deploy_step])
    await h.say("deploy everything")
    await asyncio.wait_for(step_started.wait(), BOUND)
    assert h.server.jobs is not None
    [job] = h.server.jobs.jobs()
    assert job.state == "working"
    await h.say("stop", kind="user.interrupt")
    await h.until(
        lambda: (
            h.job(job.id).state == "cancelled"
            and "The background job was cancelled too." in h.finals
        )
    )

    assert h.server.agent is not None
    history = h.server.agent.history
    interrupted = [
        m for m in history if isinstance(m, ToolResultMessage) and m.name == "deploy_step"
    ]
    assert len(interrupted) == 1
    assert interrupted[0].content.startswith("[interrupted: cancelled while running]")
    # "stop" alone, or in one batch with the job's end when that landed first.
    stop_at = next(
        i
        for i, m in enumerate(history)
        if isinstance(m, UserMessage) and "stop" in m.content.splitlines()
    )
    assert history.index(interrupted[0]) < stop_at
    assert any(
        isinstance(m, UserMessage)
        and f"background job {job.id}" in m.content
        and "cancelled" in m.content
        for m in history[stop_at:]
    )
    assert h.server.agent.outcomes[0].status == "cancelled"


# -- (4) three scripts at 30/20/10 % per second ------------------------------------------------


def progress_script(rate: int) -> str:
    """Progress computed from elapsed time, so a slow machine shifts it but keeps the ratios."""
    return (
        "start=${EPOCHREALTIME/./}; while :; do now=${EPOCHREALTIME/./}; "
        f"p=$(( (now-start)*{rate}/1000000 )); [ $p -ge 100 ] && p=100; "
        'echo "progress $p%"; [ $p -ge 100 ] && break; sleep 0.05; done'
    )


async def test_when_the_fastest_finishes_the_slowest_is_cancelled_and_the_rest_reported(
    harness: Callable[..., Any],
) -> None:
    rates = {30: "", 20: "", 10: ""}
    seen_progress: dict[str, int] = {}
    cancelled: list[str] = []

    def decide(request: ModelRequest) -> str | ModelTurn:
        new = fresh(request)
        said = texts(new)
        if "run the three scripts" in said:
            return turn(*(("start_job", {"command": progress_script(r)}) for r in rates))
        started = results(new, "start_job")
        if started:
            for rate, result in zip(rates, started, strict=True):
                rates[rate] = job_id_in(result.content)
            return "Three scripts started."
        statuses = results(new, "job_status")
        if statuses:
            calls = []
            for status in statuses:
                job_id = status.content.split(":")[0]
                percent = int(re.findall(r"progress (\d+)%", status.content)[-1])
                seen_progress[job_id] = percent
                if percent < 50:
                    cancelled.append(job_id)
                    calls.append(("cancel_job", {"job_id": job_id}))
            return turn(*calls) if calls else "All past half way; letting them run."
        if results(new, "cancel_job"):
            return "Cancelled the one not past 50%."
        finished = [
            j for j in job_ids(said) if re.search(rf"background job {j} \(.*\) completed", said)
        ]
        if finished and rates[30] in finished and not seen_progress:
            others = [rates[20], rates[10]]
            return turn(*(("job_status", {"job_id": j}) for j in others))
        if rates[20] in finished:
            return f"All done: {rates[30]} and {rates[20]} completed, {cancelled[0]} was cancelled."
        return "Noted."

    h: Harness = await harness(decide)
    await h.say("run the three scripts")
    fast, mid, slow = await _started(h, rates)
    await h.until(lambda: any(f.startswith("All done") for f in h.finals))

    assert (h.job(fast).state, h.job(mid).state, h.job(slow).state) == (
        "completed",
        "completed",
        "cancelled",
    )
    assert cancelled == [slow]
    # Queried right after the fastest finished (~3.3 s): about 66% and 33%, i.e. twice as far.
    assert 55 <= seen_progress[mid] <= 95 and 25 <= seen_progress[slow] < 50
    assert 1.6 <= seen_progress[mid] / seen_progress[slow] <= 2.4
    assert h.finals[-1] == f"All done: {fast} and {mid} completed, {slow} was cancelled."


async def _started(h: Harness, rates: dict[int, str]) -> tuple[str, str, str]:
    await h.until(lambda: all(rates.values()))
    return rates[30], rates[20], rates[10]
