"""Sub-agents on a shared PostgreSQL store: a child's owner is the epoch of its root session's
lease at the spawn (`heron.always_on.subagents.ownership.LeaseOwnership`), so a worker that
takes the session over ends the children the old owner ran as `lost` and reports each once,
while a child whose owner still holds the lease is left alone. Every write of a child's
history carries that epoch: a paused worker's child is refused once the session was taken over,
and it ends without a result. Two pools stand for two workers; a fake clock moves their leases
on."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from heron._support.clock import FakeClock
from heron._support.postgres import Pool, open_pool
from heron.agent import Agent
from heron.always_on.bus.postgres_store import PostgresBusStore
from heron.always_on.subagents.config import AgentEntry, SubagentsConfig
from heron.always_on.subagents.ownership import LeaseOwnership
from heron.always_on.subagents.postgres_store import PostgresSubagentStore
from heron.always_on.subagents.runtime import SubagentRuntime
from heron.always_on.subagents.service import SubagentsSetup, open_subagents
from heron.always_on.subagents.store import SubagentError, SubagentRecord
from heron.messages import ToolResultMessage, UserMessage
from heron.models.scripted import ScriptedModel
from heron.sessions.lease import StaleEpochError
from heron.sessions.postgres_leases import PostgresLeases
from heron.sessions.postgres_store import PostgresSessionStore
from heron.tools.function_tool import tool
from heron.turn.approval import ApprovalManager, ApprovalPolicy
from support.postgres import postgres_server, postgres_url
from support.waiting import until

__all__ = ["postgres_server", "postgres_url"]  # fixtures, found by pytest here

TTL = 30.0


@pytest.fixture
def pools(postgres_url: str) -> Iterator[list[Pool]]:
    opened = [open_pool(postgres_url, max_size=4) for _ in range(2)]
    yield opened
    for pool in opened:
        pool.close()


def child(subagent_id: str, owner: int) -> SubagentRecord:
    return SubagentRecord(
        id=subagent_id,
        agent="helper",
        task="look",
        mode="async",
        parent=None,
        root_session="main",
        parent_session="main",
        call_id=f"c_{subagent_id}",
        depth=1,
        status="working",
        owner=owner,
    )


def recovering_runtime(
    store: PostgresSubagentStore,
    leases: PostgresLeases,
    clock: FakeClock,
    delivered: list[SubagentRecord],
) -> SubagentRuntime:
    """Worker B's runtime: it runs no child, it only recovers (each report lands in
    `delivered`)."""

    async def deliver(record: SubagentRecord) -> None:
        delivered.append(record)
        store.claim_delivery(record.id)

    async def never_run(_: object) -> None:
        raise AssertionError("recovery runs no child")

    return SubagentRuntime(
        store=store,
        definitions={},
        config=SubagentsConfig(),
        run_child=never_run,
        deliver=deliver,
        events_at_top=True,
        ownership=LeaseOwnership(leases, clock=clock.time),
    )


async def test_a_takeover_ends_the_old_owners_children_lost_and_reports_each_once(
    pools: list[Pool],
) -> None:
    clock = FakeClock()
    leases_a = PostgresLeases(pools[0], owner="worker-a", ttl_s=TTL, now=clock.time)
    leases_b = PostgresLeases(pools[1], owner="worker-b", ttl_s=TTL, now=clock.time)
    assert leases_a.acquire("main") is not None
    owner_a = LeaseOwnership(leases_a, clock=clock.time)
    PostgresSubagentStore(pools[0]).add(child("k1", owner_a.owner("main")))

    delivered: list[SubagentRecord] = []
    store_b = PostgresSubagentStore(pools[1])
    runtime_b = recovering_runtime(store_b, leases_b, clock, delivered)
    assert runtime_b.recover(root_session="main") == []  # A holds the lease: its child lives
    await runtime_b.flush()

    clock.advance(TTL + 1)  # A stopped renewing: B takes the session over
    taken = leases_b.acquire("main")
    assert taken is not None and taken.taken_over
    [lost] = runtime_b.recover(root_session="main")
    await runtime_b.flush()
    assert (lost.id, lost.status) == ("k1", "lost")
    assert [r.id for r in delivered] == ["k1"]
    runtime_b.recover(root_session="main")  # the next wake: nothing left to report
    await runtime_b.flush()
    assert [r.id for r in delivered] == ["k1"]
    with pytest.raises(SubagentError, match="no longer holds session 'main'"):
        owner_a.owner("main")  # A, back from its pause, cannot spawn there any more


def test_a_childs_history_is_written_only_under_its_root_sessions_current_epoch(
    pools: list[Pool],
) -> None:
    clock = FakeClock()
    leases_a = PostgresLeases(pools[0], owner="worker-a", ttl_s=TTL, now=clock.time)
    leases_b = PostgresLeases(pools[1], owner="worker-b", ttl_s=TTL, now=clock.time)
    sessions_a = PostgresSessionStore(pools[0])
    owner_a = LeaseOwnership(leases_a, fence=sessions_a, clock=clock.time)
    assert leases_a.acquire("main") is not None
    record = child("k1", owner_a.owner("main"))
    owner_a.fence(record)
    head = sessions_a.append(record.session, [UserMessage(content="the task")])  # epoch current
    assert not owner_a.superseded(record)

    clock.advance(TTL + 1)  # A is paused past its lease: B takes the session over
    taken = leases_b.acquire("main")
    assert taken is not None and taken.epoch == record.owner + 1
    assert owner_a.superseded(record)
    with pytest.raises(StaleEpochError) as refused:
        sessions_a.append(record.session, [UserMessage(content="late")])
    assert (refused.value.session, refused.value.epoch) == (record.session, record.owner)
    assert refused.value.current == taken.epoch
    assert sessions_a.head(record.session) == head  # nothing was written

    # Fenced with the current epoch (B's), the same session is written again.
    owner_b = LeaseOwnership(leases_b, fence=sessions_a, clock=clock.time)
    owner_b.fence(child("k1", taken.epoch))
    assert sessions_a.append(record.session, [UserMessage(content="now")]) > head


async def test_a_paused_workers_child_is_refused_after_a_takeover_and_delivers_nothing(
    pools: list[Pool], tmp_path: Path
) -> None:
    clock = FakeClock()
    leases_a = PostgresLeases(pools[0], owner="worker-a", ttl_s=TTL, now=clock.time)
    leases_b = PostgresLeases(pools[1], owner="worker-b", ttl_s=TTL, now=clock.time)
    bus_a = PostgresBusStore(PostgresSessionStore(pools[0]))
    assert leases_a.acquire("default") is not None

    started, opened = asyncio.Event(), asyncio.Event()

    @tool(read_only=True)
    async def wait_here() -> str:
        """Wait for the gate."""
        started.set()
        await opened.wait()
        return "gate opened"

    script = tmp_path / "worker.json"
    turns = [{"tool_calls": [{"id": "w1", "name": "wait_here", "arguments": {}}]}, {"text": "x"}]
    script.write_text(json.dumps({"turns": turns}), encoding="utf-8")
    subs = open_subagents(
        SubagentsSetup(
            config=SubagentsConfig(),
            entries={"worker": AgentEntry(model=f"scripted:{script}")},
            agents_dir=None,
        ),
        state_dir=tmp_path / "state",
        bus=bus_a,
        deliver=True,
        shared=(
            PostgresSubagentStore(pools[0]),
            LeaseOwnership(leases_a, fence=bus_a.sessions, clock=clock.time),
        ),
    )
    spawn = {"task": "look", "agent": "worker", "mode": "async"}
    parent = Agent(
        model=ScriptedModel(
            [
                {"tool_calls": [{"id": "s1", "name": "spawn_subagent", "arguments": spawn}]},
                {"text": "started"},
            ]
        ),
        tools=[wait_here, *subs.tools("default")],
        approval=ApprovalManager(policy=ApprovalPolicy(autonomy="full")),
    )
    delivered: list[SubagentRecord] = []
    store_b = PostgresSubagentStore(pools[1])
    runtime_b = recovering_runtime(store_b, leases_b, clock, delivered)
    try:
        await parent.run("go")
        await asyncio.wait_for(started.wait(), 10)  # A's child works, in the tool call
        (record,) = store_b.list(root_session="default")
        clock.advance(TTL + 1)  # A is paused past its lease: B takes the session over
        assert leases_b.acquire("default") is not None
        [lost] = runtime_b.recover(root_session="default")
        await runtime_b.flush()
        assert lost.id == record.id and [r.status for r in delivered] == ["lost"]

        opened.set()  # A comes back: its child's next append is refused, and the child stops
        await until(lambda: not subs.runtime.live, "A's child ended")
        await subs.runtime.flush()
    finally:
        opened.set()
        await subs.runtime.aclose()
    history = bus_a.sessions.load(record.session)
    assert not any(isinstance(m, ToolResultMessage) and m.content == "gate opened" for m in history)
    stored = store_b.get(record.id)
    assert stored is not None and stored.status == "lost"  # A's child did not overwrite it
    # Nothing of A's child reached the parent: no result event on the parent's session.
    parent_events = await bus_a.events(session="default")
    assert [s.event.kind for s in parent_events] == []
    assert [r.id for r in delivered] == [record.id]  # reported once, by the new owner
