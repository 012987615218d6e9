"""Deferred MCP exposure: catalogue, access policy, `tool_search`, the never-unreachable rule
and per-turn filter groups. Uses in-memory tools shaped like MCP wrappers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from heron import Agent, ScriptedModel
from heron.discovery import DiscoveryParams
from heron.mcp.catalogue import (
    McpAccessPolicy,
    McpCatalogue,
    choose_exposure,
    loaded_status_line,
    summary_line,
)
from heron.mcp.config import ToolFilterGroup
from heron.mcp.filter_groups import compute_turn_filter
from heron.mcp.tool_search import ToolSearchTool, resolve_unactivated
from heron.tools.definition import ToolAnnotations, ToolContext, ToolResult, ToolSpec
from heron.tools.registry import ActivatedToolSet
from heron.tools.validation import SchemaValidator
from support.engine import Events, call, calls_turn

CTX = ToolContext(call_id="c1", turn_id="t1")


class FakeMcpTool:
    """An MCP-style tool (namespaced, owned by `mcp:<server>`) that echoes its arguments."""

    def __init__(
        self,
        name: str,
        description: str,
        params: Mapping[str, Any] | None = None,
        *,
        read_only: bool = False,
    ) -> None:
        schema = {"type": "object", "properties": dict(params or {}), "additionalProperties": False}
        self._spec = ToolSpec(
            name=name,
            description=description,
            parameters=schema,
            annotations=ToolAnnotations(read_only=read_only),
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
        return ToolResult.ok(f"{self._spec.name} ran")


def sample_tools() -> list[FakeMcpTool]:
    return [
        FakeMcpTool(
            "weather__forecast",
            "Get the weather forecast (temperature, rain, wind) for a city. Returns JSON.",
            {"city": {"type": "string"}, "days": {"type": "integer"}},
            read_only=True,
        ),
        FakeMcpTool(
            "finance__stock_quote",
            "Current stock price and daily change for a ticker symbol.",
            {"ticker": {"type": "string"}},
        ),
        FakeMcpTool(
            "files__read_file",
            "Read a text file from the workspace and return its contents.",
            {"path": {"type": "string"}},
        ),
        FakeMcpTool(
            "files__write_file",
            "Write text to a file in the workspace, replacing it.",
            {"path": {"type": "string"}, "content": {"type": "string"}},
        ),
        FakeMcpTool(
            "mail__send_email",
            "Send an email message to a recipient.",
            {"to": {"type": "string"}, "body": {"type": "string"}},
        ),
        FakeMcpTool("misc__mystery", ""),
    ]


def search_tool(
    policy: McpAccessPolicy | None = None, **kwargs: Any
) -> tuple[ToolSearchTool, ActivatedToolSet]:
    activated = ActivatedToolSet()
    catalogue = McpCatalogue(sample_tools(), policy=policy)
    return ToolSearchTool(catalogue, activated, **kwargs), activated


async def run_search(tool: ToolSearchTool, query: str, **extra: Any) -> ToolResult:
    return await tool.execute(tool.validate({"query": query, **extra}), CTX)


# -- catalogue ------------------------------------------------------------------------------------


def test_catalogue_lists_names_with_one_line_summaries_in_name_order() -> None:
    catalogue = McpCatalogue(reversed(sample_tools()))
    section = catalogue.prompt_section()
    lines = section.split("<tool-catalogue>\n")[1].split("\n</tool-catalogue>")[0]
    assert lines.splitlines() == [
        "files__read_file - Read a text file from the workspace and return its contents.",
        "files__write_file - Write text to a file in the workspace, replacing it.",
        "finance__stock_quote - Current stock price and daily change for a ticker symbol.",
        "mail__send_email - Send an email message to a recipient.",
        "misc__mystery - MCP tool",
        "weather__forecast - Get the weather forecast (temperature, rain, wind) for a city.",
    ]
    assert "tool_search" in section


def test_preactivated_tools_are_left_out_of_the_catalogue_section() -> None:
    catalogue = McpCatalogue(sample_tools())
    section = catalogue.prompt_section(exclude=["weather__forecast"])
    assert "weather__forecast" not in section
    assert "files__read_file" in section


def test_catalogue_section_is_empty_when_every_tool_is_excluded() -> None:
    catalogue = McpCatalogue(sample_tools()[:1])
    assert catalogue.prompt_section(exclude=["weather__forecast"]) == ""


def test_a_catalogue_over_its_budget_lists_names_grouped_by_server() -> None:
    catalogue = McpCatalogue(sample_tools())
    section = catalogue.prompt_section(budget_chars=100)
    body = section.split("<tool-catalogue>\n")[1].split("\n</tool-catalogue>")[0]
    assert body.splitlines() == [
        "files (2): read_file, write_file",
        "finance (1): stock_quote",
        "mail (1): send_email",
        "misc (1): mystery",
        "weather (1): forecast",
    ]
    assert "`<server>__<tool>`" in section


def test_summary_is_the_first_sentence_cut_to_one_short_line() -> None:
    assert summary_line("Does X.  Then\nmore text.") == "Does X."
    long = summary_line("word " * 100)
    assert len(long) == 120 and long.endswith("…")


def test_exposure_is_direct_below_the_threshold_and_deferred_from_it() -> None:
    assert choose_exposure(99, "auto", 100) == "direct"
    assert choose_exposure(100, "auto", 100) == "deferred"
    assert choose_exposure(3, "deferred", 100) == "deferred"
    assert choose_exposure(500, "direct", 100) == "direct"


# -- select mode ----------------------------------------------------------------------------------


async def test_select_activates_and_later_selects_add_in_insertion_order() -> None:
    tool, activated = search_tool()
    first = await run_search(tool, "select:files__read_file")
    second = await run_search(tool, "select:weather__forecast, files__read_file")
    assert first.success and second.success
    assert activated.names() == ["files__read_file", "weather__forecast"]
    assert [s.name for s in activated.specs()] == ["files__read_file", "weather__forecast"]
    assert second.data["activated"] == ["weather__forecast"]
    assert '"parameters": {"type": "object"' in second.output


async def test_select_of_unknown_name_reports_not_found_with_a_close_name() -> None:
    tool, activated = search_tool()
    result = await run_search(tool, "select:files__read_fil")
    assert result.success
    assert "Not found: files__read_fil" in result.output
    assert "files__read_file" in result.data["suggestions"]
    assert len(activated) == 0


async def test_empty_query_is_a_failure_that_says_what_to_pass() -> None:
    tool, _ = search_tool()
    for query in ("   ", "select:"):
        result = await run_search(tool, query)
        assert not result.success
        assert "query is empty" in (result.error or "")


def test_max_results_outside_its_range_is_an_argument_error() -> None:
    tool, _ = search_tool()
    with pytest.raises(ValueError, match="max_results"):
        tool.validate({"query": "x", "max_results": 0})


async def test_activation_hook_receives_only_newly_activated_tools_once() -> None:
    seen: list[list[str]] = []
    tool, _ = search_tool(on_activate=lambda tools: seen.append([t.spec.name for t in tools]))
    await run_search(tool, "select:files__read_file")
    await run_search(tool, "select:files__read_file,mail__send_email")
    await run_search(tool, "select:mail__send_email")
    assert seen == [["files__read_file"], ["mail__send_email"]]


# -- search mode ----------------------------------------------------------------------------------


async def test_search_finds_a_tool_through_related_words() -> None:
    tool, activated = search_tool()
    result = await run_search(tool, "will there be precipitation in Oslo tomorrow?")
    assert result.data["listed"][0] == "weather__forecast"
    assert "weather__forecast" in activated


async def test_search_ranks_the_tool_matching_more_terms_first() -> None:
    tool, _ = search_tool()
    result = await run_search(tool, "write file workspace", max_results=2)
    assert result.data["listed"] == ["files__write_file", "files__read_file"]


async def test_search_below_the_threshold_says_nothing_found_and_activates_nothing() -> None:
    tool, activated = search_tool()
    result = await run_search(tool, "quantum entanglement simulator")
    assert result.success
    assert result.output.startswith("Nothing found for 'quantum entanglement simulator'")
    assert result.data["nothing_found"] is True
    assert len(activated) == 0


async def test_nothing_found_suggests_close_names() -> None:
    tool, _ = search_tool()
    # Both words misspelt: "stok_quote" is found now that "quote" alone is enough.
    result = await run_search(tool, "stok_qoute")
    assert result.data["nothing_found"]
    assert "finance__stock_quote" in result.data["suggestions"]


# A word of each tool's name and one of its description, unique to it among the first three.
TINY_QUERIES = {
    "weather__forecast": ("forecast", "temperature"),
    "finance__stock_quote": ("quote", "price"),
    "files__read_file": ("file", "workspace"),
}


@pytest.mark.parametrize("size", [1, 2, 3])
async def test_an_exact_word_finds_its_tool_in_a_catalogue_of_one_to_three_tools(
    size: int,
) -> None:
    tools = sample_tools()[:size]
    for target in tools:
        for word in TINY_QUERIES[target.spec.name]:
            search = ToolSearchTool(McpCatalogue(tools), ActivatedToolSet())
            result = await run_search(search, word)
            assert result.data["listed"][:1] == [target.spec.name], (size, word, result.output)
            assert target.spec.name in search.activated


@pytest.mark.parametrize("size", [1, 2, 3])
async def test_an_unrelated_query_still_finds_nothing_in_a_tiny_catalogue(size: int) -> None:
    search = ToolSearchTool(McpCatalogue(sample_tools()[:size]), ActivatedToolSet())
    result = await run_search(search, "quantum entanglement simulator")
    assert result.data["nothing_found"] is True
    assert len(search.activated) == 0


def test_search_order_is_deterministic_for_ties() -> None:
    twins = [FakeMcpTool(f"srv__tool_{c}", "Convert currency amounts.") for c in "dcba"]
    catalogue = McpCatalogue([*twins, *sample_tools()])
    search = ToolSearchTool(
        catalogue, ActivatedToolSet(), params=DiscoveryParams(lexical_min_relevance=0.5)
    )
    names = [t.spec.name for t in search.search("convert currency", 4).listed]
    assert names == ["srv__tool_a", "srv__tool_b", "srv__tool_c", "srv__tool_d"]


# -- policy ---------------------------------------------------------------------------------------


async def test_policy_denied_tool_never_appears_never_activates_and_uses_no_slot() -> None:
    policy = McpAccessPolicy(excluded_tools=["files__write_file"])
    tool, activated = search_tool(policy)
    assert "files__write_file" not in tool.catalogue.prompt_section()
    searched = await run_search(tool, "write file workspace", max_results=1)
    assert searched.data["listed"] == ["files__read_file"]
    selected = await run_search(tool, "select:files__write_file")
    assert selected.data["not_found"] == ["files__write_file"]
    assert "files__write_file" not in activated


def test_profile_allow_list_admits_namespaced_mcp_names_but_a_per_run_list_does_not() -> None:
    policy = McpAccessPolicy(allowed_tools=["shell"])
    assert policy.allows_name("files__read_file")
    assert policy.allows_name("shell")
    assert not policy.allows_name("web_fetch")
    narrowed = policy.narrow(["shell"])
    assert not narrowed.allows_name("files__read_file")
    assert McpAccessPolicy(caller_allowed=["shell"]).allows_name("files__read_file") is False


def test_empty_allow_list_denies_every_tool_and_exclusions_match_globs_case_insensitively() -> None:
    assert not McpAccessPolicy(allowed_tools=[]).allows_name("files__read_file")
    policy = McpAccessPolicy(excluded_tools=["Files__*"])
    assert not policy.allows_name("files__read_file")
    assert policy.allows_name("mail__send_email")


def test_read_only_autonomy_keeps_only_tools_annotated_read_only() -> None:
    catalogue = McpCatalogue(sample_tools(), policy=McpAccessPolicy(read_only=True))
    assert catalogue.names() == ["weather__forecast"]


# -- never unreachable ----------------------------------------------------------------------------


def test_an_exact_catalogue_name_resolves_and_is_activated_without_tool_search() -> None:
    catalogue = McpCatalogue(sample_tools())
    activated = ActivatedToolSet()
    tool = resolve_unactivated("mail__send_email", catalogue, activated)
    assert tool is not None and tool.spec.name == "mail__send_email"
    assert activated.names() == ["mail__send_email"]


def test_unknown_suffix_or_per_run_denied_names_do_not_resolve() -> None:
    catalogue = McpCatalogue(sample_tools())
    activated = ActivatedToolSet()
    assert resolve_unactivated("send_email", catalogue, activated) is None
    assert resolve_unactivated("mail__nothing", catalogue, activated) is None
    narrowed = McpAccessPolicy().narrow(["files__read_file"])
    assert resolve_unactivated("mail__send_email", catalogue, activated, policy=narrowed) is None
    assert len(activated) == 0


# -- through the agent loop -----------------------------------------------------------------------


async def test_agent_calls_a_tool_loaded_by_tool_search_on_its_next_step(events: Events) -> None:
    tools = sample_tools()
    activated = ActivatedToolSet()
    search = ToolSearchTool(McpCatalogue(tools), activated)
    model = ScriptedModel(
        [
            {
                **calls_turn(call("tool_search", query="weather forecast for a city")),
                "expect": {"tools_exclude": ["weather__forecast"]},
            },
            {
                **calls_turn(call("weather__forecast", city="Oslo")),
                "expect": {"tools_include": ["tool_search", "weather__forecast"]},
            },
            {"text": "Rain tomorrow."},
        ]
    )
    agent = Agent(model=model, tools=[search], autonomy="full", activated=activated)
    result = await agent.run("Weather in Oslo?", sink=events)
    assert result.ok, result.outcome
    assert tools[0].calls == [{"city": "Oslo"}]
    assert loaded_status_line(activated) == "Loaded MCP tools: weather__forecast."


# -- filter groups --------------------------------------------------------------------------------

MCP_NAMES = ["files__read_file", "files__write_file", "mail__send_email", "weather__forecast"]


def test_dynamic_group_shows_its_tools_only_when_a_keyword_is_in_the_message() -> None:
    groups = [ToolFilterGroup(mode="dynamic", tools=["mail__*"], keywords=["E-Mail"])]
    quiet = compute_turn_filter(groups, MCP_NAMES, "read my notes")
    assert "mail__send_email" in quiet.excluded and "mail__send_email" not in quiet.visible
    loud = compute_turn_filter(groups, MCP_NAMES, "send an e-mail to Bo")
    assert loud.visible == ("mail__send_email",)


def test_with_groups_unmatched_mcp_tools_are_excluded_and_only_mcp_names_are_touched() -> None:
    groups = [ToolFilterGroup(mode="always", tools=["files__read_*"])]
    result = compute_turn_filter(groups, MCP_NAMES, "anything")
    assert result.visible == ("files__read_file",)
    assert set(result.excluded) == set(MCP_NAMES) - {"files__read_file"}
    assert set(result.excluded) <= set(MCP_NAMES)


def test_without_groups_every_allowed_mcp_tool_is_visible() -> None:
    result = compute_turn_filter([], MCP_NAMES, "hi", allowed=lambda n: n != "mail__send_email")
    assert result.visible == ("files__read_file", "files__write_file", "weather__forecast")
    assert result.excluded == ("mail__send_email",)


def test_groups_never_grant_what_policy_denies() -> None:
    groups = [ToolFilterGroup(mode="always", tools=["*"])]
    policy = McpAccessPolicy(excluded_tools=["files__write_file"])
    direct = compute_turn_filter(groups, MCP_NAMES, "x", allowed=policy.allows_name)
    assert "files__write_file" in direct.excluded
    deferred = compute_turn_filter(
        groups, MCP_NAMES, "x", allowed=policy.allows_name, exposure="deferred"
    )
    assert "files__write_file" not in deferred.preactivate
    assert "files__read_file" in deferred.preactivate


def test_deferred_mode_preactivates_always_groups_and_ignores_dynamic_ones() -> None:
    groups = [
        ToolFilterGroup(mode="always", tools=["weather__*"]),
        ToolFilterGroup(mode="dynamic", tools=["mail__*"], keywords=["mail"]),
    ]
    result = compute_turn_filter(groups, MCP_NAMES, "no keyword", exposure="deferred")
    assert result.preactivate == ("weather__forecast",)
    assert result.excluded == ()
    catalogue = McpCatalogue(sample_tools())
    activated = ActivatedToolSet()
    for name in result.preactivate * 2:
        tool = catalogue.get(name)
        assert tool is not None
        activated.activate(tool)
    assert activated.names() == ["weather__forecast"]
    assert "weather__forecast" not in catalogue.prompt_section(exclude=result.preactivate)


def test_a_dynamic_group_without_keywords_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="keyword"):
        ToolFilterGroup(mode="dynamic", tools=["x__*"])
