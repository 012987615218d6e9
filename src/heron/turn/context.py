"""The resolved execution context (immutable, one per turn) and the per-message loop state.

`ResolvedAgentExecution` bundles everything that does not change while a turn runs: model,
effective registry, approval manager, observer, hooks, knobs, receipt signer and the deferred
activation handle. `TurnState` holds what belongs to one message: history, cancellation,
event sink, steering queue, the shared iteration budget and background tasks. Nothing in the
loop reads configuration from anywhere else.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from heron.errors import ConfigurationError
from heron.messages import Message
from heron.models.base import Model
from heron.tools.registry import ActivatedToolSet, ScopedRegistry
from heron.turn.approval import ApprovalManager
from heron.turn.cancel import CancelScope
from heron.turn.events import EventSink, discard
from heron.turn.extensions import CallCheck, OutputSpill, ResultCache, ToolCatalogue
from heron.turn.hooks import ToolHook
from heron.turn.modes import ParallelMode as ParallelMode
from heron.turn.observer import NullObserver, Observer
from heron.turn.receipts import ReceiptSigner

if TYPE_CHECKING:  # imported lazily where used: telemetry and token counting are optional
    from heron.models.context_window import HistoryTrimmer
    from heron.telemetry.alerts import AlertManager
    from heron.telemetry.metrics import MetricsRegistry
    from heron.telemetry.otel import OtelTracer
    from heron.turn.budgets import RunBudget

CapBehavior = Literal["summary", "error"]
"""What hitting the iteration cap or a budget does: ask for a summary, or end with an error."""
SafePoint = Literal["after_model", "after_tools"]

REENTRANT_TOOLS = frozenset({"spawn_subagent", "delegate"})
"""Calling these twice with the same arguments is meaningful: never deduplicated."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopDetectionKnobs:
    """Loop detection knobs: repeated and ping-pong calls among the recent ones."""

    enabled: bool = True
    window: int = 20
    """How many recent calls are kept and compared."""
    max_repeats: int = 3
    """The identical-call count that first warns (one more blocks, two more break the loop)."""
    ignore_tools: frozenset[str] = frozenset()
    """Tools whose calls are never counted."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RuntimeKnobs:
    """Loop behaviour. Defaults are what a supervised interactive agent wants."""

    max_iterations: int = 10
    parallel: ParallelMode = "read-only"
    dedup: bool = True
    dedup_exempt: frozenset[str] = frozenset()
    prompt_guard_tools: frozenset[str] = frozenset({"*"})
    """Prompt-required tools whose identical repeat after a refusal in the same turn aborts the
    loop (`*`: every prompt-required tool)."""
    max_tool_result_chars: int = 50_000
    tool_timeout_s: float | None = None
    """Runtime-level timeout per tool call; a timeout is an error result the model sees."""
    strict_tool_parsing: bool = False
    cap_behavior: CapBehavior = "summary"
    loop_detection: LoopDetectionKnobs = field(default_factory=LoopDetectionKnobs)
    reply_reserve_tokens: int = 4096
    """Context kept free for the model's reply when the history is trimmed."""
    cancel_grace_s: float = 2.0
    """How long a cancelled tool may take to unwind before heron stops waiting for it."""

    def __post_init__(self) -> None:
        # Modes are closed: an unknown one is a start-up error, never silently "all".
        problems = [
            f"{name}: unknown mode {value!r} (known: {', '.join(map(repr, get_args(kind)))})"
            for name, value, kind in (
                ("parallel", self.parallel, ParallelMode),
                ("cap_behavior", self.cap_behavior, CapBehavior),
            )
            if value not in get_args(kind)
        ]
        if problems:
            raise ConfigurationError("invalid RuntimeKnobs", problems=problems)


@dataclass(frozen=True, kw_only=True, slots=True)
class ResolvedAgentExecution:
    model: Model
    registry: ScopedRegistry
    approval: ApprovalManager
    knobs: RuntimeKnobs = field(default_factory=RuntimeKnobs)
    system_prompt: str = ""
    observer: Observer = field(default_factory=NullObserver)
    hooks: tuple[ToolHook, ...] = ()
    receipts: ReceiptSigner | None = None
    activated: ActivatedToolSet | None = None
    checks: tuple[CallCheck, ...] = ()
    cache: ResultCache | None = None
    spill: OutputSpill | None = None
    catalogue: ToolCatalogue | None = None
    trimmer: HistoryTrimmer | None = None
    """Sends a trimmed view of the history when it outgrows the context budget."""
    tracer: OtelTracer | None = None
    metrics: MetricsRegistry | None = None
    alerts: AlertManager | None = None
    allowed: frozenset[str] | None = None
    """Per-run narrowing: when set, only these names may be called or shown — activated and
    catalogue tools included, not just the static registry."""
    workspace: Path | None = None
    workspace_read_only: bool = False
    """The run may not change the workspace (`ToolContext.workspace_read_only`)."""
    agent: str | None = None
    parent_agent: str | None = None


class IterationBudget:
    """Model-call iterations shared by a run and its nested runs."""

    __slots__ = ("remaining",)

    def __init__(self, total: int) -> None:
        self.remaining = total

    def take(self) -> bool:
        if self.remaining <= 0:
            return False
        self.remaining -= 1
        return True


@dataclass(kw_only=True, slots=True)
class BackgroundResult:
    """A tool that kept running after an interrupt has finished."""

    task_id: str
    call_id: str
    tool: str
    success: bool
    output: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Receipt:
    """A signed receipt for one successful tool call (verify it with `heron.verify_receipt`)."""

    tool: str
    """The tool that ran."""
    call_id: str
    """The id of the call, as in its `tool_call` and `tool_result` events."""
    receipt: str
    """The signed receipt text, as shown to the model after the result."""


@dataclass(kw_only=True)
class TurnState:
    """Per-message state, outside the resolved bundle."""

    history: list[Message]
    sink: EventSink = discard
    cancel: CancelScope = field(default_factory=CancelScope)
    steering: deque[str] = field(default_factory=deque)
    """User messages that arrived while the turn ran; appended at the next safe point."""
    budget: IterationBudget | None = None
    run_budget: RunBudget | None = None
    """Model calls, tool calls, tokens, cost and wall time; children draw from their parent."""
    turn_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    channel: str | None = None
    excluded: frozenset[str] = frozenset()
    """Names hidden for this turn only (filter groups), on top of the agent's exclusions;
    compared trimmed and case-folded like `excluded_tools`."""
    known_call_ids: AbstractSet[str] | None = None
    """The call ids already in `history`, kept current by whoever appends to it (the session
    writer's index), so a turn does not rescan the history; `None`: the loop collects them."""
    receipts: list[Receipt] = field(default_factory=list)
    """One `Receipt` for each receipted result of this turn, in the order they were issued."""
    on_safe_point: Callable[[SafePoint], Awaitable[None]] | None = None
    on_append: Callable[[tuple[Message, ...]], None] | None = None
    """Called with every group of messages the loop appends (persist them before showing)."""
    on_background_result: Callable[[BackgroundResult], None] | None = None
    """Called when a tool detached by an interrupt finishes (the bus makes it an event)."""
    background: dict[str, asyncio.Task[Any]] = field(default_factory=dict)
    """Tools still running after a `detach` interrupt, by task id."""
    prechecks: dict[str, asyncio.Task[Any]] = field(default_factory=dict)
    """Call checks started while the model was still streaming, by call id."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnHandle:
    """What a re-entrant tool (`spawn_subagent`) reads of the turn that called it
    (`ToolContext.turn`): the resolved execution (model, the registry as narrowed for this run,
    activated tools, approval manager, knobs) and the per-message state (cancel scope, budget)."""

    execution: ResolvedAgentExecution
    state: TurnState
