"""The usage prior learned from the execution audit trail: real runs recorded in a real SQLite
state database, read back as (need, tool, outcome) records, and the search that ranks the tool
that served a similar need first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from test_discovery_tool import Listed, assemble, catalogue_tools

from heron import Agent, ScriptedModel
from heron._support.state import open_db
from heron.audit.executions import Execution, ExecutionAuditTrail
from heron.audit.sqlite_store import SqliteExecutionStore
from heron.audit.usage import usage_from_executions, usage_records
from heron.config.discovery import discovery_options
from heron.config.schema import HeronConfig
from heron.discovery import UsageRecord
from heron.mcp.assembly import McpAssembly
from heron.tools.definition import ToolContext, ToolResult
from heron.tools.registry import ToolRegistry
from support.engine import call, calls_turn


class Failing(Listed):
    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult.fail("upstream is down")


def tools() -> list[Listed]:
    return [
        *catalogue_tools(),
        Listed("bank__convert_amount", "Convert an amount of money between currencies.", q="Q"),
        Failing("cambio__currency_rate", "Currency rate between two currencies.", pair="P"),
    ]


async def recorded_run(mcp: McpAssembly, store: SqliteExecutionStore, turns: list[Any]) -> None:
    registry = ToolRegistry()
    mcp.register(registry)
    agent = Agent(
        model=ScriptedModel([*turns, {"text": "done"}]),
        tools=registry,
        autonomy="full",
        activated=mcp.activated,
        catalogue=mcp.catalogue,
        observer=ExecutionAuditTrail(store, session="s1"),
    )
    assert (await agent.run("go")).ok


async def test_a_need_and_the_calls_that_followed_it_become_usage_records(
    tmp_path: Path,
) -> None:
    conn = open_db(tmp_path)
    store = SqliteExecutionStore(conn)
    mcp = assemble(tools(), tool="discover_tools")
    await recorded_run(
        mcp,
        store,
        [
            calls_turn(call("markets__stock_quote", "early", symbol="X")),  # before any need
            calls_turn(call("discover_tools", "d1", need="convert  dollars to euros")),
            calls_turn(call("markets__fx_rate", "f1", pair="USDEUR")),
            calls_turn(call("cambio__currency_rate", "f2", pair="USDEUR")),
            calls_turn(call("markets__fx_rate", "f3", pair="USDGBP")),
            calls_turn(call("discover_tools", "d2", need="select:files__read_file")),
            calls_turn(call("files__read_file", "r1", path="a")),  # named, not a need
        ],
    )
    records = usage_records(store)
    conn.close()
    assert sorted(records, key=lambda r: r.tool) == [
        UsageRecord(
            request="convert dollars to euros",
            tool="cambio__currency_rate",
            failures=1,
            successes=0,
        ),
        UsageRecord(request="convert dollars to euros", tool="markets__fx_rate", successes=2),
    ]


def execution(tool: str, turn: str, arguments: object, *, success: bool | None = True) -> Execution:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Execution(
        started=0.0, ended=None, tool=tool, call_id="c", session="s", turn_id=turn, agent=None,
        parent_agent=None, channel=None, operator=None, approved_by=None, owner="o", why=None,
        arguments=text, status="ok" if success else "error", success=success, duration_ms=None,
        result=None,
    )  # fmt: skip


def test_needs_are_per_turn_and_unreadable_or_unfinished_rows_are_skipped() -> None:
    rows = [
        execution("tool_search", "t1", {"query": "weather in Oslo"}),
        execution("tool_search", "t2", '{"query": "cut off by the bou'),  # bounded in the store
        execution("weather__get_forecast", "t2", {}),  # t2's need is unreadable
        execution("weather__get_forecast", "t1", {}),
        execution("weather__get_forecast", "t1", {}, success=None),  # still running
        execution("load_skill", "t1", {"name": "x"}),
    ]
    assert usage_from_executions(rows) == [
        UsageRecord(request="weather in Oslo", tool="weather__get_forecast")
    ]


async def test_the_tool_that_served_a_similar_need_ranks_first(tmp_path: Path) -> None:
    need = "convert money between currencies"
    plain = assemble(tools(), tool="discover_tools")
    [search] = plain.bundles["mcp"]
    ranked = await search.execute({"need": need}, ToolContext(call_id="a", turn_id="t"))
    order = ranked.data["listed"]
    assert len(order) >= 2
    second = order[1]
    history = [
        UsageRecord(request="convert my money between two currencies", tool=second, successes=3),
        # Unrelated needs and tools that failed add nothing.
        UsageRecord(request="read the file notes.txt", tool="files__read_file", successes=9),
        UsageRecord(request="convert money between currencies", tool=order[0], failures=4,
                    successes=0),
    ]  # fmt: skip
    learned = assemble(tools(), tool="discover_tools", usage=lambda: history)
    [search] = learned.bundles["mcp"]
    again = await search.execute({"need": need}, ToolContext(call_id="b", turn_id="t"))
    assert again.data["listed"][0] == second
    assert "files__read_file" not in again.data["listed"]
    assert learned.engine is not None and learned.engine.index().prior is not None


def test_an_unreadable_history_means_no_prior_not_a_failed_search(caplog: Any) -> None:
    def broken() -> list[UsageRecord]:
        raise OSError("database is locked")

    mcp = assemble(tools(), tool="discover_tools", usage=broken)
    assert mcp.engine is not None
    index = mcp.engine.index()
    assert index.prior is None and index.search("stock price").found
    assert "the usage history cannot be read: database is locked" in caplog.text


def test_the_configured_history_is_the_state_directorys_audit_trail(tmp_path: Path) -> None:
    state = tmp_path / "state"
    config = HeronConfig.model_validate({"state": {"dir": str(state)}})
    options = discovery_options(config, None)
    assert options.usage is not None
    assert options.usage() == () and not state.exists()  # nothing recorded: nothing created
    conn = open_db(state)
    store = SqliteExecutionStore(conn)
    store.start(execution("tool_search", "t1", {"query": "weather in Oslo"}))
    row = store.start(execution("weather__get_forecast", "t1", {}, success=None))
    assert options.usage() == []  # a call that has not ended is not a use
    store.end(row, ended=1.0, status="ok", success=True, duration_ms=1.0, result="sunny")
    conn.close()
    assert options.usage() == [UsageRecord(request="weather in Oslo", tool="weather__get_forecast")]
    off = HeronConfig.model_validate({"discovery": {"usage_prior": False}})
    assert discovery_options(off, None).usage is None


def test_hierarchical_matching_is_one_setting_away() -> None:
    config = HeronConfig.model_validate({"discovery": {"hierarchical": True}})
    options = discovery_options(config, None)
    assert options.hierarchical
    mcp = assemble(tools(), tool="discover_tools", hierarchical=True)
    assert mcp.engine is not None and mcp.engine.params.hierarchical
    found = mcp.engine.index().search("stock price for a ticker", 3).matches
    assert found[0].doc.qualified == "markets__stock_quote"
    assert not assemble(tools()).engine.params.hierarchical  # type: ignore[union-attr]
