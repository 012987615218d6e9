"""A child's budget: split down the tree, spent up it.

A child's `RunBudget` is a child of its parent's (everything it spends is spent by its parent)
with its own limits: explicit per spawn, else the definition's, else `budget_share` of what the
parent has left (`limits_for`). Its usage is its own calls and its descendants' (`usage_of`).
"""

from __future__ import annotations

from collections.abc import Mapping

from heron.always_on.subagents.definitions import AgentDefinition
from heron.always_on.subagents.store import Usage
from heron.turn.budgets import BudgetLimits, RunBudget

__all__ = ["budget_limits", "limits_for", "share_of", "usage_of"]


def limits_for(
    requested: Mapping[str, float] | None,
    definition: AgentDefinition,
    parent: RunBudget | None,
    share: float,
) -> dict[str, float]:
    """The limits of a child: those of the spawn, completed by the definition's; with neither,
    `share` of what `parent` has left."""
    limits = dict(requested or {})
    for key, value in (
        ("model_calls", definition.model_calls),
        ("total_tokens", definition.total_tokens),
        ("wall_time_s", definition.wall_time_s),
    ):
        if key not in limits and value is not None:
            limits[key] = value
    return limits or share_of(parent, share)


def budget_limits(budget: Mapping[str, float]) -> BudgetLimits:
    """The `BudgetLimits` of a child's limits (as its record keeps them)."""
    return BudgetLimits(
        model_calls=int(budget["model_calls"]) if "model_calls" in budget else None,
        total_tokens=int(budget["total_tokens"]) if "total_tokens" in budget else None,
        cost_usd=budget.get("cost_usd"),
        wall_time_s=budget.get("wall_time_s"),
    )


def share_of(parent: RunBudget | None, share: float) -> dict[str, float]:
    """`share` of what `parent` has left of each limit it has."""
    if parent is None:
        return {}
    spent, limits = parent.spent(), parent.limits
    out: dict[str, float] = {}
    if limits.model_calls is not None:
        out["model_calls"] = max(1, int((limits.model_calls - spent.model_calls) * share))
    if limits.total_tokens is not None:
        out["total_tokens"] = max(1, int((limits.total_tokens - spent.total_tokens) * share))
    if limits.cost_usd is not None:
        out["cost_usd"] = max(0.0, (limits.cost_usd - spent.cost_usd) * share)
    left = parent.time_left()
    if left is not None:
        out["wall_time_s"] = max(1.0, left * share)
    return out


def usage_of(budget: RunBudget) -> Usage:
    """What a child's budget has spent: its own calls and its descendants'."""
    spent = budget.spent()
    return Usage(
        model_calls=spent.model_calls,
        tool_calls=spent.tool_calls,
        input_tokens=spent.input_tokens,
        output_tokens=spent.output_tokens,
        cost_usd=spent.cost_usd,
    )
