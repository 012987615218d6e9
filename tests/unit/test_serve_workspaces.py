"""Workspaces across workers and restarts (`heron.always_on.workspaces`): a session that wakes
in another workspace than it last ran in — another host's disk after a failover, or a restart
with another `--workspace` — is told `workspace_lost`; on one shared workspace it is not, and
`heron doctor` says which of the two a worker's workspace is. Real
`HeronServer`s on a real SQLite state directory and on a real PostgreSQL store shared by two
workers; only the model is scripted."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from heron._support.postgres import open_pool
from heron.agent import Agent
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.postgres_workspaces import PostgresWorkspaceBindings
from heron.always_on.server import HeronServer, ServeConfig
from heron.always_on.sqlite_workspaces import SqliteWorkspaceBindings
from heron.always_on.workspaces import (
    MARKER,
    WorkspaceBinding,
    describe_workspace,
    workspace_id,
)
from heron.cli.main import main
from heron.messages import UserMessage
from heron.models.base import ModelRequest
from heron.models.scripted import FunctionModel
from heron.tools.definition import Tool
from support.postgres import postgres_server, postgres_url
from support.waiting import until

__all__ = ["postgres_server", "postgres_url"]  # fixtures, found by pytest here


def event(session: str, text: str) -> BusEvent:
    return BusEvent(
        kind="webhook.received",
        source="system",
        channel="webhook",
        session=session,
        content=EventContent(text=text),
    )


class Worker:
    """One `heron serve` worker, its default session `session`; records what the model saw."""

    def __init__(
        self, state_dir: Path, workspace: Path, *, session: str = "ops", **config: Any
    ) -> None:
        self.seen: list[str] = []
        workspace.mkdir(parents=True, exist_ok=True)

        def decide(request: ModelRequest) -> str:
            self.seen += [m.content for m in request.messages if isinstance(m, UserMessage)]
            return "noted"

        def make_agent(tools: list[Tool]) -> Agent:
            return Agent(model=FunctionModel(decide), tools=tools, autonomy="full")

        self.server = HeronServer(
            ServeConfig(
                state_dir=state_dir,
                session=session,
                workspace=workspace,
                poll_interval_s=0.05,
                **config,
            ),
            make_agent,
        )
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Worker:
        await self.server.start()
        self.task = asyncio.ensure_future(self.server.serve())
        return self

    async def __aexit__(self, *_: object) -> None:
        self.server.stop()
        assert self.task is not None
        await asyncio.wait_for(self.task, 10)

    def told_lost(self) -> bool:
        return any("workspace_lost" in text for text in self.seen)


async def test_a_restart_in_another_workspace_tells_the_model_workspace_lost(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    async with Worker(state, tmp_path / "first") as first:
        pass  # the default session is bound as it wakes, at the start
    assert not first.told_lost()
    async with Worker(state, tmp_path / "first") as again:
        pass
    assert not again.told_lost()  # the same workspace: nothing to tell
    async with Worker(state, tmp_path / "second") as moved:
        await until(moved.told_lost, "the model to hear of the lost workspace")
    [text] = [t for t in moved.seen if "workspace_lost" in t]
    assert str(tmp_path / "first") in text and str(tmp_path / "second") in text


async def test_a_failover_to_another_workspace_is_told_and_a_shared_one_is_not(
    tmp_path: Path, postgres_url: str
) -> None:
    store = {"store_url": postgres_url, "lease_s": 2.0}
    async with Worker(tmp_path / "w1", tmp_path / "shared", **store):
        pass
    # The second worker shares the workspace mount: the session's files are all there.
    async with Worker(tmp_path / "w2", tmp_path / "shared", **store) as shared:
        pass
    assert not shared.told_lost()
    # The third has a disk of its own: the model is told instead of finding files gone.
    async with Worker(tmp_path / "w3", tmp_path / "local", **store) as local:
        await until(local.told_lost, "the model to hear of the lost workspace")
    assert (tmp_path / "shared" / MARKER).read_text() != (tmp_path / "local" / MARKER).read_text()


async def test_a_parked_session_stays_with_the_live_worker_of_its_workspace(
    tmp_path: Path, postgres_url: str
) -> None:
    store = {"store_url": postgres_url, "lease_s": 2.0, "idle_timeout_s": 0.1}
    first = Worker(tmp_path / "w1", tmp_path / "disk-1", session="w1", **store)
    disk_2 = tmp_path / "disk-2"
    second = Worker(tmp_path / "w2", disk_2, session="w2", **store)
    async with first:
        host, bus = first.server.host, first.server.bus
        assert host is not None and bus is not None
        host.claim("jobs")  # the session starts on w1, in w1's workspace
        await bus.publish(event("jobs", "build 1 done"))
        await until(lambda: "build 1 done" in str(first.seen), "build 1 on w1")
        await until(lambda: "jobs" in host.parked, "jobs parked on w1")
        async with second:  # a second worker, with a disk of its own, joins
            bindings = second.server.workspaces
            assert bindings is not None  # w1 lives: the session is its to wake
            assert bindings.held_elsewhere("jobs", workspace_id(disk_2), now=time.time())
            await bus.publish(event("jobs", "build 2 done"))
            await until(lambda: "build 2 done" in str(first.seen), "build 2 on w1")
            await until(lambda: "jobs" in host.parked, "jobs parked on w1 again")
        seen_by_second = list(second.seen)
    # Both workers were alive: the session stayed where its files are, and nobody lost them.
    assert not any("build" in t for t in seen_by_second)
    assert not first.told_lost() and not second.told_lost()
    async with Worker(tmp_path / "w3", tmp_path / "disk-3", session="w3", **store) as third:
        assert third.server.bus is not None and third.server.workspaces is not None
        here = workspace_id(tmp_path / "disk-3")  # w1 is gone: nobody holds its workspace
        assert not third.server.workspaces.held_elsewhere("jobs", here, now=time.time())
        await third.server.bus.publish(event("jobs", "build 3 done"))
        await until(third.told_lost, "the model on w3 to hear of the lost workspace")


def test_a_workspace_keeps_one_id_and_doctor_says_whether_other_hosts_share_it(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    first = workspace_id(root)
    assert workspace_id(root) == first and first.startswith("ws-")
    bindings = SqliteWorkspaceBindings(sqlite3.connect(tmp_path / "heron.db"))

    def bound(session: str, workspace: str, host: str) -> None:
        binding = WorkspaceBinding(
            session=session, workspace=workspace, host=host, path="/srv/ws", bound_at=1.0
        )
        assert bindings.bind(binding) is None  # a new session: nothing replaced

    assert describe_workspace(root, bindings.list(), host="a")[0]
    bound("s1", "ws-elsewhere", "b")
    pinned, why = describe_workspace(root, bindings.list(), host="a")
    assert not pinned and "pinned to a" in why and "workspace_lost" in why
    bound("s2", first, "c")
    shared, why = describe_workspace(root, bindings.list(), host="a")
    assert shared and "shared with c" in why
    again = WorkspaceBinding(session="s1", workspace=first, host="a", path=str(root), bound_at=2.0)
    replaced = bindings.bind(again)
    assert replaced is not None and replaced.host == "b"
    assert bindings.bind(again) is None


def test_doctor_checks_the_shared_store_and_whether_the_workspace_is_a_shared_mount(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    (state / "workspace").mkdir(parents=True)
    pool = open_pool(postgres_url, max_size=1)
    try:
        other = WorkspaceBinding(
            session="ops",
            workspace=workspace_id(state / "workspace"),
            host="worker-b.internal",
            path="/srv/heron",
            bound_at=1.0,
        )
        PostgresWorkspaceBindings(pool).bind(other)
    finally:
        pool.close()
    main(["doctor", "--state-dir", str(state), "--store", postgres_url])
    lines = capsys.readouterr().out.splitlines()
    assert "[ok  ] shared store: reachable" in lines
    [workspace] = [line for line in lines if "] workspace:" in line]
    assert workspace.startswith("[ok  ]") and "is shared with worker-b.internal" in workspace
