"""Lifecycle hooks of the always-on agent (OpenClaw-style automation).

`LifecycleHooks` holds callbacks for start, stop and before/after each turn; `HookedAgent` is
an `Agent` whose turns run the turn hooks. `heron serve` runs its agent as a `HookedAgent`,
and the trigger runtime runs the start and stop hooks. A hook that raises is logged and
skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from heron.agent import Agent
from heron.turn.context import TurnState
from heron.turn.outcome import TurnOutcome

log = logging.getLogger("heron.always_on.hooks")

StartStopHook = Callable[[], Awaitable[None]]
BeforeTurnHook = Callable[[TurnState], Awaitable[None]]
AfterTurnHook = Callable[[TurnState, TurnOutcome], Awaitable[None]]


class LifecycleHooks:
    """Callbacks on start, stop, and before/after each turn, run in registration order."""

    def __init__(self) -> None:
        self.on_start: list[StartStopHook] = []
        self.on_stop: list[StartStopHook] = []
        self.before_turn: list[BeforeTurnHook] = []
        self.after_turn: list[AfterTurnHook] = []

    async def started(self) -> None:
        for hook in self.on_start:
            await _guarded("start", hook())

    async def stopped(self) -> None:
        for hook in self.on_stop:
            await _guarded("stop", hook())

    async def turn_starting(self, state: TurnState) -> None:
        for hook in self.before_turn:
            await _guarded("before_turn", hook(state))

    async def turn_finished(self, state: TurnState, outcome: TurnOutcome) -> None:
        for hook in self.after_turn:
            await _guarded("after_turn", hook(state, outcome))


async def _guarded(name: str, call: Awaitable[None]) -> None:
    try:
        await call
    except Exception:
        log.exception("%s hook failed; continuing", name)


class HookedAgent(Agent):
    """An `Agent` whose every turn runs `hooks.before_turn` and `hooks.after_turn`. Takes the
    `Agent` keyword arguments plus `hooks`."""

    def __init__(self, *, hooks: LifecycleHooks, **agent_args: Any) -> None:
        super().__init__(**agent_args)
        self.lifecycle = hooks

    @classmethod
    def around(cls, agent: Agent, hooks: LifecycleHooks) -> HookedAgent:
        """`agent` as a `HookedAgent` sharing its configuration (model, tools, approval, ...),
        for callers that receive an agent already built."""
        hooked = cls.__new__(cls)
        vars(hooked).update(vars(agent))
        hooked.lifecycle = hooks
        return hooked

    async def run_turn(
        self, state: TurnState, *, allowed_tools: Collection[str] | None = None
    ) -> TurnOutcome:
        await self.lifecycle.turn_starting(state)
        outcome = await super().run_turn(state, allowed_tools=allowed_tools)
        await self.lifecycle.turn_finished(state, outcome)
        return outcome
