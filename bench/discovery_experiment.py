"""Experiment 4-7: a task that needs a stock quote, an FX rate and a chart, with 150+ tools
behind `discover_tools` and only `web_search`, `run_python` and `discover_tools` in the prompt.

    python bench/discovery_experiment.py [--lexical]

The model's decisions are scripted (it states each need in words, then calls what it was
given); everything else is real: the discovery engine's ranking, heron's own tool sets
(`perception`, `execution`, `events`, `planning`), the `public_data` connectors talking to a
loopback server that speaks Stooq's CSV and Frankfurter's JSON, `run_python` in the process
sandbox writing an SVG chart. The catalogue is heron's tools plus the reference MCP servers'
real definitions, twice more as mirrors (stand-ins that never run). Printed: what each
`discover_tools` call found, and the prompt tokens of the run against direct exposure of every
schema. `tests/e2e/test_scenario_discovery.py` runs the same scenario as an acceptance test.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from heron import Agent, ScriptedModel
from heron.config import HeronConfig
from heron.config.build import build_agent
from heron.config.builtin import Builtin, BuiltinConfig, build_builtin
from heron.connectors.public_data import DEFAULT_SOURCES, public_data_tools
from heron.mcp.assembly import DiscoveryOptions, McpAssembly, assemble_tools
from heron.mcp.config import McpConfig
from heron.models.tokens import EstimateCounter, count_request
from heron.safety.url_policy import UrlPolicy
from heron.tools.definition import Tool, ToolAnnotations, ToolContext, ToolResult, ToolSpec
from heron.tools.registry import ActivatedToolSet
from heron.tools.validation import SchemaValidator

REFERENCE = Path(__file__).resolve().parent / "discovery_data/reference_mcp_tools.json"
PROMPT_TOOLS = ("web_search", "run_python")
MIRRORS = ("mirror-eu", "mirror-us")
QUOTE_NEED = "I need the latest stock price for a company's ticker symbol"
FX_NEED = "I need the currency exchange rate to convert US dollars into euros"
CLOSE, RATE = 172.62, 0.9183
CHART = f"""\
close_usd, rate = {CLOSE}, {RATE}
bars = [("AAPL in USD", close_usd), ("AAPL in EUR", round(close_usd * rate, 2))]
top = max(v for _, v in bars)
rects = "".join(
    f'<rect x="{{40 + 120 * i}}" y="{{220 - 200 * v / top:.1f}}" width="80" '
    f'height="{{200 * v / top:.1f}}" fill="#4472c4"/>'
    f'<text x="{{40 + 120 * i}}" y="240">{{label}}: {{v}}</text>'
    for i, (label, v) in enumerate(bars)
)
svg = f'<svg xmlns="http://www.w3.org/2000/svg" width="300" height="250">{{rects}}</svg>'
with open("chart.svg", "w") as fh:
    fh.write(svg)
print("wrote chart.svg:", bars)
"""


def script() -> list[dict[str, Any]]:
    """The scripted decisions: each need in words, then the call it leads to."""

    def use(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
        return {"tool_calls": [{"id": call_id, "name": name, "arguments": arguments}]}

    return [
        {
            **use("d1", "discover_tools", need=QUOTE_NEED),
            "expect": {"tools_exclude": ["stock_quote", "fx_rates"]},
        },
        {
            **use("q1", "stock_quote", symbols=["aapl.us"]),
            "expect": {"tools_include": ["stock_quote"]},
        },
        {
            **use("d2", "discover_tools", need=FX_NEED),
            "expect": {"last_message_contains": "AAPL.US"},
        },
        {
            **use("f1", "fx_rates", base="USD", symbols=["EUR"]),
            "expect": {"tools_include": ["fx_rates"]},
        },
        {**use("c1", "run_python", code=CHART), "expect": {"last_message_contains": "EUR"}},
        {
            "text": f"AAPL closed at {CLOSE} USD ({round(CLOSE * RATE, 2)} EUR); chart.svg.",
            "expect": {"last_message_contains": "wrote chart.svg"},
        },
    ]


class MarketData:
    """A loopback server speaking Stooq's quote CSV and Frankfurter's latest-rates JSON."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.seen.append(self.path)
                url = urlsplit(self.path)
                query = parse_qs(url.query, keep_blank_values=True)
                status, kind = 200, "application/json"
                if url.path.startswith("/stooq/q/l"):
                    symbol = query.get("s", [""])[0].upper()
                    body = (
                        "Symbol,Date,Time,Open,High,Low,Close,Volume\r\n"
                        f"{symbol},2024-03-15,22:00:09,171.2,172.6,170.3,{CLOSE},121752699\r\n"
                    ).encode()
                    kind = "text/csv"
                elif url.path.startswith("/fx/latest"):
                    base = query.get("base", ["EUR"])[0]
                    document = {"base": base, "date": "2024-03-15", "rates": {"EUR": RATE}}
                    body = json.dumps(document).encode()
                else:
                    status, body = 404, b'{"message": "Not Found"}'
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.01,), daemon=True)

    def __enter__(self) -> MarketData:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class StandIn:
    """A real MCP definition that is listed but never expected to run."""

    def __init__(self, server: str, definition: Mapping[str, Any]) -> None:
        schema = dict(definition.get("inputSchema") or {"type": "object"})
        self._spec = ToolSpec(
            name=f"{server}__{definition['name']}",
            description=str(definition.get("description") or ""),
            parameters=schema,
            annotations=ToolAnnotations(read_only=True),
            owner=f"mcp:{server}",
        )
        self._validator = SchemaValidator(self._spec.name, schema)

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return self._validator.validate(arguments)

    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult.fail(f"{self._spec.name} is a stand-in of the benchmark")


def stand_ins() -> list[StandIn]:
    listing = json.loads(REFERENCE.read_text(encoding="utf-8"))
    tools = []
    for prefix in ("", *(f"{m}-" for m in MIRRORS)):
        for server, definitions in listing.items():
            tools += [StandIn(prefix + server, d) for d in definitions]
    return tools


@dataclass
class Scenario:
    agent: Agent
    model: ScriptedModel
    assembly: McpAssembly
    builtin: Builtin
    market: MarketData
    workspace: Path
    every: list[Tool] = field(default_factory=list)
    """Every tool of the agent, deferred or not (for the direct-exposure comparison)."""


@asynccontextmanager
async def open_scenario(root: Path, *, embeddings: bool) -> AsyncIterator[Scenario]:
    """The agent of experiment 4-7 in `root` (workspace and state), its loopback data source
    running; `embeddings`: rank with the extra (when installed) or lexically."""
    workspace, state = root / "workspace", root / "state"
    workspace.mkdir(parents=True, exist_ok=True)
    config = HeronConfig.model_validate(
        {
            "agent": {"autonomy": "full", "max_iterations": 12},
            "state": {"dir": str(state)},
            "skills": {"enabled": False},
            "discovery": {"tool": "discover_tools", "prompt_tools": list(PROMPT_TOOLS)},
        }
    )
    builtin = await build_builtin(
        BuiltinConfig(
            sets=["perception", "execution", "events", "planning"], workspace=str(workspace)
        ),
        state_dir=state,
    )
    try:
        with MarketData() as market:
            prefix = {"stooq": "/stooq", "frankfurter": "/fx"}
            sources = {
                name: dataclasses.replace(source, base_url=market.base + prefix[name])
                for name, source in DEFAULT_SOURCES.items()
                if name in prefix
            }
            public = [
                t
                for t in public_data_tools(
                    policy=UrlPolicy(allow_hosts=("127.0.0.1",)),
                    sources={**DEFAULT_SOURCES, **sources},
                    workspace_root=workspace,
                )
            ]
            local: dict[str, list[Tool]] = {
                group: [t for t in tools if t.spec.name not in PROMPT_TOOLS]
                for group, tools in builtin.tools.items()
            }
            local["connectors"] = public
            mcp = assemble_tools(
                McpConfig(),
                stand_ins(),
                autonomy="full",
                allowed_tools=None,
                excluded_tools=(),
                activated=ActivatedToolSet(),
                local_tools=local,
                prompt_tools=PROMPT_TOOLS,
                discovery=DiscoveryOptions(tool="discover_tools", embeddings=embeddings),
            )
            model = ScriptedModel(script())
            agent = build_agent(config, model=model, mcp=mcp, builtin=builtin)
            every = [*builtin.all_tools(), *public, *mcp.tool_catalogue.tools()]
            unique = list({t.spec.name: t for t in every}.values())
            yield Scenario(
                agent=agent,
                model=model,
                assembly=mcp,
                builtin=builtin,
                market=market,
                workspace=workspace,
                every=unique,
            )
    finally:
        await builtin.aclose()


def token_comparison(scenario: Scenario, base_system: str) -> tuple[int, int, int, int]:
    """(first request, whole run) prompt tokens with discovery, then with direct exposure of
    every tool's schema (the same messages, the base system prompt)."""
    counter = EstimateCounter("anthropic")
    model = scenario.model
    specs = [t.spec for t in scenario.every]
    deferred_first = direct_first = deferred_total = direct_total = 0
    for n, request in enumerate(model.requests):
        messages = model.messages_at(n)
        with_discovery = count_request(
            counter, system=request.system, messages=messages, tools=request.tools
        )
        direct = count_request(counter, system=base_system, messages=messages, tools=specs)
        if n == 0:
            deferred_first, direct_first = with_discovery, direct
        deferred_total += with_discovery
        direct_total += direct
    return deferred_first, direct_first, deferred_total, direct_total


def found(result_data: Any) -> list[str]:
    return list(result_data.get("listed", [])) if isinstance(result_data, dict) else []


async def main_async(lexical: bool) -> None:
    from heron.turn.events import BaseEvent, ToolResultEvent

    with tempfile.TemporaryDirectory(prefix="heron-exp47-") as tmp:
        async with open_scenario(Path(tmp), embeddings=not lexical) as scenario:
            results: dict[str, ToolResultEvent] = {}

            def sink(event: BaseEvent) -> None:
                if isinstance(event, ToolResultEvent):
                    results[event.id] = event

            engine = scenario.assembly.engine
            assert engine is not None
            index = await engine.ready()
            print(f"catalogue: {len(scenario.assembly.tool_catalogue)} tools behind discovery,")
            print(f"  ranking: {index.mode} ({index.mode_reason or 'embeddings on'})")
            print(f"  in the prompt: {', '.join(scenario.agent.registry.names())}")
            run = await scenario.agent.run("Chart Apple's latest close in USD and EUR.", sink=sink)
            print(f"run: {run.outcome.status} after {run.outcome.iterations} model calls")
            for call_id, need in (("d1", QUOTE_NEED), ("d2", FX_NEED)):
                print(f"  discover_tools({need!r}) → {found(results[call_id].data)}")
            for call_id in ("q1", "f1", "c1"):
                event = results[call_id]
                print(f"  {event.name}: {event.status}, {event.output.splitlines()[0][:70]}")
            chart = scenario.workspace / "chart.svg"
            print(f"  chart.svg: {chart.stat().st_size if chart.exists() else 0} bytes")
            base = scenario.agent.system_prompt.split("\n\n## More tools")[0]
            first, direct_first, total, direct_total = token_comparison(scenario, base)
            print("prompt tokens (estimate, anthropic profile):")
            print(f"  first request: discover_tools {first:,} vs direct {direct_first:,}")
            print(
                f"  whole run ({len(scenario.model.requests)} requests): discover_tools "
                f"{total:,} vs direct {direct_total:,} "
                f"({100 * (1 - total / direct_total):.0f} % fewer)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lexical", action="store_true", help="rank without embeddings")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    asyncio.run(main_async(args.lexical))


if __name__ == "__main__":
    sys.exit(main())
