"""`[agents.NAME]` and `[subagents]` in heron.toml: agent definitions and the runtime's limits."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class AgentEntry(BaseModel):
    """One `[agents.NAME]` table: the same fields as an `agents/NAME.md` file's front matter,
    with the role prompt as `prompt`."""

    model_config = ConfigDict(extra="forbid", strict=True)
    description: str = ""
    """When to use this agent (what `list_agents` shows the model)."""
    model: str | None = None
    """Any model string the CLI takes (`scripted:FILE` included); unset: the parent's model."""
    tools: list[str] | None = None
    """Tool names the agent may use, within what its parent was granted; unset: all of them."""
    prompt: str = ""
    """The role prompt."""
    max_iterations: int | None = Field(default=None, ge=1, le=1000)
    model_calls: int | None = Field(default=None, ge=1)
    """Default budget of model calls of one run of this agent."""
    total_tokens: int | None = Field(default=None, ge=1)
    wall_time_s: float | None = Field(default=None, gt=0)


class SubagentsConfig(BaseModel):
    """`[subagents]`: where project agent files are, and the runtime's limits."""

    model_config = ConfigDict(extra="forbid", strict=True)
    enabled: bool | None = None
    """Give agents the sub-agent tools; unset: when any agent is defined (`[agents.*]` or a
    file in `dir`)."""
    dir: str = "agents"
    """The project's agent files (`<dir>/NAME.md`), relative to the working directory; they
    take effect only once approved (`heron agents approve NAME`)."""
    max_depth: int = Field(default=2, ge=1, le=8)
    """How deep the tree may grow: 2 lets a child spawn grandchildren, who cannot spawn."""
    max_concurrent: int = Field(default=4, ge=1, le=256)
    """Children running at once per process; more wait in a queue (status `queued`)."""
    budget_share: float = Field(default=0.5, gt=0, le=1)
    """A child without an explicit budget gets this share of its parent's remaining budget
    (each limit the parent has: model calls, tokens, cost, wall time)."""
    sync_timeout_s: float = Field(default=600.0, gt=0)
    """How long a `sync` spawn waits for its child before cancelling it (`timed_out`), and a
    child's `ask_parent` for its answer (then the child is told there is none)."""
    wall_grace_s: float = Field(default=5.0, ge=0)
    """How long past its wall-time budget a child may take (to write the summary the budget's
    end asks for) before the runtime stops it (`timed_out`)."""
    cancel_poll_s: float = Field(default=0.5, gt=0)
    """How often a process with running children looks for cancels requested elsewhere."""
    run_deadline_s: float = Field(default=60.0, ge=0)
    """When `heron run` ends with children still working: how long it waits for them before
    cancelling them."""
