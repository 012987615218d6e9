"""Streaming turn events: what live UIs (terminal cards, JSON lines, the gateway) see.

Events are a rendering surface: tool outputs in them are scrubbed of credentials, tool-call
arguments are shown as executed (including anything the runtime injected, named in
`injected`). The schema is documented in docs/events.md; fields may be added, never removed.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, JsonValue

ToolStatus = Literal[
    "ok",
    "error",
    "denied",
    "replaced",
    "duplicate",
    "unknown",
    "excluded",
    "interrupted",
    "hook_cancelled",
    "awaiting_approval",
]

InterruptPhase = Literal["not_started", "cancelled_while_running", "running_in_background"]

FinalReason = Literal[
    "answer", "iteration_cap", "budget_exhausted", "loop_break", "malformed_protocol"
]
"""Why a turn ended with a final answer (a summary, for everything but `answer`)."""


class BaseEvent(BaseModel):
    """The base of every turn event: frozen, and stamped with the `turn_id` it belongs to."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    turn_id: str = ""


class ToolCallEvent(BaseEvent):
    """A pending call card: emitted once per model call, before it runs (or is refused)."""

    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: dict[str, Any]
    owner: str | None = None
    injected: tuple[str, ...] = ()
    """Argument names the runtime set (approval marker, delivery defaults)."""
    risk: str | None = None
    """The call's risk tier (`low`, `medium`, `high`) for a tool that judges each call (the
    `shell` tool: its parsed command)."""


class ToolResultEvent(BaseEvent):
    """The terminal card for a call: exactly one per `tool_call`, same id."""

    type: Literal["tool_result"] = "tool_result"
    id: str
    name: str
    success: bool
    status: ToolStatus
    output: str
    duration_ms: float = 0.0
    receipt: str | None = None
    phase: InterruptPhase | None = None
    background_task: str | None = None
    cached: bool = False
    data: JsonValue = None
    """The tool's structured data beside its text (`ToolResult.data`, an MCP server's
    `structuredContent`) as JSON, scrubbed like `output`. None when the tool returned none, for a
    cached result, or when the JSON is longer than `max_tool_result_chars` (see
    `data_omitted_chars`); structured data is never cut part-way."""
    data_omitted_chars: int | None = None
    """Length of the JSON of `data` when it was left out for being over the limit."""


class CallIdRenamedEvent(BaseEvent):
    """The model sent a call id that was already taken, so heron gave the call a fresh one.

    Providers reject a history with two calls of one id, and results are matched by id, so the
    call runs (and appears in the history and in every later event) under `new_id`. `reason`:
    `in_history` when an earlier turn of the conversation used the id, `in_turn` when this turn
    already did (another call of the same response, or of an earlier step)."""

    type: Literal["call_id_renamed"] = "call_id_renamed"
    old_id: str
    new_id: str
    name: str
    """The tool the call names."""
    reason: Literal["in_history", "in_turn"]


PlanStatus = Literal["pending", "in_progress", "completed"]
"""Where one step of a plan stands."""


class PlanItem(BaseModel):
    """One step of the model's plan (`update_plan`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    text: str
    status: PlanStatus


class PlanEvent(BaseEvent):
    """The model's whole plan after a successful `update_plan` call, right after that call's
    `tool_result` (same `call_id`). Each event replaces the previous plan; no items clears it."""

    type: Literal["plan"] = "plan"
    call_id: str
    items: tuple[PlanItem, ...]
    explanation: str | None = None
    """Why the plan changed, when the model said."""


class ProgressEvent(BaseEvent):
    """A progress line a running tool reported (`ToolContext.progress`), scrubbed."""

    type: Literal["progress"] = "progress"
    id: str
    name: str
    message: str


class ApprovalRequestEvent(BaseEvent):
    """A call waits for an operator's approval (answer it through the approver)."""

    type: Literal["approval_request"] = "approval_request"
    request_id: str
    call_id: str
    tool: str
    summary: str
    reason: str | None = None
    """Why a human is asked although policy alone would not have asked (a check escalated)."""
    risk: str | None = None
    """The call's risk tier, for a tool that judges each call (the `shell` tool)."""


class ApprovalDecisionEvent(BaseEvent):
    """How an approval request was decided, and by whom (operator or policy)."""

    type: Literal["approval_decision"] = "approval_decision"
    request_id: str
    call_id: str
    tool: str
    decision: str
    decided_by: str


class TextDeltaEvent(BaseEvent):
    """A piece of the model's visible answer, as it streams."""

    type: Literal["text_delta"] = "text_delta"
    text: str


class ReasoningDeltaEvent(BaseEvent):
    """A piece of the model's thinking, as it streams (never part of the answer)."""

    type: Literal["reasoning_delta"] = "reasoning_delta"
    text: str


class FinalEvent(BaseEvent):
    """The turn's final answer; `reason` says whether it is the answer or a summary."""

    type: Literal["final"] = "final"
    text: str
    reason: FinalReason = "answer"


class TruncatedEvent(BaseEvent):
    """A tool result was bounded before it entered the model's history."""

    type: Literal["truncated"] = "truncated"
    id: str
    name: str
    original_chars: int
    retained_chars: int


class HistoryTrimmedEvent(BaseEvent):
    """The history sent to the model was trimmed to fit the context budget (the stored
    conversation is untouched)."""

    type: Literal["history_trimmed"] = "history_trimmed"
    dropped_messages: int
    dropped_tokens: int
    kept_messages: int
    kept_tokens: int
    budget_tokens: int
    over_budget: bool


class LoopDetectedEvent(BaseEvent):
    """The loop detector warned, withheld a result (`block`) or ended the loop."""

    type: Literal["loop_detected"] = "loop_detected"
    level: Literal["warn", "block", "break"]
    kind: str
    tool: str
    message: str


class CancelledEvent(BaseEvent):
    """The turn was cancelled (`CancelScope.cancel`); `reason` says why."""

    type: Literal["cancelled"] = "cancelled"
    reason: str = "cancelled"


class ErrorEvent(BaseEvent):
    """The turn ended with an error (a model failure, an aborted loop, a cap as error)."""

    type: Literal["error"] = "error"
    message: str


class ExtensionErrorEvent(BaseEvent):
    """An observer, a hook or an event sink raised. heron logged it, reported it here, and the
    turn went on: only the engine's own invariants end a run."""

    type: Literal["extension_error"] = "extension_error"
    component: Literal["observer", "hook", "sink"]
    name: str
    """The failing component: its class or function name."""
    stage: str
    """Where it failed: `tool_call_start` or `tool_call_end` (an observer), `before_tool_call` or
    `after_tool_call` (a hook), or the type of the event a sink refused."""
    call_id: str | None = None
    error: str
    """The exception's type and message, scrubbed and bounded."""


TurnEvent = Annotated[
    ToolCallEvent
    | ToolResultEvent
    | CallIdRenamedEvent
    | PlanEvent
    | ProgressEvent
    | ApprovalRequestEvent
    | ApprovalDecisionEvent
    | TextDeltaEvent
    | ReasoningDeltaEvent
    | FinalEvent
    | TruncatedEvent
    | HistoryTrimmedEvent
    | LoopDetectedEvent
    | CancelledEvent
    | ErrorEvent
    | ExtensionErrorEvent,
    Field(discriminator="type"),
]
"""Any turn event (told apart by `type`); the schema is in docs/events.md."""


class EventSink(Protocol):
    """Receives every event synchronously, in order. Keep it cheap; queue if you must do I/O.

    Any callable taking one event will do: a function, a bound method, `list.append`.
    """

    def __call__(self, event: BaseEvent, /) -> None: ...


def discard(_event: BaseEvent) -> None:
    """The sink used when nobody listens."""


_ENDING: ContextVar[BaseEvent | None] = ContextVar("heron_turn_ending", default=None)


class ending:
    """While the engine appends the history entry a turn's end comes with (the final answer,
    the answer an error cut off, the results of a cancelled round), `event` is that end,
    emitted right after the append: a store companion that runs inside the append
    (`heron.sessions.store.Companion`, the gateway's turn log) reads it with `ending_now` and
    commits the end with its entry. A class, not a generator context manager: it wraps every
    round's append, and `None` where none is set costs no context-variable write."""

    __slots__ = ("_event", "_token")

    def __init__(self, event: BaseEvent | None) -> None:
        self._event = event
        self._token: Token[BaseEvent | None] | None = None

    def __enter__(self) -> None:
        if self._event is not None or _ENDING.get() is not None:
            self._token = _ENDING.set(self._event)

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _ENDING.reset(self._token)


def ending_now() -> BaseEvent | None:
    """The turn end whose history entry is being appended now (see `ending`), if any."""
    return _ENDING.get()
