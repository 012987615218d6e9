"""`open_subagents`: the runtime, its child runner and its store, assembled for one process."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from heron.always_on.subagents.config import AgentEntry, SubagentsConfig

if TYPE_CHECKING:  # the runtime (and tool search, numpy) load only where sub-agents run
    from heron.always_on.bus.postgres_store import PostgresBusStore
    from heron.always_on.bus.sqlite_store import SqliteBusStore
    from heron.always_on.subagents.child import ChildRunner
    from heron.always_on.subagents.ownership import Ownership
    from heron.always_on.subagents.postgres_store import PostgresSubagentStore
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
    store: SqliteSubagentStore | PostgresSubagentStore
    bus: SqliteBusStore | PostgresBusStore
    closers: list[Callable[[], None]] = field(default_factory=list)
    """What `aclose` closes: the stores opened for the sub-agents alone."""

    def tools(self, session: str) -> list[Tool]:
        """The sub-agent tools of hosted session `session`."""
        from heron.always_on.subagents.tools import subagent_tools

        return subagent_tools(self.runtime, self.runner, session=session)

    def running(self, session: str) -> str | None:
        """A child of hosted session `session` running here, described (its results land in
        that session, so it is not parked meanwhile); `None` when there is none."""
        for live in self.runtime.live.values():
            if live.record.root_session == session:
                return f"sub-agent {live.record.id} is {live.record.status}"
        return None

    async def aclose(self) -> None:
        """Cancel the children still running here (each reported), close the stores."""
        await self.runtime.aclose()
        for close in self.closers:
            close()


def open_subagents(
    setup: SubagentsSetup,
    *,
    state_dir: Path,
    bus: SqliteBusStore | PostgresBusStore | None = None,
    deliver: bool,
    shared: tuple[PostgresSubagentStore, Ownership] | None = None,
) -> Subagents:
    """Assemble the runtime on `state_dir`. `bus`: the process's bus (`heron serve`), else
    one is opened for the children's sessions. `deliver`: publish the top level's async
    results to the hosted session (only where a loop consumes its events; children's
    children always are). `shared`: the records on a store shared by several workers, and
    who owns a child there (`heron serve --store`; the caller closes that store)."""
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
    closers: list[Callable[[], None]] = []
    if bus is None:
        bus = local = SqliteBusStore.open(state_dir)
        closers.append(local.sessions.conn.close)
    store: SqliteSubagentStore | PostgresSubagentStore
    ownership: Ownership | None = None
    if shared is not None:
        store, ownership = shared
    else:
        store = SqliteSubagentStore.open_dir(state_dir)
        closers.insert(0, store.close)
    runner = ChildRunner(bus)
    runtime = SubagentRuntime(
        store=store,
        definitions=definitions,
        config=setup.config,
        run_child=runner.run,
        deliver=runner.publish_result,
        close=runner.close_session,
        events_at_top=deliver,
        ownership=ownership,
    )
    runner.runtime = runtime
    subagent_tools(runtime, runner, session="default")  # installs the per-child factory
    return Subagents(runtime=runtime, runner=runner, store=store, bus=bus, closers=closers)
