"""What the sub-agent runtime knows of a child: who calls a sub-agent tool (`Parent`), the
arguments of one spawn (`Spawn`), and a child running in this process (`Live`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from heron.agent import Agent
from heron.always_on.bus.routing import AGENT_SEGMENT
from heron.always_on.subagents.definitions import AgentDefinition
from heron.always_on.subagents.grant import Grant
from heron.always_on.subagents.store import Mode, SubagentRecord
from heron.turn.budgets import RunBudget
from heron.turn.cancel import CancelScope
from heron.turn.context import TurnHandle

__all__ = ["ContextMode", "Live", "Parent", "Spawn", "Stop"]

ContextMode = Literal["minimal", "distilled"]
Stop = tuple[Literal["asked", "done"], str]


@dataclass(frozen=True, kw_only=True, slots=True)
class Parent:
    """Who calls a sub-agent tool: a hosted session's agent (`child=None`) or a child."""

    session: str
    """The hosted session at the top of the tree."""
    child: str | None = None
    depth: int = 0

    @property
    def own_session(self) -> str:
        return self.session if self.child is None else f"{self.session}{AGENT_SEGMENT}{self.child}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Spawn:
    """The arguments of one `spawn_subagent` call."""

    task: str
    agent: str | None = None
    mode: Mode = "sync"
    context: ContextMode = "minimal"
    tools: tuple[str, ...] | None = None
    budget: Mapping[str, float] | None = None
    output_schema: Mapping[str, Any] | None = None
    write: bool = False


@dataclass(kw_only=True, eq=False)
class Live:
    """A child running in this process."""

    record: SubagentRecord
    definition: AgentDefinition
    spawn: Spawn
    handle: TurnHandle
    budget: RunBudget
    grant: Grant
    """What of the parent's it may use (`grant.grant_tools`), decided at the spawn."""
    scope: CancelScope = field(default_factory=CancelScope)
    task: asyncio.Task[None] | None = None
    stops: asyncio.Queue[Stop] = field(default_factory=asyncio.Queue)
    """For a sync parent: the child asked a question, or ended."""
    answer: asyncio.Future[str] | None = None
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when a descendant ends or a message arrives while the child waits for them."""
    asked: int = 0
    """Questions the child asked (`ask_parent`)."""
    waited: bool = False
    """A sync parent is waiting for this child to ask or end."""
    reports: int = 0
    last_report: str = ""
    question: str = ""
    """The question it waits on (`ask_parent`), while it waits."""
    progress: Callable[[str], None] = field(default=lambda _line: None)
    """A sync parent's progress line for its spawn call (the child's reports)."""
    cancel_status: Literal["cancelled", "timed_out"] = "cancelled"
    ended: bool = False
    """Its run is over (the status is decided); it is closing its subtree and session."""
    agent: Agent | None = None
    """Its agent, while it runs (an approved call of its runs through it)."""
    slot: bool = False
    """It holds one of the runtime's slots (it is taking turns, not waiting idle)."""
