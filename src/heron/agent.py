"""`Agent`: the public entry point that resolves one execution context per turn and runs it.

The agent owns what lives for a session: the scoped registry, the approval manager (with its
"always" allow-list), the receipt scope and the activated tool set. Each `run()` builds a fresh
immutable `ResolvedAgentExecution` and per-message `TurnState`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from heron._support.limits import clean_text
from heron.messages import MediaPart, Message, SystemMessage, UserMessage
from heron.models.base import Model
from heron.safety.secrets import known_secrets
from heron.tools.definition import Tool
from heron.tools.registry import (
    ActivatedToolSet,
    Autonomy,
    ScopedRegistry,
    ToolRegistry,
    normalize_name,
)
from heron.turn.approval import (
    ApprovalAnswer,
    ApprovalManager,
    ApprovalPolicy,
    Approver,
    GivenApproval,
    NoApprover,
)
from heron.turn.calls import CallOutcome
from heron.turn.cancel import CancelScope
from heron.turn.context import (
    IterationBudget,
    Receipt,
    ResolvedAgentExecution,
    RuntimeKnobs,
    TurnState,
)
from heron.turn.dispatch import run_single_call
from heron.turn.events import EventSink, discard
from heron.turn.extensions import CallCheck, OutputSpill, ResultCache, ToolCatalogue
from heron.turn.hooks import ToolHook, sort_hooks
from heron.turn.loop import run_tool_call_loop
from heron.turn.observer import NullObserver, Observer
from heron.turn.outcome import TurnOutcome
from heron.turn.receipts import ReceiptScope

if TYPE_CHECKING:  # optional parts, imported by whoever builds them
    from heron.models.context_window import HistoryTrimmer
    from heron.models.resolve import ProviderConfig
    from heron.telemetry.alerts import AlertManager
    from heron.telemetry.metrics import MetricsRegistry
    from heron.telemetry.otel import OtelTracer
    from heron.turn.budgets import BudgetLimits, PriceTable, RunBudget


@dataclass(frozen=True, kw_only=True, slots=True)
class RunResult:
    """What `Agent.run` returns: how the turn ended, the whole history and the receipts."""

    outcome: TurnOutcome
    history: list[Message]
    """The conversation after the turn (the `history` passed in, appended to)."""
    receipts: list[Receipt]
    """A receipt per successful receipted call of this turn (empty without `receipts=`)."""
    turn_id: str

    @property
    def text(self) -> str:
        """The final answer's text (empty when the turn did not end with one)."""
        return self.outcome.text

    @property
    def ok(self) -> bool:
        """True when the turn ended with a final answer (a summary counts)."""
        return self.outcome.status == "final"


def _last_prompt(history: Sequence[Message]) -> str | None:
    for message in reversed(history):
        if isinstance(message, UserMessage):
            return message.content
    return None


class Agent:
    """An agent: a model, a scoped tool set, an approval front end and runtime knobs.

    `model` is a `Model`, or a model string as `heron run --model` takes it
    (`"openai:gpt-4o-mini"`, `"anthropic:…"`, `"ollama:…"`, `"openai-compatible:…"`,
    `"scripted:FILE"`), built at construction by `heron.models.resolve.resolve_model` with
    `base_url` and `provider_config`; a wrong string raises `ProviderConfigError` here.
    """

    def __init__(
        self,
        *,
        model: Model | str,
        base_url: str | None = None,
        provider_config: ProviderConfig | None = None,
        tools: Iterable[Tool] | ToolRegistry = (),
        system_prompt: str = "",
        autonomy: Autonomy = "supervised",
        approver: Approver | None = None,
        approval: ApprovalManager | None = None,
        knobs: RuntimeKnobs | None = None,
        observer: Observer | None = None,
        hooks: Sequence[ToolHook] = (),
        receipts: ReceiptScope | None = None,
        allowed_tools: Collection[str] | None = None,
        excluded_tools: Collection[str] = (),
        activated: ActivatedToolSet | None = None,
        checks: Sequence[CallCheck] = (),
        cache: ResultCache | None = None,
        spill: OutputSpill | None = None,
        catalogue: ToolCatalogue | None = None,
        turn_exclusions: Callable[[str], Collection[str]] | None = None,
        trimmer: HistoryTrimmer | None = None,
        tracer: OtelTracer | None = None,
        metrics: MetricsRegistry | None = None,
        alerts: AlertManager | None = None,
        budget_limits: BudgetLimits | None = None,
        prices: PriceTable | None = None,
        workspace: Path | None = None,
        workspace_read_only: bool = False,
        name: str | None = None,
    ) -> None:
        registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self.registry: ScopedRegistry = registry.scope(
            autonomy=autonomy, allowed_tools=allowed_tools, excluded_tools=excluded_tools
        )
        if isinstance(model, str):
            from heron.models.resolve import resolve_model

            model = resolve_model(model, base_url=base_url, config=provider_config)
        elif base_url is not None or provider_config is not None:
            from heron.models.resolve import ProviderConfigError

            raise ProviderConfigError("base_url and provider_config apply to a model string only")
        self.model: Model = model
        self.system_prompt = system_prompt
        self.approval = approval or ApprovalManager(
            policy=ApprovalPolicy(autonomy=autonomy), approver=approver or NoApprover()
        )
        self.knobs = knobs or RuntimeKnobs()
        self.observer = observer or NullObserver()
        self.hooks = sort_hooks(hooks)
        self.receipts = receipts
        self.activated = activated
        self.checks = tuple(checks)
        self.cache = cache
        self.spill = spill
        self.catalogue = catalogue
        self.turn_exclusions = turn_exclusions
        """Maps the user's message to the tool names hidden for that turn (filter groups)."""
        self.trimmer = trimmer
        self.tracer = tracer
        self.metrics = metrics
        self.alerts = alerts
        self.budget_limits = budget_limits
        """Limits for each turn's `RunBudget` (when the caller passes none)."""
        self.prices = prices
        self.workspace = workspace
        self.workspace_read_only = workspace_read_only
        """Every run may only read the workspace: `workspace_only` tools refuse to write."""
        self.name = name

    def resolve(
        self, *, allowed_tools: Collection[str] | None = None, parent_agent: str | None = None
    ) -> ResolvedAgentExecution:
        """The immutable bundle for one turn; `allowed_tools` narrows this run only."""
        registry = self.registry if allowed_tools is None else self.registry.narrow(allowed_tools)
        signer = None
        if self.receipts is not None:
            signer = (
                self.receipts.new_run() if self.receipts.kind == "run" else self.receipts.signer()
            )
        return ResolvedAgentExecution(
            model=self.model,
            registry=registry,
            approval=self.approval,
            knobs=self.knobs,
            system_prompt=self.system_prompt,
            observer=self.observer,
            hooks=self.hooks,
            receipts=signer,
            activated=self.activated,
            checks=self.checks,
            cache=self.cache,
            spill=self.spill,
            catalogue=self.catalogue,
            allowed=None if allowed_tools is None else frozenset(allowed_tools),
            trimmer=self.trimmer,
            tracer=self.tracer,
            metrics=self.metrics,
            alerts=self.alerts,
            workspace=self.workspace,
            workspace_read_only=self.workspace_read_only,
            agent=self.name,
            parent_agent=parent_agent,
        )

    async def run(
        self,
        prompt: str,
        *,
        history: list[Message] | None = None,
        sink: EventSink = discard,
        cancel: CancelScope | None = None,
        channel: str | None = None,
        allowed_tools: Collection[str] | None = None,
        budget: IterationBudget | None = None,
        run_budget: RunBudget | None = None,
        media: Sequence[MediaPart | Path] = (),
    ) -> RunResult:
        """Append `prompt` to `history` (a new list if none) and run the turn to its end.

        `history` is appended in place, message by message, so it always holds the conversation
        so far. `media`: images and PDFs attached to the prompt (paths become
        `MediaPart.from_file`); the model adapter sends them, or a labelled placeholder when the
        model has no vision.

        Cancelling the task that awaits `run` — `task.cancel()`, `asyncio.timeout`,
        `asyncio.wait_for`, a failing `TaskGroup` sibling — ends the turn exactly as
        `cancel.cancel()` would: finished calls keep their real results, the others are
        answered as interrupted, every call's cards are closed and a `cancelled` event is sent
        (the `cancel` scope, when given, ends up cancelled too). Then the `CancelledError`
        propagates (`TimeoutError` from `asyncio.timeout` and `wait_for`). There is no
        `RunResult` then: pass your own list as `history` to keep the conversation. It is
        whole and valid — every call answered — and ready for the next `run(history=...)`.
        """
        messages: list[Message] = history if history is not None else []
        if messages and isinstance(messages[0], SystemMessage):
            raise ValueError("pass the system prompt as Agent(system_prompt=...), not in history")
        parts = tuple(m if isinstance(m, MediaPart) else MediaPart.from_file(m) for m in media)
        # A pasted provider key stays out of the history; then a command line's undecodable
        # bytes get the text replacement (masking first, as everywhere data enters).
        prompt = clean_text(known_secrets().mask(prompt))
        messages.append(UserMessage(content=prompt, media=parts))
        state = self.turn_state(
            history=messages,
            prompt=prompt,
            sink=sink,
            cancel=cancel,
            channel=channel,
            budget=budget,
            run_budget=run_budget,
        )
        outcome = await self.run_turn(state, allowed_tools=allowed_tools)
        return RunResult(
            outcome=outcome, history=messages, receipts=state.receipts, turn_id=state.turn_id
        )

    def turn_state(
        self,
        *,
        history: list[Message],
        prompt: str | None = None,
        sink: EventSink = discard,
        cancel: CancelScope | None = None,
        channel: str | None = None,
        budget: IterationBudget | None = None,
        run_budget: RunBudget | None = None,
        on_append: Callable[[tuple[Message, ...]], None] | None = None,
        known_call_ids: AbstractSet[str] | None = None,
    ) -> TurnState:
        """A fresh `TurnState` for one turn on `history` answering `prompt` (default: the last
        user message of `history`), with this turn's exclusions.

        The one place the per-turn exclusions (`turn_exclusions`, e.g. MCP filter groups) are
        computed: `run`, the command-line sessions and the bus loop all build their state here.
        """
        if prompt is None:
            prompt = _last_prompt(history)
        excluded: frozenset[str] = frozenset()
        if self.turn_exclusions is not None and prompt is not None:
            excluded = frozenset(normalize_name(n) for n in self.turn_exclusions(prompt))
        return TurnState(
            history=history,
            sink=sink,
            cancel=cancel or CancelScope(),
            channel=channel,
            budget=budget,
            run_budget=run_budget,
            excluded=excluded,
            on_append=on_append,
            known_call_ids=known_call_ids,
        )

    async def run_turn(
        self, state: TurnState, *, allowed_tools: Collection[str] | None = None
    ) -> TurnOutcome:
        """Run one turn on caller-owned state (event loops, sub-agents sharing a budget).

        A cancellation of the awaiting task closes the turn first (as in `run`): `state.history`
        is whole when the `CancelledError` reaches the caller."""
        if state.run_budget is None and self.budget_limits is not None:
            from heron.turn.budgets import RunBudget

            state.run_budget = RunBudget(
                self.budget_limits, prices=self.prices, label=self.name or "run"
            )
        return await run_tool_call_loop(self.resolve(allowed_tools=allowed_tools), state)

    async def run_approved_call(
        self,
        call_id: str,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        answer: ApprovalAnswer,
        sink: EventSink = discard,
        channel: str | None = None,
    ) -> CallOutcome:
        """Run one call a person approved after the turn that asked had ended (a durable
        request answered later) through the same lifecycle as a call of a turn: policy (which
        still refuses what it refuses now), `answer` as the gate's decision (an edit's
        arguments validated again), events to `sink`, observer, hooks, receipt and spill.

        The decision's audit row is the request's own (`heron.humans.outcomes`); the gate's
        record of the same answer is not kept a second time."""
        manager = ApprovalManager(
            policy=self.approval.policy, approver=GivenApproval(call_id, answer)
        )
        exec_ = dataclasses.replace(self.resolve(), approval=manager)
        state = self.turn_state(history=[], sink=sink, channel=channel)
        return await run_single_call(exec_, state, call_id, tool, dict(arguments))
