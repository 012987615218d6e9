"""`HeronServer` runs its agent as a `HookedAgent`: per-turn lifecycle hooks run."""

from __future__ import annotations

from pathlib import Path

import pytest

from heron import ScriptedModel
from heron._support.clock import RealClock, timestamp
from heron.agent import Agent
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.hooks import HookedAgent, LifecycleHooks
from heron.always_on.server import HeronServer, ServeConfig
from heron.tools.definition import Tool
from heron.turn.context import TurnState
from heron.turn.outcome import TurnOutcome


async def test_the_servers_agent_runs_before_and_after_turn_hooks(tmp_path: Path) -> None:
    calls: list[str] = []
    hooks = LifecycleHooks()

    async def before(state: TurnState) -> None:
        calls.append(f"before:{state.history[-1]}")

    async def after(_state: TurnState, outcome: TurnOutcome) -> None:
        calls.append(f"after:{outcome.text}")

    hooks.before_turn.append(before)
    hooks.after_turn.append(after)

    def make_agent(tools: list[Tool]) -> Agent:
        return Agent(model=ScriptedModel([{"text": "hello back"}]), tools=tools, autonomy="full")

    config = ServeConfig(state_dir=tmp_path / "state", session="main", workspace=tmp_path)
    server = HeronServer(config, make_agent, hooks=hooks)
    await server.start()
    try:
        assert server.agent is not None
        assert isinstance(server.agent.agent, HookedAgent)
        event = BusEvent(
            kind="user.input",
            source="user",
            channel="cli",
            session="main",
            content=EventContent(text="hello"),
            timestamp=timestamp(RealClock()),
        )
        await server.agent.publish(event)
        await server.agent.run_until_idle()
    finally:
        await server.aclose()
    assert calls[0].startswith("before:") and "hello" in calls[0]
    assert calls[1:] == ["after:hello back"]


async def test_a_second_writer_on_the_servers_session_is_refused_while_it_runs(
    tmp_path: Path,
) -> None:
    from heron.always_on.server import ServeError
    from heron.sessions.lock import SessionInUseError, SessionLock

    first = HeronServer(
        ServeConfig(state_dir=tmp_path), lambda tools: Agent(model=ScriptedModel([]), tools=tools)
    )
    await first.start()
    try:
        with pytest.raises(SessionInUseError):
            SessionLock(tmp_path, "default").acquire()
        second = HeronServer(
            ServeConfig(state_dir=tmp_path),
            lambda tools: Agent(model=ScriptedModel([]), tools=tools),
        )
        with pytest.raises(ServeError, match="in use"):
            await second.start()
    finally:
        await first.aclose()
    lock = SessionLock(tmp_path, "default")
    lock.acquire()
    lock.release()
