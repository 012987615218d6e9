"""`discover_tools` / `tool_search`: one implementation over the discovery engine, offered under
one name per agent; its answer (candidates with schemas, skills, the loaded-tools status),
grants, the sequential-batch rule, the work kept off the event loop, and the catalogue section
that stays within its token budget at any catalogue size — through real `Agent` runs."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from test_discovery import ConceptEmbedder
from test_turn_dispatch import Rendezvous, results

from heron import Agent, ScriptedModel, tool
from heron.always_on.subagents.grant import grant_tools
from heron.discovery import DiscoveryParams
from heron.mcp.assembly import CATALOGUE_TOKENS, DiscoveryOptions, McpAssembly, assemble_tools
from heron.mcp.catalogue import McpCatalogue
from heron.mcp.config import McpConfig
from heron.mcp.tool_search import Companion, DiscoveryEngine, ToolSearchTool
from heron.messages import ToolResultMessage
from heron.models.tokens import EstimateCounter, count_tools, counter_for_model
from heron.tools.definition import ToolAnnotations, ToolContext, ToolResult, ToolSpec
from heron.tools.registry import ActivatedToolSet, ToolRegistry
from heron.tools.validation import SchemaValidator
from heron.turn.context import TurnHandle
from support.engine import Events, call, calls_turn

CTX = ToolContext(call_id="c1", turn_id="t1")


class Listed:
    """A catalogue tool (namespaced like an MCP tool) that records its calls."""

    def __init__(self, name: str, description: str, **params: str) -> None:
        schema = {
            "type": "object",
            "properties": {k: {"type": "string", "description": v} for k, v in params.items()},
        }
        self._spec = ToolSpec(
            name=name,
            description=description,
            parameters=schema,
            annotations=ToolAnnotations(read_only=True),
            owner="mcp:" + name.split("__")[0],
        )
        self._validator = SchemaValidator(name, schema)
        self.calls: list[dict[str, Any]] = []

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return self._validator.validate(arguments)

    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        self.calls.append(arguments)
        return ToolResult.ok(f"{self._spec.name}: ok")


def catalogue_tools() -> list[Listed]:
    return [
        Listed("markets__stock_quote", "Latest stock price for a ticker symbol.", symbol="Ticker"),
        Listed("markets__fx_rate", "Currency exchange rate between two currencies.", pair="Pair"),
        Listed("charts__plot_series", "Draw a line chart or graph of a data series.", data="D"),
        Listed("weather__get_forecast", "Forecast for a city: temperature and rain.", city="City"),
        Listed("files__read_file", "Read a file from the workspace.", path="File path"),
        Listed("time__convert_time", "Convert a time between time zones.", tz="Timezone"),
    ]


SKILLS = [
    Companion(
        name="weekly-report",
        description="Build the weekly status report as a Markdown table.",
        hint="`load_skill` reads one",
    )
]


def assemble(tools: Sequence[Any], **options: Any) -> McpAssembly:
    return assemble_tools(
        McpConfig(exposure="deferred"),
        tools,
        autonomy="full",
        allowed_tools=None,
        excluded_tools=options.pop("excluded_tools", ()),
        activated=ActivatedToolSet(),
        discovery=DiscoveryOptions(**options),
    )


def agent_for(mcp: McpAssembly, model: ScriptedModel) -> Agent:
    registry = ToolRegistry()
    mcp.register(registry)
    return Agent(
        model=model,
        tools=registry,
        system_prompt=mcp.system_prompt("Base.", native_tools=True, strict_tool_parsing=False),
        autonomy="full",
        activated=mcp.activated,
        catalogue=mcp.catalogue,
    )


# -- one implementation, one name -------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "argument"), [("tool_search", "query"), ("discover_tools", "need")]
)
def test_the_search_tool_is_offered_under_exactly_one_name(name: str, argument: str) -> None:
    mcp = assemble(catalogue_tools(), tool=name)
    [search] = mcp.bundles["mcp"]
    assert isinstance(search, ToolSearchTool)
    assert search.spec.name == name
    assert search.spec.parameters["required"] == [argument]
    other = {"tool_search", "discover_tools"} - {name}
    assert not other & {t.spec.name for t in mcp.tools}
    # The catalogue section teaches the model to call it when it meets a capability gap.
    assert f"When you need a capability that none of your loaded tools has, call `{name}`" in (
        mcp.prompt_section
    )


def test_excluding_either_search_name_removes_the_search_tool_and_its_section() -> None:
    mcp = assemble(catalogue_tools(), tool="discover_tools", excluded_tools=["tool_search"])
    assert mcp.bundles == {} and mcp.prompt_section == ""


async def test_discover_tools_loads_candidates_with_schemas_skills_and_a_status_line(
    events: Events,
) -> None:
    tools = catalogue_tools()
    mcp = assemble(tools, tool="discover_tools", companions=SKILLS)
    model = ScriptedModel(
        [
            {
                **calls_turn(call("discover_tools", "d1", need="I need to look up stock prices")),
                "expect": {"tools_exclude": ["markets__stock_quote"]},
            },
            {
                **calls_turn(call("markets__stock_quote", "q1", symbol="ACME")),
                "expect": {"tools_include": ["markets__stock_quote"]},
            },
            {
                **calls_turn(call("discover_tools", "d2", need="the weekly report")),
                "expect": {"last_message_contains": "markets__stock_quote: ok"},
            },
            {"text": "done"},
        ]
    )
    result = await agent_for(mcp, model).run("Quote ACME", sink=events)
    assert result.ok, result.outcome
    answers = {m.call_id: m for m in result.history if isinstance(m, ToolResultMessage)}
    first = events.results()["d1"]
    assert first.data is not None and first.data["listed"][0] == "markets__stock_quote"
    # Up to 5 candidates: those close to the need (here, the two market tools).
    assert 1 <= len(first.data["listed"]) <= 5
    assert '"name": "markets__stock_quote"' in answers["d1"].content  # the full schema
    assert '"symbol": {"type": "string"' in answers["d1"].content
    assert answers["d1"].loaded_tools == tuple(first.data["listed"])
    assert answers["d1"].keep  # loaded schemas are never trimmed away
    assert answers["d1"].content.splitlines()[-1].startswith("Loaded tools so far: ")
    assert tools[0].calls == [{"symbol": "ACME"}]
    second = events.results()["d2"]
    assert second.data is not None and second.data["skills"] == ["weekly-report"]
    assert "- weekly-report: Build the weekly status report" in answers["d2"].content


async def test_select_loads_exact_names_and_exact_names_win_a_search() -> None:
    mcp = assemble(catalogue_tools(), tool="discover_tools")
    [search] = mcp.bundles["mcp"]
    selected = await search.execute({"need": "select:time__convert_time"}, CTX)
    assert selected.data["listed"] == ["time__convert_time"]
    named = await search.execute({"need": "files__read_file"}, CTX)
    assert named.data["listed"][0] == "files__read_file"


async def test_nothing_close_loads_nothing_and_lists_the_servers() -> None:
    mcp = assemble(catalogue_tools(), tool="discover_tools")
    [search] = mcp.bundles["mcp"]
    result = await search.execute({"need": "quantum entanglement simulator"}, CTX)
    assert result.data["nothing_found"] and result.data["listed"] == []
    assert "The tool servers:" in result.output
    assert "- markets (2 tools): tools: fx rate, stock quote" in result.output.splitlines()
    assert result.loaded_tools == () and not result.keep_in_context


# -- grants -----------------------------------------------------------------------------------


async def test_a_sub_agent_cannot_discover_past_its_grant() -> None:
    mcp = assemble(catalogue_tools(), tool="discover_tools")
    grant = mcp.grant(["weather__*", "files__*"])
    [search] = grant.tools
    assert isinstance(search, ToolSearchTool) and search.engine is mcp.engine
    for need in ("stock price for a ticker", "markets__stock_quote", "select:markets__fx_rate"):
        result = await search.execute({"need": need}, CTX)
        assert not {"markets__stock_quote", "markets__fx_rate"} & set(result.data["listed"]), need
    forecast = await search.execute({"need": "will it rain in Oslo"}, CTX)
    assert forecast.data["listed"][0] == "weather__get_forecast"
    lost = await search.execute({"need": "quantum entanglement"}, CTX)
    assert "markets" not in lost.output  # the directory of a grant names only granted servers
    assert "markets" not in grant.prompt_section


@pytest.mark.parametrize("name", ["tool_search", "discover_tools"])
async def test_a_spawned_child_gets_a_search_tool_of_its_own_over_its_grant(name: str) -> None:
    # The parent's search activates into the parent's own set: under either name, a child
    # gets a search tool of its own (the same name, the same engine) that loads into its own
    # set, which starts with what the parent already loaded.
    mcp = assemble(catalogue_tools(), tool=name)
    grants: list[Any] = []

    @tool(read_only=True)
    def probe(ctx: ToolContext) -> str:
        """Records what a child spawned now would get."""
        assert isinstance(ctx.turn, TurnHandle)
        grants.append(grant_tools(ctx.turn, definition_tools=None, requested=None, write=False))
        return "ok"

    model = ScriptedModel(
        [
            calls_turn(call(name, "s1", **{"query" if name == "tool_search" else "need": "stock"})),
            calls_turn(call("probe", "p1")),
            {"text": "done"},
        ]
    )
    registry = ToolRegistry([probe])
    mcp.register(registry)
    agent = Agent(model=model, tools=registry, activated=mcp.activated, catalogue=mcp.catalogue)
    assert (await agent.run("go")).ok
    (grant,) = grants
    (search,) = [t for t in grant.tools if t.spec.name == name]
    assert isinstance(search, ToolSearchTool) and search.engine is mcp.engine
    assert search.activated is grant.activated and grant.activated is not mcp.activated
    assert "markets__stock_quote" in grant.activated  # what the parent loaded is passed on
    await search.execute({search._argument: "select:weather__get_forecast"}, CTX)
    assert "weather__get_forecast" in grant.activated
    assert "weather__get_forecast" not in mcp.activated  # the child's load stays its own


# -- the sequential-batch rule and the event loop ---------------------------------------------


async def test_a_batch_containing_discover_tools_runs_sequentially(events: Events) -> None:
    rv = Rendezvous()

    @tool(read_only=True)
    def discover_tools(need: str) -> str:
        """Find tools.

        Args:
            need: What is needed.
        """
        return "nothing"

    agent = Agent(
        model=ScriptedModel(
            [
                calls_turn(call("tool_a"), call("discover_tools", need="x"), call("tool_b")),
                {"text": "done"},
            ]
        ),
        tools=[*rv.tools(read_only=True), discover_tools],
    )
    result = await agent.run("go", sink=events)
    assert [c for _, c in results(result.history)] == ["a alone", "nothing", "b alone"]


class ThreadRecorder(ConceptEmbedder):
    """Records the threads that embed queries."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[int] = []

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.threads.append(threading.get_ident())
        return super().embed_queries(texts)


async def test_the_index_and_the_query_embedding_are_built_off_the_event_loop() -> None:
    embedder = ThreadRecorder()
    catalogue = McpCatalogue(catalogue_tools())
    engine = DiscoveryEngine(
        catalogue.entries, embedder=embedder, cache=None, params=DiscoveryParams(min_margin=0.5)
    )
    search = ToolSearchTool(catalogue, ActivatedToolSet(), name="discover_tools", engine=engine)
    assert not engine.built
    result = await search.execute({"need": "convert 100 dollars to euros"}, CTX)
    assert engine.built and result.data["listed"][0] == "markets__fx_rate"
    assert embedder.threads and threading.get_ident() not in embedder.threads


# -- the catalogue section's budget -----------------------------------------------------------


def many_tools(count: int, per_server: int = 14) -> list[Listed]:
    words = ["quote", "rate", "chart", "forecast", "file", "time", "mail", "ticket", "issue"]
    return [
        Listed(
            f"server{n // per_server:03d}__{words[n % len(words)]}_tool_{n:04d}",
            f"Does {words[n % len(words)]} things for request number {n}, with care. More text.",
            query="What to do",
        )
        for n in range(count)
    ]


@pytest.mark.parametrize("count", [120, 500, 2100])
def test_the_catalogue_and_the_meta_tools_stay_within_2000_tokens(count: int) -> None:
    mcp = assemble(many_tools(count), tool="discover_tools", companions=SKILLS)
    [search] = mcp.bundles["mcp"]
    for counter in (EstimateCounter("anthropic"), counter_for_model("openai:gpt-4o")):
        total = counter.count(mcp.prompt_section) + count_tools(counter, [search.spec])
        assert total <= CATALOGUE_TOKENS, (count, counter.name, total)
    assert "<tool-catalogue>" in mcp.prompt_section
    if count >= 2000:
        assert "more servers with" in mcp.prompt_section  # said, never silently dropped


def test_at_120_tools_the_section_still_lists_every_tool_by_name() -> None:
    mcp = assemble(many_tools(120), tool="discover_tools")
    for tool_ in many_tools(120):
        assert tool_.spec.name.split("__")[1] in mcp.prompt_section
