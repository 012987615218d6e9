"""`open_subagents`: the runtime, its child runner and its store, assembled for one process."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from heron.always_on.subagents.config import AgentEntry, SubagentsConfig

if TYPE_CHECKING:  # the runtime (and tool search, numpy) load only where sub-agents run
    from heron.always_on.bus.sqlite_store import SqliteBusStore
    from heron.always_on.subagents.child import ChildRunner
    from heron.always_on.subagents.runtime import SubagentRuntime
    from heron.always_on.subagents.sqlite_store import SqliteSubagentStore
    from heron.tools.definition import Tool

__all__ = ["Subagents", "SubagentsSetup", "open_subagents"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SubagentsSetup:
    """What the configuration says about sub-agents (`[subagents]`, `[agents.*]`, the
    project's agent files)."""

    config: SubagentsConfig
    entries: Mapping[str, AgentEntry]
    agents_dir: Path | None

    @property
    def enabled(self) -> bool:
        if self.config.enabled is not None:
            return self.config.enabled
        files = self.agents_dir is not None and any(self.agents_dir.glob("*.md"))
        return bool(self.entries) or files


@dataclass(kw_only=True, eq=False)
class Subagents:
    """The sub-agent runtime of one process (`heron run`, `heron chat`, `heron serve`)."""

    runtime: SubagentRuntime
    runner: ChildRunner
    store: SqliteSubagentStore
    bus: SqliteBusStore
    owns_bus: bool

    def tools(self, session: str) -> list[Tool]:
        """The sub-agent tools of hosted session `session`."""
        from heron.always_on.subagents.tools import subagent_tools

        return subagent_tools(self.runtime, self.runner, session=session)

    async def aclose(self) -> None:
        """Cancel the children still running here (each reported), close the stores."""
        await self.runtime.aclose()
        self.store.close()
        if self.owns_bus:
            self.bus.sessions.conn.close()


def open_subagents(
    setup: SubagentsSetup,
    *,
    state_dir: Path,
    bus: SqliteBusStore | None = None,
    deliver: bool,
) -> Subagents:
    """Assemble the runtime on `state_dir`. `bus`: the process's bus (`heron serve`), else
    one is opened for the children's sessions. `deliver`: publish the top level's async
    results to the hosted session (only where a loop consumes its events; children's
    children always are)."""
    from heron.always_on.bus.sqlite_store import SqliteBusStore
    from heron.always_on.subagents.child import ChildRunner
    from heron.always_on.subagents.definitions import load_definitions
    from heron.always_on.subagents.runtime import SubagentRuntime
    from heron.always_on.subagents.sqlite_store import SqliteSubagentStore
    from heron.always_on.subagents.tools import subagent_tools
    from heron.mcp.trust.sqlite_store import SqliteTrustStore

    definitions = load_definitions(
        setup.entries, setup.agents_dir, SqliteTrustStore(state_dir, table="agent_pins")
    )
    owns = bus is None
    bus = bus if bus is not None else SqliteBusStore.open(state_dir)
    store = SqliteSubagentStore.open_dir(state_dir)
    runner = ChildRunner(bus)
    runtime = SubagentRuntime(
        store=store,
        definitions=definitions,
        config=setup.config,
        run_child=runner.run,
        deliver=runner.publish_result,
        events_at_top=deliver,
    )
    runner.runtime = runtime
    subagent_tools(runtime, runner, session="default")  # installs the per-child factory
    return Subagents(runtime=runtime, runner=runner, store=store, bus=bus, owns_bus=owns)
