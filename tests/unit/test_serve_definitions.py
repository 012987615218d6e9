"""What a wake of a session reuses and what it must not: the tool definitions (schemas,
validators, descriptions) are made once and shared by every session of a server, while each
session's tools act on that session only, and a server with another configuration never gets
the first one's definitions, nor a sub-agent its parent's whole set. Real `HeronServer`s on
real SQLite state directories, events published on their buses; only the model is scripted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from heron.agent import Agent
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.jobs.manager import JobConfig
from heron.always_on.server import HeronServer, ServeConfig
from heron.always_on.subagents.config import AgentEntry, SubagentsConfig
from heron.always_on.subagents.names import SUBAGENT_TOOLS
from heron.always_on.subagents.service import SubagentsSetup
from heron.always_on.triggers.runtime import TriggerConfig
from heron.messages import ToolResultMessage, UserMessage
from heron.models.base import ModelRequest
from heron.models.scripted import FunctionModel, ModelTurn, ScriptedCall
from heron.tools.definition import Tool, ToolSpec
from support.waiting import until

BOUND = 10.0


async def hello(server: HeronServer, session: str) -> None:
    """Publish `hello <session>` to `session`, one of the server's from now on."""
    host, bus = server.host, server.bus
    assert host is not None and bus is not None
    host.claim(session)
    await bus.publish(
        BusEvent(
            kind="webhook.received",
            source="system",
            channel="webhook",
            session=session,
            content=EventContent(text=f"hello {session}"),
        )
    )


class Served:
    """One server whose model, in each session, sets a timer named after the session, then
    lists the timers; it keeps the tool specs each request offered and what was listed."""

    def __init__(self, state_dir: Path, **config: Any) -> None:
        self.offered: dict[str, list[dict[str, ToolSpec]]] = {}
        self.listed: dict[str, list[str]] = {}

        def decide(request: ModelRequest) -> str | ModelTurn:
            first = request.messages[0]
            assert isinstance(first, UserMessage)
            session = first.content.split("hello ", 1)[1].split()[0]
            self.offered.setdefault(session, []).append({s.name: s for s in request.tools})
            last = request.messages[-1]
            if isinstance(last, UserMessage):
                call = ScriptedCall(
                    name="set_timer", arguments={"message": f"{session} timer", "after_s": 600}
                )
                return ModelTurn(tool_calls=[call])
            assert isinstance(last, ToolResultMessage)
            if "timer tmr-" in last.content and "set" in last.content:
                return ModelTurn(tool_calls=[ScriptedCall(name="list_timers")])
            self.listed[session] = [line.split(": ", 1)[1] for line in last.content.splitlines()]
            return "done"

        def make_agent(tools: list[Tool]) -> Agent:
            return Agent(model=FunctionModel(decide), tools=tools, autonomy="full")

        self.server = HeronServer(
            ServeConfig(state_dir=state_dir, poll_interval_s=0.05, idle_timeout_s=0.1, **config),
            make_agent,
        )

    async def tell(self, session: str) -> None:
        """Wake `session` with an event and wait until its model listed the timers."""
        self.listed.pop(session, None)
        await hello(self.server, session)
        await until(lambda: session in self.listed, f"{session}'s model to list its timers")

    async def parked(self, session: str) -> None:
        host = self.server.host
        assert host is not None
        await until(lambda: session in host.parked, f"{session} to be parked")


@pytest.fixture
async def serving(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    running: list[tuple[HeronServer, asyncio.Task[None]]] = []

    async def start(name: str, **config: Any) -> Served:
        served = Served(tmp_path / name, workspace=tmp_path, **config)
        await served.server.start()
        running.append((served.server, asyncio.ensure_future(served.server.serve())))
        return served

    yield start
    for server, task in running:
        server.stop()
        await asyncio.wait_for(task, BOUND)


async def test_sessions_share_one_definition_of_each_tool_and_each_acts_on_its_own_session(
    serving: Callable[..., Any],
) -> None:
    served: Served = await serving("one")
    await served.tell("alpha")
    await served.tell("beta")
    await served.parked("alpha")
    await served.tell("alpha")  # woken again: its tools are built anew, from the same definitions

    # Each session's tools wrote and read its own timers, though the tools are made from one
    # definition per tool: the specs the model was offered are the very same objects.
    assert served.listed == {"alpha": ["alpha timer", "alpha timer"], "beta": ["beta timer"]}
    first, *later = [offer for session in ("alpha", "beta") for offer in served.offered[session]]
    for offer in later:
        assert offer.keys() == first.keys()
        for name in ("set_timer", "list_timers", "start_job", "send_message"):
            assert offer[name] is first[name], name


async def test_a_server_with_another_configuration_gets_definitions_of_its_own(
    serving: Callable[..., Any],
) -> None:
    hour: Served = await serving("hour", triggers=TriggerConfig())
    minute: Served = await serving(
        "minute", triggers=TriggerConfig(jobs=JobConfig(default_timeout_s=60))
    )
    await hour.tell("alpha")
    await minute.tell("alpha")
    await hour.tell("beta")

    def start_job(served: Served, session: str) -> ToolSpec:
        return served.offered[session][-1]["start_job"]

    assert "the deadline is 3600 s" in start_job(hour, "alpha").description
    assert "the deadline is 60 s" in start_job(minute, "alpha").description
    # The first server's next wake is not served the second one's definition either.
    assert start_job(hour, "beta") is start_job(hour, "alpha")
    assert start_job(minute, "alpha") is not start_job(hour, "alpha")
    assert minute.listed == {"alpha": ["alpha timer"]}  # and its own sessions' timers


async def test_a_child_gets_its_narrowed_grant_and_the_next_session_its_full_set(
    tmp_path: Path,
) -> None:
    offered: dict[str, list[str]] = {}

    def decide(request: ModelRequest) -> str | ModelTurn:
        names = sorted(spec.name for spec in request.tools)
        if "You are the sub-agent" in request.system:
            offered.setdefault("child", names)
            return "status: done\nresult: ok\nopen: nothing"
        first = request.messages[0]
        assert isinstance(first, UserMessage)
        session = first.content.split("hello ", 1)[1].split()[0]
        offered.setdefault(session, names)
        if len(request.messages) > 1:
            return "done"
        arguments = {"task": "look", "agent": "helper", "tools": ["list_timers"]}
        return ModelTurn(tool_calls=[ScriptedCall(name="spawn_subagent", arguments=arguments)])

    setup = SubagentsSetup(
        config=SubagentsConfig(), entries={"helper": AgentEntry()}, agents_dir=None
    )
    server = HeronServer(
        ServeConfig(
            state_dir=tmp_path / "state", workspace=tmp_path, poll_interval_s=0.05, subagents=setup
        ),
        lambda tools: Agent(model=FunctionModel(decide), tools=tools, autonomy="full"),
    )
    await server.start()
    serving = asyncio.ensure_future(server.serve())
    try:
        for session in ("parent", "sibling"):
            await hello(server, session)
            if session == "parent":  # the child is spawned, and woken, before the sibling
                await until(lambda: "child" in offered, "the child's first model call")
        await until(lambda: "sibling" in offered, "the sibling's first model call")
    finally:
        server.stop()
        await asyncio.wait_for(serving, BOUND)

    # The child's tools are the grant, narrowed to one of its parent's (plus its own); the
    # session woken after it is built from the same definitions, with everything.
    assert set(offered["child"]) - SUBAGENT_TOOLS == {"list_timers"}
    assert offered["sibling"] == offered["parent"]
    assert {"set_timer", "start_job", "spawn_subagent"} <= set(offered["sibling"])
