"""Tool definition: the `Tool` protocol, `ToolSpec`, `ToolAnnotations` and `ToolResult`.

This module owns the first step of the lifecycle. Tools only say what they are and do their
work; the dispatcher owns events, receipts, observer records, approval and history.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, get_args, runtime_checkable

from heron.errors import ConfigurationError, HeronError

RuntimeArg = Literal["approved", "channel"]
"""Arguments the runtime (never the model) may set; each is declared in the tool description."""

RunsIn = Literal["event_loop", "thread", "process"]
"""Where a tool's work runs: awaited on the event loop, in a worker thread (a plain `def` under
`@tool`), or in a worker process (`@tool(runs_in="process")`). A thread cannot be stopped: a
timed-out or cancelled call is reported at once, as still running, while its thread runs on to
its end. A process can: heron kills it."""

RUNTIME_ARG_NOTES: Mapping[RuntimeArg, str] = {
    "approved": (
        "Runtime-managed argument `approved`: heron sets it to true only after an operator or "
        "policy approved this exact call; any value you pass is discarded."
    ),
    "channel": (
        "Runtime-managed argument `channel`: when you leave it empty heron fills in the channel "
        "the current conversation arrived on."
    ),
}
"""The note each runtime-managed argument adds to a tool's description (class-based tools
append them themselves)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolAnnotations:
    """What a tool does to the world. Drives approval, parallelism, caching and retries."""

    read_only: bool = False
    """Only reads; safe to cache and to run in parallel with other read-only calls."""
    destructive: bool = False
    """May delete or overwrite data."""
    idempotent: bool = False
    """Repeating the call with the same arguments has no further effect."""
    irreversible: bool = False
    """Cannot be undone once done (send mail, pay, call)."""
    open_world: bool = False
    """Talks to systems outside the agent's workspace."""
    requires_approval: bool = False
    """Always needs an approval decision under supervised autonomy."""
    workspace_only: bool = False
    """Changes nothing outside the agent's workspace, and changes nothing at all when the run's
    workspace is read-only (`ToolContext.workspace_read_only`): heron's file tools, its
    sandboxed shell and interpreter without the host's network. A sub-agent spawned without
    write access keeps such a tool, its writes refused."""


RiskTier = Literal["low", "medium", "high"]
"""How much one call can do: `low` (inspection, changes the workspace can take back), `medium`
(deletions, network clients, unknown programs), `high` (outside the workspace, privileges)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CallApproval:
    """What one call needs before it runs, judged from its validated arguments.

    A tool whose approval depends on the call (the `shell` tool: on the parsed command) has an
    `approval_for(arguments) -> CallApproval` method; the approval gate asks it after validation
    and records `risk` in the approval and the execution audit. A `high` call is always put to
    an operator; with no operator, only a call marked `unattended` runs, whatever the allow-lists
    say.
    """

    risk: RiskTier
    """The call's risk tier as the gate applies it."""
    unattended: bool
    """Whether the call may run when no operator can answer (the tool's own policy still
    gates it)."""
    note: str = ""
    """Why, in a few words, when the tier or the verdict is not the plain classification (e.g.
    `low risk counts as medium: the sandbox does not contain heron's environment`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolExample:
    """One real call example rendered into the tool description."""

    arguments: Mapping[str, Any]
    description: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolSpec:
    """What the model is shown about a tool. Built once per tool and shared, never deep-copied."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    """JSON Schema (an object schema) of the model-visible arguments."""
    output_schema: Mapping[str, Any] | None = None
    annotations: ToolAnnotations = field(default_factory=ToolAnnotations)
    owner: str = "user"
    """Attribution: `builtin`, `mcp:<server>`, `plugin:<name>` or `user`."""
    runtime_args: tuple[RuntimeArg, ...] = ()
    """Arguments the runtime may inject; they are declared in `description`."""
    channel_aware: bool = False
    """Receives the conversation's channel as a delivery default (`channel` runtime arg)."""
    runs_in: RunsIn = "event_loop"
    """`thread` for a sync function `@tool` runs in a worker thread (a timeout or cancel reports
    the call at once, as still running: heron cannot stop that thread); `process` for one it runs
    in a worker process it kills on a timeout or cancel; `event_loop` for everything else."""
    timeout_s: float | None = None
    """The tool's own time limit per call (the runtime's `tool_timeout_s`, when lower, wins)."""

    def __post_init__(self) -> None:
        problems = []
        if self.runs_in not in get_args(RunsIn):
            known = ", ".join(map(repr, get_args(RunsIn)))
            problems.append(f"unknown runs_in {self.runs_in!r} (known: {known})")
        if self.timeout_s is not None and not 0 < self.timeout_s < math.inf:
            problems.append(f"timeout_s must be a finite number of seconds > 0: {self.timeout_s!r}")
        if problems:
            raise ToolDefinitionError(problems, heading=f"tool {self.name!r}")

    def to_wire(self) -> dict[str, Any]:
        """The provider-neutral `{name, description, parameters}` triple."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolResult:
    """The small result every tool returns: success flag, output, error.

    `output` is the text the model sees; `data` optionally carries structured content beside it.
    Two fields are for the few tools that change what the model knows (tool discovery, skills):
    `loaded_tools` and `keep_in_context`.
    """

    success: bool
    output: str = ""
    error: str | None = None
    data: Any = None
    loaded_tools: tuple[str, ...] = ()
    """Tools this call loaded into the session (discovery). A provider adapter with a
    deferred-loading mechanism references them from this result (Anthropic `tool_reference`)."""
    keep_in_context: bool = False
    """Never trimmed from the history sent to the model (loaded skill instructions, results
    that load tools): the model keeps what it was told to follow or use."""

    @classmethod
    def ok(
        cls,
        output: str = "",
        *,
        data: Any = None,
        loaded_tools: tuple[str, ...] = (),
        keep_in_context: bool = False,
    ) -> ToolResult:
        return cls(
            success=True,
            output=output,
            data=data,
            loaded_tools=loaded_tools,
            keep_in_context=keep_in_context,
        )

    @classmethod
    def fail(cls, error: str, *, output: str = "", data: Any = None) -> ToolResult:
        return cls(success=False, output=output, error=error, data=data)


def _no_progress(message: str) -> None:
    """Progress sink used outside a running turn."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolContext:
    """Per-call facts a tool may read. Never carries approval power: that stays in the runtime."""

    call_id: str
    turn_id: str
    channel: str | None = None
    agent: str | None = None
    progress: Callable[[str], None] = _no_progress
    """Streams a progress line for this call (scrubbed before anyone sees it)."""
    call_tool: Callable[[str, dict[str, Any]], Awaitable[ToolResult]] | None = None
    """Calls another tool of this agent through the whole lifecycle (availability, validation,
    approval, events, receipts). Used by code orchestration; `None` outside a running turn."""
    workspace: Path | None = None
    """The agent's workspace, when the agent has one."""
    workspace_read_only: bool = False
    """The workspace is read-only for this run (a sub-agent spawned without write access): a
    `workspace_only` tool refuses every write there."""
    turn: object | None = None
    """The running turn (`heron.turn.context.TurnHandle`: its resolved execution and state),
    for re-entrant tools that start nested runs (sub-agents); `None` outside a running turn."""


@runtime_checkable
class Tool(Protocol):
    """A class-based tool. `@heron.tool` builds one from a typed function.

    A tool whose approval depends on the call may also have a method
    `approval_for(arguments) -> CallApproval | None`, given the validated arguments (the
    approval gate asks it after validation; None: nothing call-specific).
    """

    @property
    def spec(self) -> ToolSpec: ...

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Check raw arguments strictly against the schema; raise `ToolArgumentsError` if wrong."""
        ...

    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult: ...


class ToolArgumentsError(HeronError, ValueError):
    """Arguments that violate a tool's schema. The model sees `problems`, the loop continues."""

    def __init__(self, tool: str, problems: list[str]) -> None:
        self.tool = tool
        self.problems = problems
        super().__init__(f"invalid arguments for {tool}: " + "; ".join(problems))


class ToolDefinitionError(ConfigurationError, ValueError, TypeError):
    """A developer mistake in a tool or the tool set; lists every problem at once.

    `@tool` raises it for a function it cannot describe (it is a `TypeError` for that reason),
    the registry for duplicate names or an unknown bundle (a `ValueError`), the loader for a
    tools file that is missing or defines no tools.
    """

    def __init__(self, problems: Iterable[str], *, heading: str = "") -> None:
        super().__init__(heading, problems=problems)
