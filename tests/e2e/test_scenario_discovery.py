"""Experiment 4-7, accepted: 150+ tools behind `discover_tools`, only `web_search`, `run_python`
and `discover_tools` in the prompt, and a task that needs a stock quote, an FX rate and a chart.

The model's decisions are scripted — it states each need in words and calls what it was given
— and everything else is real (bench/discovery_experiment.py builds the scenario; run it to
see the token figures): the engine's ranking decides what `discover_tools` returns, the
`public_data` connectors query a loopback server speaking Stooq's and Frankfurter's formats,
and `run_python` writes the chart in the sandbox.
"""

from __future__ import annotations

import sys
from pathlib import Path

from heron.messages import ToolResultMessage
from heron.turn.events import BaseEvent, ToolResultEvent

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from discovery_experiment import (
    CLOSE,
    FX_NEED,
    PROMPT_TOOLS,
    QUOTE_NEED,
    RATE,
    open_scenario,
    token_comparison,
)


async def test_the_right_tools_are_discovered_and_the_run_completes_with_real_calls(
    tmp_path: Path,
) -> None:
    async with open_scenario(tmp_path, embeddings=False) as scenario:
        assert len(scenario.assembly.tool_catalogue) >= 120
        assert scenario.agent.registry.names() == [*PROMPT_TOOLS, "discover_tools"]
        results: dict[str, ToolResultEvent] = {}

        def sink(event: BaseEvent) -> None:
            if isinstance(event, ToolResultEvent):
                results[event.id] = event

        run = await scenario.agent.run("Chart Apple's latest close in USD and EUR.", sink=sink)

        assert run.ok, run.outcome
        quote_found, fx_found = (results[i].data for i in ("d1", "d2"))
        assert isinstance(quote_found, dict) and isinstance(fx_found, dict)
        # What the engine found for the needs stated in words (its real ranking).
        assert quote_found["listed"][0] == "stock_quote", (QUOTE_NEED, quote_found)
        assert fx_found["listed"][0] == "fx_rates", (FX_NEED, fx_found)
        assert fx_found["loaded"][:2] == ["stock_quote", "fx_rates"]
        # Real executions against the loopback data source and in the sandbox.
        assert results["q1"].status == "ok" and f"close {CLOSE}" in results["q1"].output
        assert results["f1"].status == "ok" and f"1 USD = {RATE} EUR" in results["f1"].output
        assert any(p.startswith("/stooq/q/l/") for p in scenario.market.seen)
        assert any(p.startswith("/fx/latest") for p in scenario.market.seen)
        assert results["c1"].status == "ok" and "wrote chart.svg" in results["c1"].output
        chart = (scenario.workspace / "chart.svg").read_text()
        assert chart.startswith("<svg") and "AAPL in EUR: 158.52" in chart
        outputs = {m.call_id: m for m in run.history if isinstance(m, ToolResultMessage)}
        assert outputs["d1"].keep and "stock_quote" in outputs["d1"].loaded_tools

        base = scenario.agent.system_prompt.split("\n\n## More tools")[0]
        first, direct_first, total, direct_total = token_comparison(scenario, base)
        assert first < direct_first / 5 and total < direct_total / 2
