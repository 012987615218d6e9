"""Run budgets: each limit stops the run with a clear reason, nested runs draw from their
parent's budget, and costs follow the configured prices."""

from __future__ import annotations

import pytest

from heron._support.clock import FakeClock
from heron.models.base import Usage
from heron.turn.budgets import BudgetLimits, ModelPrice, PriceTable, RunBudget


def test_a_fresh_budget_is_not_exhausted() -> None:
    budget = RunBudget(BudgetLimits(model_calls=1, tool_calls=1, total_tokens=1))
    assert budget.check() is None


def test_the_model_call_limit_stops_after_the_last_allowed_call() -> None:
    budget = RunBudget(BudgetLimits(model_calls=3), label="main")
    for _ in range(2):
        budget.record_model_call("openai:gpt-4o", None)
    assert budget.check() is None
    budget.record_model_call("openai:gpt-4o", None)
    hit = budget.check()
    assert hit is not None
    assert (hit.limit, hit.maximum, hit.used, hit.run) == ("model_calls", 3, 3, "main")
    assert hit.reason == "the run 'main' reached its model-call limit: 3 of 3 model calls used"


def test_tool_calls_are_limited() -> None:
    budget = RunBudget(BudgetLimits(tool_calls=2))
    budget.record_tool_call()
    assert budget.check() is None
    budget.record_tool_call()
    hit = budget.check()
    assert hit is not None and hit.limit == "tool_calls"
    assert "2 of 2 tool calls" in hit.reason


@pytest.mark.parametrize(
    ("limits", "kind"),
    [
        (BudgetLimits(input_tokens=1000), "input_tokens"),
        (BudgetLimits(output_tokens=300), "output_tokens"),
        (BudgetLimits(total_tokens=1200), "total_tokens"),
    ],
)
def test_token_limits_use_the_reported_usage(limits: BudgetLimits, kind: str) -> None:
    budget = RunBudget(limits)
    budget.record_model_call("m", Usage(input_tokens=600, output_tokens=200))
    assert budget.check() is None
    budget.record_model_call("m", Usage(input_tokens=600, output_tokens=200))
    hit = budget.check()
    assert hit is not None and hit.limit == kind
    assert budget.spent().total_tokens == 1600


def test_the_first_exhausted_limit_is_reported() -> None:
    budget = RunBudget(BudgetLimits(model_calls=1, total_tokens=10))
    budget.record_model_call("m", Usage(input_tokens=50, output_tokens=50))
    hit = budget.check()
    assert hit is not None and hit.limit == "model_calls"


def test_wall_time_counts_from_the_start_of_the_run() -> None:
    clock = FakeClock(1000.0)
    budget = RunBudget(BudgetLimits(wall_time_s=60), clock=clock.time)
    clock.advance(59)
    assert budget.check() is None
    assert budget.time_left() == pytest.approx(1)
    clock.advance(2)
    hit = budget.check()
    assert hit is not None and hit.limit == "wall_time"
    assert hit.reason.endswith("time limit: 61 s of 60 s elapsed")
    assert budget.time_left() == 0


def test_cost_follows_prices_including_cached_input() -> None:
    prices = PriceTable(
        {
            "openai:gpt-4o": ModelPrice(
                input_per_mtok=2.5, output_per_mtok=10.0, cached_input_per_mtok=1.25
            )
        }
    )
    budget = RunBudget(BudgetLimits(cost_usd=1.0), prices=prices)
    budget.record_model_call(
        "openai:gpt-4o", Usage(input_tokens=100_000, output_tokens=20_000, cached_tokens=40_000)
    )
    # 60k fresh × 2.5 + 40k cached × 1.25 + 20k out × 10, per million tokens
    assert budget.spent().cost_usd == pytest.approx(0.15 + 0.05 + 0.2)
    assert budget.check() is None
    budget.record_model_call("openai:gpt-4o", Usage(input_tokens=0, output_tokens=60_000))
    hit = budget.check()
    assert hit is not None and hit.limit == "cost"
    assert "cost limit: $1.0000 of $1.00 spent" in hit.reason


def test_price_patterns_match_model_families_and_exact_names_win() -> None:
    cheap = ModelPrice(input_per_mtok=1, output_per_mtok=5)
    dear = ModelPrice(input_per_mtok=15, output_per_mtok=75)
    table = PriceTable({"anthropic:claude-*": cheap, "anthropic:claude-opus-4-1": dear})
    assert table.price_for("anthropic:claude-haiku-4-5") is cheap
    assert table.price_for("anthropic:claude-opus-4-1") is dear
    assert table.price_for("openai:gpt-4o") is None
    # A fallback chain is priced as its dearest member, and unpriced if any member is.
    assert table.price_for("anthropic:claude-haiku-4-5 | anthropic:claude-opus-4-1") is dear
    assert table.price_for("anthropic:claude-haiku-4-5 | openai:gpt-4o") is None


def test_a_cost_limit_with_an_unpriced_model_stops_instead_of_being_ignored() -> None:
    budget = RunBudget(BudgetLimits(cost_usd=5.0), prices=PriceTable({}))
    budget.record_model_call("ollama:llama3.1", Usage(input_tokens=10, output_tokens=10))
    hit = budget.check()
    assert hit is not None and hit.limit == "cost"
    assert "no price is configured for ollama:llama3.1" in hit.reason


def test_unpriced_models_are_fine_without_a_cost_limit() -> None:
    budget = RunBudget(BudgetLimits(model_calls=10))
    budget.record_model_call("ollama:llama3.1", Usage(input_tokens=10, output_tokens=10))
    assert budget.check() is None
    assert budget.spent().unpriced_models == ("ollama:llama3.1",)


def test_a_child_run_spends_from_its_parent() -> None:
    parent = RunBudget(BudgetLimits(total_tokens=1000), label="main")
    child = parent.child(label="researcher")
    child.record_model_call("m", Usage(input_tokens=700, output_tokens=100))
    child.record_tool_call()
    assert parent.spent().total_tokens == 800 and parent.spent().tool_calls == 1
    assert child.check() is None
    parent.record_model_call("m", Usage(input_tokens=150, output_tokens=50))
    hit = child.check()
    assert hit is not None
    assert hit.run == "main"
    assert hit.reason.startswith("the run 'main' reached its total-token limit")
    # The parent's own spending never shows up in the child's.
    assert child.spent().total_tokens == 800


def test_a_child_limit_stops_the_child_but_not_the_parent() -> None:
    parent = RunBudget(BudgetLimits(model_calls=10), label="main")
    child = parent.child(BudgetLimits(model_calls=2), label="helper")
    child.record_model_call("m", None)
    child.record_model_call("m", None)
    hit = child.check()
    assert hit is not None and hit.run == "helper"
    assert parent.check() is None
    assert parent.spent().model_calls == 2


def test_children_share_the_parents_prices_and_tightest_deadline() -> None:
    clock = FakeClock(1000.0)
    prices = PriceTable({"m": ModelPrice(input_per_mtok=1_000_000, output_per_mtok=0)})
    parent = RunBudget(BudgetLimits(wall_time_s=100), prices=prices, clock=clock.time)
    clock.advance(30)
    child = parent.child(BudgetLimits(wall_time_s=200, cost_usd=3), label="c")
    assert child.time_left() == pytest.approx(70)
    child.record_model_call("m", Usage(input_tokens=2))
    assert child.spent().cost_usd == pytest.approx(2.0)
    assert parent.spent().cost_usd == pytest.approx(2.0)


def test_the_summary_request_explains_the_stop_and_forbids_tools() -> None:
    budget = RunBudget(BudgetLimits(tool_calls=0), label="main")
    hit = budget.check()
    assert hit is not None
    text = hit.summary_request()
    assert hit.reason in text
    assert "Do not call tools" in text


def test_negative_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="model_calls"):
        BudgetLimits(model_calls=-1)
