"""Sub-agents on a shared PostgreSQL store: a child's owner is the epoch of its root session's
lease at the spawn (`heron.always_on.subagents.ownership.LeaseOwnership`), so a worker that
takes the session over ends the children the old owner ran as `lost` and reports each once,
while a child whose owner still holds the lease is left alone. Two pools stand for two
workers; a fake clock moves their leases on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from heron._support.clock import FakeClock
from heron._support.postgres import Pool, open_pool
from heron.always_on.subagents.config import SubagentsConfig
from heron.always_on.subagents.ownership import LeaseOwnership
from heron.always_on.subagents.postgres_store import PostgresSubagentStore
from heron.always_on.subagents.runtime import SubagentRuntime
from heron.always_on.subagents.store import SubagentError, SubagentRecord
from heron.sessions.postgres_leases import PostgresLeases
from support.postgres import postgres_server, postgres_url

__all__ = ["postgres_server", "postgres_url"]  # fixtures, found by pytest here

TTL = 30.0


@pytest.fixture
def pools(postgres_url: str) -> Iterator[list[Pool]]:
    opened = [open_pool(postgres_url, max_size=2) for _ in range(2)]
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

    async def deliver(record: SubagentRecord) -> None:
        delivered.append(record)
        store_b.claim_delivery(record.id)

    async def never_run(_: object) -> None:
        raise AssertionError("recovery runs no child")

    runtime_b = SubagentRuntime(
        store=store_b,
        definitions={},
        config=SubagentsConfig(),
        run_child=never_run,
        deliver=deliver,
        events_at_top=True,
        ownership=LeaseOwnership(leases_b, clock=clock.time),
    )
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
