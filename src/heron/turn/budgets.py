"""Run budgets: how much one run (and the runs it starts) may spend.

A `RunBudget` limits model calls, tool calls, input/output/total tokens (from the `Usage` the
provider reports), wall time and, when prices are configured, cost in US dollars. Nested runs
(sub-agents, delegation) get `budget.child(...)`: everything a child spends is also spent by
its parent, and a child stops when its own limits or any ancestor's run out.

The engine records after each model call and each executed tool call, and calls `check()`
before each model call; the first exhausted limit comes back as `BudgetExhausted`, whose
`reason` says what ran out and whose `summary_request()` asks the model for a graceful final
answer (one last call without tools, recorded like any other).

A cost limit with a model that has no configured price stops the run at the next check: a
limit that cannot be enforced is reported, never silently ignored.
"""

from __future__ import annotations

import fnmatch
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from heron.models.base import Usage

BudgetLimit = Literal[
    "model_calls",
    "tool_calls",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cost",
    "wall_time",
]

SUMMARY_REQUEST = (
    "heron stopped this run because {reason}. Do not call tools. Answer with your best result "
    "from the work so far: what you did, what you found, and what remains to be done."
)


@dataclass(frozen=True, kw_only=True, slots=True)
class BudgetLimits:
    """Maximums for one run; None means unlimited."""

    model_calls: int | None = None
    tool_calls: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cost_usd: float | None = None
    wall_time_s: float | None = None

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"budget limit {name} must not be negative, got {value}")


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelPrice:
    """US dollars per million tokens. Cached input defaults to the input price."""

    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None

    def cost(self, usage: Usage) -> float:
        cached = min(usage.cached_tokens, usage.input_tokens)
        cached_price = (
            self.input_per_mtok
            if self.cached_input_per_mtok is None
            else self.cached_input_per_mtok
        )
        return (
            (usage.input_tokens - cached) * self.input_per_mtok
            + cached * cached_price
            + usage.output_tokens * self.output_per_mtok
        ) / 1_000_000


class PriceTable:
    """Prices by heron model string (`openai:gpt-4o`); keys may be glob patterns
    (`anthropic:claude-sonnet-*`). An exact key wins over patterns, patterns are tried in order.
    A fallback chain (`a | b`) is priced as its most expensive priced member."""

    def __init__(self, prices: Mapping[str, ModelPrice]) -> None:
        self._prices = dict(prices)

    def price_for(self, model: str) -> ModelPrice | None:
        members = [m.strip() for m in model.split("|")]
        found = [p for p in (self._lookup(m) for m in members) if p is not None]
        if len(found) < len(members):
            return None
        return max(found, key=lambda p: (p.output_per_mtok, p.input_per_mtok))

    def _lookup(self, model: str) -> ModelPrice | None:
        exact = self._prices.get(model)
        if exact is not None:
            return exact
        for pattern, price in self._prices.items():
            if fnmatch.fnmatchcase(model, pattern):
                return price
        return None


@dataclass(frozen=True, kw_only=True, slots=True)
class BudgetSpent:
    """What a run (with its children) has used so far."""

    model_calls: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost_usd: float
    elapsed_s: float
    unpriced_models: tuple[str, ...]

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, kw_only=True, slots=True)
class BudgetExhausted:
    """The first limit that ran out, and where."""

    limit: BudgetLimit
    maximum: float
    used: float
    run: str
    """Label of the run whose limit it is (the current run or an ancestor)."""
    reason: str

    def summary_request(self) -> str:
        """The runtime message asking the model for a final answer without tools."""
        return SUMMARY_REQUEST.format(reason=self.reason)


class RunBudget:
    """Limits and spending of one run; `child()` makes a nested run's budget.

    Safe to share across threads (one lock per budget tree). `clock` is injectable for tests.
    """

    def __init__(
        self,
        limits: BudgetLimits | None = None,
        *,
        prices: PriceTable | None = None,
        label: str = "run",
        clock: Callable[[], float] = time.monotonic,
        parent: RunBudget | None = None,
    ) -> None:
        self.limits = limits or BudgetLimits()
        self.label = label
        self.parent = parent
        self._prices: PriceTable | None = parent._prices if parent is not None else prices
        self._clock = clock
        self._lock: threading.Lock = threading.Lock() if parent is None else parent._lock
        self._started = clock()
        self._model_calls = 0
        self._tool_calls = 0
        self._input = 0
        self._output = 0
        self._cached = 0
        self._cost = 0.0
        self._unpriced: list[str] = []

    def child(self, limits: BudgetLimits | None = None, *, label: str) -> RunBudget:
        """A budget for a nested run: its own limits (if any) and all of this one's."""
        return RunBudget(limits, label=label, clock=self._clock, parent=self)

    def _chain(self) -> list[RunBudget]:
        chain: list[RunBudget] = []
        node: RunBudget | None = self
        while node is not None:
            chain.append(node)
            node = node.parent
        return chain

    # -- recording ----------------------------------------------------------------------------

    def record_model_call(self, model: str, usage: Usage | None) -> None:
        """Count one model call (failed ones too) and what it reported using."""
        usage = usage or Usage()
        price = self._prices.price_for(model) if self._prices is not None else None
        cost = price.cost(usage) if price is not None else 0.0
        with self._lock:
            for node in self._chain():
                node._model_calls += 1
                node._input += usage.input_tokens
                node._output += usage.output_tokens
                node._cached += usage.cached_tokens
                node._cost += cost
                if price is None and model not in node._unpriced:
                    node._unpriced.append(model)

    def record_tool_call(self) -> None:
        """Count one executed tool call."""
        with self._lock:
            for node in self._chain():
                node._tool_calls += 1

    # -- reading ------------------------------------------------------------------------------

    def spent(self) -> BudgetSpent:
        with self._lock:
            return BudgetSpent(
                model_calls=self._model_calls,
                tool_calls=self._tool_calls,
                input_tokens=self._input,
                output_tokens=self._output,
                cached_tokens=self._cached,
                cost_usd=self._cost,
                elapsed_s=self._clock() - self._started,
                unpriced_models=tuple(self._unpriced),
            )

    def time_left(self) -> float | None:
        """Seconds until the nearest wall-time limit in the chain, or None without one (a
        bound for waits that should not outlive the run)."""
        now = self._clock()
        left = [
            node.limits.wall_time_s - (now - node._started)
            for node in self._chain()
            if node.limits.wall_time_s is not None
        ]
        return max(0.0, min(left)) if left else None

    def check(self) -> BudgetExhausted | None:
        """The first exhausted limit, this run's before its ancestors', or None."""
        for node in self._chain():
            hit = node._own_check()
            if hit is not None:
                return hit
        return None

    def _own_check(self) -> BudgetExhausted | None:
        spent = self.spent()
        limits = self.limits
        counted: list[tuple[BudgetLimit, float | None, float, str]] = [
            ("model_calls", limits.model_calls, spent.model_calls, "model calls"),
            ("tool_calls", limits.tool_calls, spent.tool_calls, "tool calls"),
            ("input_tokens", limits.input_tokens, spent.input_tokens, "input tokens"),
            ("output_tokens", limits.output_tokens, spent.output_tokens, "output tokens"),
            ("total_tokens", limits.total_tokens, spent.total_tokens, "tokens"),
        ]
        for kind, maximum, used, unit in counted:
            if maximum is not None and used >= maximum:
                what = kind.replace("_", "-").removesuffix("s")
                return self._hit(
                    kind, maximum, used, f"{what} limit: {used:,.0f} of {maximum:,.0f} {unit} used"
                )
        if limits.cost_usd is not None:
            if spent.unpriced_models:
                return self._hit(
                    "cost",
                    limits.cost_usd,
                    spent.cost_usd,
                    f"cost limit of ${limits.cost_usd:.2f}: no price is configured for "
                    + ", ".join(spent.unpriced_models)
                    + ", so the limit cannot be enforced",
                )
            if spent.cost_usd >= limits.cost_usd:
                return self._hit(
                    "cost",
                    limits.cost_usd,
                    spent.cost_usd,
                    f"cost limit: ${spent.cost_usd:.4f} of ${limits.cost_usd:.2f} spent",
                )
        if limits.wall_time_s is not None and spent.elapsed_s >= limits.wall_time_s:
            return self._hit(
                "wall_time",
                limits.wall_time_s,
                spent.elapsed_s,
                f"time limit: {spent.elapsed_s:.0f} s of {limits.wall_time_s:g} s elapsed",
            )
        return None

    def _hit(self, kind: BudgetLimit, maximum: float, used: float, detail: str) -> BudgetExhausted:
        reason = f"the run '{self.label}' reached its {detail}"
        return BudgetExhausted(
            limit=kind, maximum=maximum, used=used, run=self.label, reason=reason
        )
