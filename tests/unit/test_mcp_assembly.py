"""The MCP assembly of one agent: direct vs deferred exposure, the catalogue section, the
never-unreachable rule, per-turn filter groups and sub-agent grants — through real `Agent` runs.
In-memory MCP-shaped tools for the engine paths; the SDK-built probe server for `assemble_mcp`."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from heron import Agent, ScriptedModel
from heron.mcp.assembly import McpAssembly, assemble_mcp, assemble_tools
from heron.mcp.client import McpClientManager, McpTool
from heron.mcp.config import McpConfig
from heron.mcp.trust import ToolDefinition
from heron.tools.definition import ToolAnnotations, ToolContext, ToolResult, ToolSpec
from heron.tools.function_tool import tool
from heron.tools.registry import ActivatedToolSet, Autonomy, ToolRegistry
from heron.tools.validation import SchemaValidator
from heron.turn.context import RuntimeKnobs
from heron.turn.events import ProgressEvent
from support.engine import Events, call, calls_turn
from support.mcp_servers import probe_server


class FakeMcpTool:
    """An MCP-shaped tool (namespaced, owned by `mcp:<server>`) that logs when it runs."""

    def __init__(
        self, name: str, description: str, log: list[str], *, read_only: bool = False
    ) -> None:
        schema = {"type": "object", "properties": {"q": {"type": "string"}}}
        self._spec = ToolSpec(
            name=name,
            description=description,
            parameters=schema,
            annotations=ToolAnnotations(read_only=read_only),
            owner="mcp:" + name.split("__")[0],
        )
        self._validator = SchemaValidator(name, schema)
        self._log = log

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return self._validator.validate(arguments)

    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        self._log.append(f"start {self._spec.name}")
        # Yield to the loop: a sibling run in parallel would start before this one ends.
        await asyncio.sleep(0)
        self._log.append(f"end {self._spec.name}")
        return ToolResult.ok(f"{self._spec.name} ran")


def sample_tools(log: list[str]) -> list[FakeMcpTool]:
    return [
        FakeMcpTool("files__read_file", "Read a text file from the workspace.", log),
        FakeMcpTool("files__write_file", "Write a text file in the workspace.", log),
        FakeMcpTool("finance__quote", "Current stock price for a ticker.", log, read_only=True),
        FakeMcpTool("mail__send_email", "Send an email message to a recipient.", log),
        FakeMcpTool("weather__forecast", "Weather forecast for a city.", log, read_only=True),
    ]


@tool(read_only=True)
def note(text: str) -> str:
    """Keep a note (a built-in tool).

    Args:
        text: The note.
    """
    return f"noted {text}"


def assemble(
    log: list[str],
    *,
    autonomy: Autonomy = "full",
    allowed_tools: list[str] | None = None,
    excluded_tools: tuple[str, ...] = (),
    activated: ActivatedToolSet | None = None,
    **mcp: Any,
) -> McpAssembly:
    return assemble_tools(
        McpConfig.model_validate(mcp),
        sample_tools(log),
        autonomy=autonomy,
        allowed_tools=allowed_tools,
        excluded_tools=excluded_tools,
        activated=activated if activated is not None else ActivatedToolSet(),
    )


def agent_for(
    mcp: McpAssembly,
    model: ScriptedModel,
    *,
    autonomy: Autonomy = "full",
    excluded_tools: tuple[str, ...] = (),
    knobs: RuntimeKnobs | None = None,
) -> Agent:
    """An agent wired the way `heron run` wires one."""
    registry = ToolRegistry([note])
    mcp.register(registry)
    return Agent(
        model=model,
        tools=registry,
        system_prompt=mcp.system_prompt(
            "You are a test agent.", native_tools=model.native_tools, strict_tool_parsing=False
        ),
        autonomy=autonomy,
        excluded_tools=excluded_tools,
        knobs=knobs,
        activated=mcp.activated,
        catalogue=mcp.catalogue,
        turn_exclusions=mcp.turn_exclusions,
    )


def offered(model: ScriptedModel, index: int) -> list[str]:
    return [s.name for s in model.requests[index].tools]


# -- exposure ---------------------------------------------------------------------------------


def test_below_the_threshold_every_allowed_mcp_tool_is_registered_in_its_server_bundle() -> None:
    mcp = assemble([], deferred_threshold=6)

    assert mcp.exposure == "direct"
    assert {b: [t.spec.name for t in ts] for b, ts in mcp.bundles.items()} == {
        "mcp:files": ["files__read_file", "files__write_file"],
        "mcp:finance": ["finance__quote"],
        "mcp:mail": ["mail__send_email"],
        "mcp:weather": ["weather__forecast"],
    }
    assert mcp.prompt_section == "" and mcp.catalogue is None
    assert mcp.system_prompt("Base.", native_tools=True, strict_tool_parsing=False) == "Base."


def test_from_the_threshold_only_tool_search_is_registered_and_the_catalogue_is_prompted() -> None:
    mcp = assemble([], deferred_threshold=5)

    assert mcp.exposure == "deferred"
    assert {b: [t.spec.name for t in ts] for b, ts in mcp.bundles.items()} == {
        "mcp": ["tool_search"]
    }
    assert "weather__forecast - Weather forecast for a city." in mcp.prompt_section
    assert mcp.catalogue is not None and "mail__send_email" in mcp.catalogue.names()
    prompt = mcp.system_prompt("Base.", native_tools=True, strict_tool_parsing=False)
    assert prompt == "Base.\n\n" + mcp.prompt_section


def test_the_threshold_counts_only_the_tools_policy_allows() -> None:
    assert assemble([], deferred_threshold=5, excluded_tools=("mail__*",)).exposure == "direct"
    assert assemble([], deferred_threshold=5, exposure="deferred").exposure == "deferred"
    assert assemble([], deferred_threshold=1, exposure="direct").exposure == "direct"


def test_a_text_protocol_model_under_strict_parsing_gets_no_catalogue_section() -> None:
    mcp = assemble([], exposure="deferred")

    assert mcp.prompt_section
    assert mcp.system_prompt("Base.", native_tools=False, strict_tool_parsing=True) == "Base."
    assert mcp.system_prompt("Base.", native_tools=False, strict_tool_parsing=False) != "Base."


async def test_search_min_score_from_the_configuration_reaches_tool_search() -> None:
    ctx = ToolContext(call_id="c1", turn_id="t1")
    for mcp, found in (
        (assemble([], exposure="deferred", search_min_score=1000.0), False),
        (assemble([], exposure="deferred"), True),
    ):
        search = mcp.bundles["mcp"][0]
        result = await search.execute(search.validate({"query": "weather forecast"}), ctx)
        assert ("weather__forecast" in mcp.activated) is found, result.output


def test_excluding_tool_search_removes_it_and_the_catalogue_section_together() -> None:
    mcp = assemble([], exposure="deferred", excluded_tools=("Tool_Search",))

    assert mcp.bundles == {} and mcp.prompt_section == ""
    assert mcp.system_prompt("Base.", native_tools=True, strict_tool_parsing=False) == "Base."


def test_always_groups_are_preactivated_and_left_out_of_the_catalogue_section() -> None:
    activated = ActivatedToolSet()
    mcp = assemble(
        [],
        exposure="deferred",
        activated=activated,
        tool_filter_groups=[
            {"mode": "always", "tools": ["weather__*", "mail__*"]},
            {"mode": "dynamic", "tools": ["files__*"], "keywords": ["file"]},
        ],
        excluded_tools=("mail__send_email",),
    )

    assert activated.names() == ["weather__forecast"]
    assert "weather__forecast" not in mcp.prompt_section
    assert "files__read_file" in mcp.prompt_section
    assert mcp.turn_exclusions is None


def test_an_allow_list_written_for_builtins_keeps_the_configured_mcp_tools() -> None:
    direct = assemble([], allowed_tools=["note"])
    deferred = assemble([], allowed_tools=["note"], exposure="deferred")
    nothing = assemble([], allowed_tools=[])

    assert direct.admit(["note"]) == [
        "note",
        "files__read_file",
        "files__write_file",
        "finance__quote",
        "mail__send_email",
        "weather__forecast",
    ]
    assert deferred.admit(["note"]) == ["note", "tool_search"]
    assert direct.admit(None) is None
    assert nothing.bundles == {} and nothing.admit([]) == []


def test_shadowed_builtin_names_are_problems_for_the_operator() -> None:
    manager = McpClientManager({})
    shadowing = McpTool(
        manager,
        ToolDefinition(server="files", name="note", description="Take a note."),
        trusted=False,
    )
    mcp = assemble_tools(
        McpConfig(),
        [shadowing],
        autonomy="full",
        allowed_tools=None,
        excluded_tools=(),
        activated=ActivatedToolSet(),
        builtin_names=["note"],
        unavailable={"tickets": "its command was not found (tickets-mcp)"},
    )

    assert mcp.problems == (
        "MCP server 'tickets' is unavailable: its command was not found (tickets-mcp)",
        "MCP tool files__note: tool name shadows the built-in tool 'note'",
    )


# -- deferred exposure through the agent loop ---------------------------------------------------


async def test_the_catalogue_section_stays_identical_while_loaded_schemas_are_appended(
    events: Events,
) -> None:
    log: list[str] = []
    mcp = assemble(log, exposure="deferred")
    model = ScriptedModel(
        [
            calls_turn(call("tool_search", query="select:weather__forecast")),
            calls_turn(call("weather__forecast", q="Oslo")),
            calls_turn(call("tool_search", query="select:finance__quote")),
            {"text": "done"},
        ]
    )
    result = await agent_for(mcp, model).run("Weather in Oslo?", sink=events)

    assert result.ok, result.outcome
    systems = {r.system for r in model.requests}
    assert systems == {"You are a test agent.\n\n" + mcp.prompt_section}
    assert "weather__forecast - " in mcp.prompt_section  # still listed after loading
    assert [offered(model, i) for i in range(4)] == [
        ["note", "tool_search"],
        ["note", "tool_search", "weather__forecast"],
        ["note", "tool_search", "weather__forecast"],
        ["note", "tool_search", "weather__forecast", "finance__quote"],
    ]
    assert log == ["start weather__forecast", "end weather__forecast"]


async def test_an_exact_catalogue_name_runs_without_tool_search_recorded_and_sequential(
    events: Events,
) -> None:
    log: list[str] = []
    mcp = assemble(log, exposure="deferred")
    model = ScriptedModel(
        [
            calls_turn(
                call("weather__forecast", "w1", q="Oslo"), call("finance__quote", "f1", q="ACME")
            ),
            # Loaded now: the next batch of the same two may run in parallel.
            calls_turn(
                call("weather__forecast", "w2", q="Rome"), call("finance__quote", "f2", q="XYZ")
            ),
            {"text": "done"},
        ]
    )
    agent = agent_for(mcp, model, knobs=RuntimeKnobs(parallel="all"))
    result = await agent.run("Oslo weather and ACME price", sink=events)

    assert result.ok, result.outcome
    pending = [e.id for e in events.of("tool_call")]
    assert sorted(pending) == sorted(events.results()) == ["f1", "f2", "w1", "w2"]
    assert {i: r.status for i, r in events.results().items()} == {
        "w1": "ok",
        "f1": "ok",
        "w2": "ok",
        "f2": "ok",
    }
    loaded = [e for e in events.all if isinstance(e, ProgressEvent)]
    assert [(e.id, e.name) for e in loaded] == [
        ("w1", "weather__forecast"),
        ("f1", "finance__quote"),
    ]
    assert all("without tool_search" in e.message for e in loaded)
    # Recorded while the call is prepared, like a call check's line: before its card opens.
    first_card = next(i for i, e in enumerate(events.all) if getattr(e, "type", "") == "tool_call")
    assert all(events.all.index(e) < first_card for e in loaded)
    assert log[:4] == [
        "start weather__forecast",
        "end weather__forecast",
        "start finance__quote",
        "end finance__quote",
    ]
    assert log[4:] == [
        "start weather__forecast",
        "start finance__quote",
        "end weather__forecast",
        "end finance__quote",
    ]
    assert mcp.activated.names() == ["weather__forecast", "finance__quote"]
    assert offered(model, 1) == ["note", "tool_search", "weather__forecast", "finance__quote"]


async def test_names_policy_denies_stay_unreachable_by_exact_name(events: Events) -> None:
    log: list[str] = []
    mcp = assemble(log, autonomy="read-only", exposure="deferred", excluded_tools=("mail__*",))
    model = ScriptedModel(
        [
            calls_turn(
                call("files__write_file", "w", q="x"),
                call("mail__send_email", "m", q="x"),
                call("weather__forecast", "ok", q="x"),
            ),
            {"text": "done"},
        ]
    )
    agent = agent_for(mcp, model, autonomy="read-only", excluded_tools=("mail__*",))
    result = await agent.run("go", sink=events)

    assert result.ok, result.outcome
    results = events.results()
    assert (results["w"].status, results["m"].status) == ("unknown", "unknown")
    assert results["ok"].status == "ok"
    assert log == ["start weather__forecast", "end weather__forecast"]
    assert mcp.activated.names() == ["weather__forecast"]
    assert mcp.catalogue is not None
    assert mcp.catalogue.names() == ["finance__quote", "weather__forecast"]


# -- filter groups (direct exposure) -------------------------------------------------------------


async def test_filter_groups_hide_mcp_tools_from_specs_and_execution_turn_by_turn(
    events: Events,
) -> None:
    log: list[str] = []
    mcp = assemble(
        log,
        tool_filter_groups=[
            {"mode": "always", "tools": ["weather__*"]},
            {"mode": "dynamic", "tools": ["mail__*"], "keywords": ["Email"]},
        ],
    )
    model = ScriptedModel(
        [
            calls_turn(call("mail__send_email", "m1", q="hi"), call("note", "n1", text="a")),
            {"text": "not sent"},
            calls_turn(call("mail__send_email", "m2", q="hi")),
            {"text": "sent"},
        ]
    )
    agent = agent_for(mcp, model)

    first = await agent.run("What is the weather?", sink=events)
    assert first.ok, first.outcome
    assert offered(model, 0) == ["note", "weather__forecast"]
    assert events.results()["m1"].status == "excluded"
    assert events.results()["n1"].status == "ok"
    assert log == []

    second = await agent.run("Now send an EMAIL to Ann", history=first.history, sink=events)
    assert second.ok, second.outcome
    assert offered(model, 2) == ["note", "mail__send_email", "weather__forecast"]
    assert events.results()["m2"].status == "ok"
    assert log == ["start mail__send_email", "end mail__send_email"]


# -- sub-agents ---------------------------------------------------------------------------------


async def test_a_sub_agent_receives_only_the_activated_tools_it_was_granted(
    events: Events,
) -> None:
    log: list[str] = []
    mcp = assemble(log, exposure="deferred")
    assert mcp.catalogue is not None
    mcp.catalogue.resolve("weather__forecast")
    mcp.catalogue.resolve("finance__quote")

    grant = mcp.grant(["weather__*", "files__read_file"])
    assert grant.activated.names() == ["weather__forecast"]
    assert [t.spec.name for t in grant.tools] == ["tool_search"]
    assert "files__read_file" in grant.prompt_section
    assert "mail__send_email" not in grant.prompt_section
    model = ScriptedModel(
        [
            calls_turn(
                call("finance__quote", "f", q="ACME"),
                call("mail__send_email", "m", q="hi"),
                call("weather__forecast", "w", q="Oslo"),
                call("files__read_file", "r", q="a.txt"),
            ),
            {"text": "done"},
        ]
    )
    sub = Agent(
        model=model,
        tools=grant.tools,
        autonomy="full",
        activated=grant.activated,
        catalogue=grant.catalogue,
    )
    result = await sub.run("Sub-task", sink=events)

    assert result.ok, result.outcome
    assert offered(model, 0) == ["tool_search", "weather__forecast"]
    statuses = {i: r.status for i, r in events.results().items()}
    assert statuses == {"f": "unknown", "m": "unknown", "w": "ok", "r": "ok"}
    assert grant.activated.names() == ["weather__forecast", "files__read_file"]
    # The sub-agent's activations stay its own.
    assert mcp.activated.names() == ["weather__forecast", "finance__quote"]


# -- against a real server -------------------------------------------------------------------------


async def test_assemble_mcp_pins_at_first_use_then_lists_from_the_pin_without_starting(
    tmp_path: Path, events: Events
) -> None:
    cfg = McpConfig.model_validate(
        {
            "servers": {
                "probe": probe_server(enabled_tools=["add", "pid"]),
                "gone": {"command": str(tmp_path / "no-such-server")},
            }
        }
    )

    async def assembled() -> McpAssembly:
        return await assemble_mcp(
            cfg,
            state_dir=tmp_path,
            autonomy="full",
            allowed_tools=None,
            excluded_tools=(),
            builtin_names=["note"],
            activated=ActivatedToolSet(),
        )

    first = await assembled()
    assert first.manager is not None
    assert [t.spec.name for t in first.bundles["mcp:probe"]] == ["probe__add", "probe__pid"]
    assert len(first.problems) == 1
    assert first.problems[0].startswith("MCP server 'gone' is unavailable: its command was not")
    await first.aclose()
    assert {s.name: s.state for s in first.manager.status()}["probe"] == "stopped"

    second = await assembled()
    assert second.manager is not None
    try:
        probe = next(s for s in second.manager.status() if s.name == "probe")
        assert (probe.starts, probe.tools) == (0, 5)  # the pin knows every tool
        model = ScriptedModel([calls_turn(call("probe__add", a=2, b=3)), {"text": "5"}])
        result = await agent_for(second, model).run("2 + 3?", sink=events)
        assert result.ok, result.outcome
        assert '"total": 5' in events.results()["c_probe__add"].output
        probe = next(s for s in second.manager.status() if s.name == "probe")
        assert (probe.starts, probe.state) == (1, "running")
    finally:
        await second.aclose()
    assert {s.name: s.state for s in second.manager.status()}["probe"] == "stopped"
