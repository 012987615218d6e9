"""Background jobs on a shared PostgreSQL store (the host rule of docs/deployment.md): a job
is a process on one host. When its worker dies, a worker on the same host that takes the
session over re-attaches the job and reports its end once; a worker on another host (the
job's record names another boot) reports it `lost` — never silently gone — and does not touch
a process it cannot see. Real processes, a real server; each worker has its own state
directory and its own pool."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from heron._support.postgres import Pool, open_pool
from heron.always_on.bus.postgres_store import PostgresBusStore
from heron.always_on.jobs.manager import JobConfig, JobManager
from heron.always_on.jobs.postgres_store import PostgresJobStore
from heron.always_on.jobs.store import JobRecord
from heron.safety.command_policy import CommandPolicy
from heron.sandbox import ProcessSandbox, ResourceLimits
from support.postgres import postgres_server, postgres_url
from support.waiting import BOUND

__all__ = ["postgres_server", "postgres_url"]  # fixtures, found by pytest here

FAST = ResourceLimits(kill_grace_s=0.3, max_processes=None)


class Workers:
    """Job managers of one session, each a worker with its own state directory and pool."""

    def __init__(self, root: Path, url: str) -> None:
        self.root = root
        self.url = url
        self.workspace = root / "ws"
        self.workspace.mkdir()
        self.bus = PostgresBusStore.open(url)
        self.managers: list[JobManager] = []
        self._pools: list[Pool] = []

    def worker(self, name: str) -> JobManager:
        pool = open_pool(self.url, max_size=2)
        self._pools.append(pool)
        manager = JobManager(
            PostgresJobStore(pool),
            state_dir=self.root / name,
            workspace=self.workspace,
            sandbox=ProcessSandbox(limits=FAST),
            policy=CommandPolicy(workspace=self.workspace),
            publish=self.bus.publish,
            session="main",
            config=JobConfig(poll_interval_s=0.05),
        )
        self.managers.append(manager)
        return manager

    async def orphaned_job(self, command: str) -> tuple[Path, JobRecord]:
        """A job of `command` (reading the fifo it returns, `gate`) that worker "a" started
        before it went away: the job runs on, supervised."""
        gate = self.workspace / "gate"
        os.mkfifo(gate)
        a = self.worker("a")
        await a.start()
        job = await a.start_job(command, call_id="c1")
        await a.aclose()
        return gate, job

    async def kinds(self) -> list[str]:
        return [e.kind for e in await self.bus.pending("main")]

    async def close(self) -> None:
        for manager in self.managers:
            await manager.aclose()
        for pool in self._pools:
            pool.close()
        self.bus.close()


@pytest.fixture
async def workers(tmp_path: Path, postgres_url: str) -> AsyncIterator[Workers]:
    opened = Workers(tmp_path, postgres_url)
    yield opened
    await opened.close()


async def release(gate: Path) -> None:
    def write() -> None:
        with open(gate, "w") as fifo:
            fifo.write("go\n")

    await asyncio.wait_for(asyncio.to_thread(write), BOUND)


async def test_a_dead_workers_job_is_re_attached_on_the_same_host_and_reported_once(
    workers: Workers,
) -> None:
    gate, job = await workers.orphaned_job("read x < gate && echo done")

    b = workers.worker("b")
    await b.start()
    assert [j.id for j in b.jobs() if not j.finished] == [job.id]  # re-attached, not lost
    await release(gate)
    ended = await asyncio.wait_for(b.wait_finished(job.id), BOUND)
    assert (ended.state, ended.exit_code) == ("completed", 0)
    assert await workers.kinds() == ["job.exit"]  # reported once, by B


async def test_a_job_of_a_host_that_is_gone_is_reported_lost_by_the_worker_taking_over(
    workers: Workers,
) -> None:
    gate, job = await workers.orphaned_job("read x < gate")
    # The record as a worker on another machine wrote it: that boot is not this host's.
    PostgresJobStore(workers.bus.sessions.pool).update(job.id, boot_id="boot-of-a-lost-host")

    b = workers.worker("b")
    await b.start()
    lost = b.store.get(job.id)
    assert lost is not None and lost.state == "lost"
    assert "left no exit status" in (lost.detail or "")
    [event] = await workers.bus.pending("main")
    assert event.kind == "job.lost" and event.context.related_task == job.id
    assert job.child_pid is not None
    os.kill(job.child_pid, 0)  # a process it cannot see on its host was not killed
    await release(gate)  # (it is this host's after all: let it end)
    c = workers.worker("c")
    await c.start()  # a later worker does not re-attach a lost job: `lost` is final
    assert await workers.kinds() == ["job.lost"]
    final = c.store.get(job.id)
    assert final is not None and final.state == "lost"
