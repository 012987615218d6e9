"""`SubagentStore`: the durable record of every sub-agent, the interface each back end
implements (the embedded one is `heron.always_on.subagents.sqlite_store`).

A record is the runtime's account of a child, never the child's own: its `status` follows the
shared vocabulary (`heron._support.vocabulary`) and is changed only through `finish`/`advance`,
which refuse to move a finished record anywhere else (a late "working" cannot resurrect a
cancelled child, a second result cannot overwrite the first). `claim_delivery` is the
compare-and-set that lets exactly one process hand a result to the parent.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from heron._support.vocabulary import Outcome, Status, is_terminal
from heron.always_on.bus.routing import AGENT_SEGMENT
from heron.errors import HeronError

__all__ = ["Mode", "SubagentError", "SubagentRecord", "SubagentStore", "Usage", "descendants"]


class SubagentError(HeronError, ValueError):
    """A spawn, message or cancel the runtime refuses (its text is what the model reads)."""


Mode = Literal["sync", "async", "stream", "multi-turn"]
"""How the parent waits: `sync` (the call returns the result), `async` (a task id now, the
result later as an event for the call), `stream` (progress reports arrive as events too),
`multi-turn` (async, and the child may ask the parent questions and wait for the answer)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Usage:
    """What a child (with its own children) spent."""

    model_calls: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    def to_data(self) -> dict[str, Any]:
        return {
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": round(self.cost_usd, 6),
        }

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Usage:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True, kw_only=True, slots=True)
class SubagentRecord:
    """One child, as the runtime keeps it."""

    id: str
    agent: str
    """The definition it runs (`general` when the spawn named none)."""
    task: str
    mode: Mode
    parent: str | None
    """The parent child's id; `None` when the parent is a hosted session's own agent."""
    root_session: str
    """The hosted session at the top of the tree (where the tree's results finally land)."""
    parent_session: str
    """The session whose history receives this child's result."""
    call_id: str
    """The parent's `spawn_subagent` call the result is bound to."""
    depth: int
    status: Status = "queued"
    outcome: Outcome | None = None
    result: str = ""
    error: str = ""
    usage: Usage = field(default_factory=Usage)
    budget: Mapping[str, float] = field(default_factory=dict)
    """The limits the child ran under (`model_calls`, `total_tokens`, `cost_usd`,
    `wall_time_s`)."""
    created_at: float = 0.0
    ended_at: float | None = None
    delivered: bool = False
    """Whether the result was handed to the parent (once: `claim_delivery`)."""
    owner: int = 0
    """The process id that runs it (a restart reports the children of a dead owner)."""

    @property
    def session(self) -> str:
        """The child's own session on the bus."""
        return f"{self.root_session}{AGENT_SEGMENT}{self.id}"

    @property
    def finished(self) -> bool:
        return is_terminal(self.status)

    def to_data(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "agent": self.agent,
            "task": self.task,
            "mode": self.mode,
            "parent": self.parent,
            "session": self.session,
            "parent_session": self.parent_session,
            "call_id": self.call_id,
            "depth": self.depth,
            "status": self.status,
            "outcome": self.outcome,
            "result": self.result,
            "error": self.error,
            "usage": self.usage.to_data(),
            "budget": dict(self.budget),
            "created_at": self.created_at,
            "ended_at": self.ended_at,
            "delivered": self.delivered,
        }


class SubagentStore(Protocol):
    """Sub-agent records (synchronous, one short transaction each; a back-end failure raises
    `heron.errors.StoreError`)."""

    def add(self, record: SubagentRecord) -> None:
        """Store a new record (its id must be new)."""
        ...

    def get(self, subagent_id: str) -> SubagentRecord | None: ...

    def list(
        self, *, root_session: str | None = None, active_only: bool = False
    ) -> builtins.list[SubagentRecord]:
        """Records in creation order: of one tree's session or all, only unfinished ones."""
        ...

    def advance(self, subagent_id: str, status: Status) -> SubagentRecord | None:
        """Move an unfinished record to another active status; a finished one is returned
        unchanged. `None` for an unknown id."""
        ...

    def finish(
        self,
        subagent_id: str,
        *,
        status: Status,
        outcome: Outcome | None,
        result: str,
        error: str,
        usage: Usage,
        ended_at: float,
    ) -> tuple[SubagentRecord, bool] | None:
        """End an unfinished record (compare-and-set); `(record, True)` when this call ended
        it, `(the record as it was, False)` when it had already ended."""
        ...

    def record_usage(self, subagent_id: str, usage: Usage) -> None:
        """The usage so far of an unfinished child (a finished one keeps its final usage)."""
        ...

    def claim_delivery(self, subagent_id: str) -> bool:
        """Mark a finished record's result delivered; True only for the first caller."""
        ...

    def request_cancel(self, subagent_id: str) -> bool:
        """Ask the process running an unfinished child to cancel it (`heron agents cancel`
        from another process); False when it has already ended or is unknown."""
        ...

    def cancel_requests(self) -> builtins.list[str]:
        """Unfinished children whose cancel was requested, oldest first."""
        ...


def descendants(store: SubagentStore, subagent_id: str) -> builtins.list[SubagentRecord]:
    """Every record below `subagent_id` in `store`, deepest first (a cancel ends them first)."""
    root = store.get(subagent_id)
    records = store.list(root_session=root.root_session) if root is not None else []
    found: builtins.list[SubagentRecord] = []
    frontier = {subagent_id}
    while frontier:
        below = [r for r in records if r.parent in frontier]
        found = below + found
        frontier = {r.id for r in below}
    return found
