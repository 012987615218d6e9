"""`heron db migrate|status` on both back ends and `--store` on the commands that read or write
state (`events`, `sessions`, `jobs`, `timers`, `approvals`, `audit`, `agents`), against the
test process's real PostgreSQL server. Each command runs with a state directory of its own, so
what it shows can only come from the shared store."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from heron._support.clock import FakeClock
from heron._support.migrations import POSTGRESQL, SQLITE
from heron._support.postgres import open_pool
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.bus.postgres_store import PostgresBusStore
from heron.always_on.jobs.store import JobRecord
from heron.always_on.subagents.postgres_store import PostgresSubagentStore
from heron.always_on.subagents.store import SubagentRecord
from heron.always_on.triggers.postgres_store import open_pg_trigger_stores
from heron.always_on.triggers.timers import TimerRecord
from heron.audit.executions import Execution
from heron.audit.postgres_store import PostgresApprovalAudit, PostgresExecutionStore
from heron.cli.main import main
from heron.humans.config import ApprovalsConfig
from heron.humans.console import ConsoleChannel
from heron.humans.desk import RequestDesk
from heron.humans.postgres_store import PostgresRequestStore
from heron.humans.signing import DecisionKeyStore, DecisionSigner
from heron.messages import UserMessage
from heron.sessions.postgres_leases import PostgresLeases
from heron.turn.approval_audit import AuditRecord
from support.postgres import PostgresServer, postgres_server, postgres_url

__all__ = ["postgres_server", "postgres_url"]  # fixtures, found by pytest here


def heron_json(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, object]]:
    assert main(list(argv)) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_db_migrate_brings_a_new_postgresql_database_up_and_status_shows_it(
    postgres_server: PostgresServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url = postgres_server.empty_database()
    latest = max(m.version for m in POSTGRESQL)
    (before,) = heron_json(capsys, "db", "status", "--store", url, "--json")
    assert (before["version"], before["pending"]) == (0, [m.version for m in POSTGRESQL])
    (ran,) = heron_json(capsys, "db", "migrate", "--store", url, "--json")
    assert ran["applied_now"] == [m.version for m in POSTGRESQL]
    (after,) = heron_json(capsys, "db", "status", "--store", url, "--json")
    assert (after["backend"], after["version"], after["pending"]) == ("postgresql", latest, [])


def test_db_migrate_records_the_sqlite_baseline_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = str(tmp_path / "state")
    (first,) = heron_json(capsys, "db", "migrate", "--state-dir", state, "--json")
    (again,) = heron_json(capsys, "db", "migrate", "--state-dir", state, "--json")
    assert first["applied_now"] == [m.version for m in SQLITE]
    assert (again["applied_now"], again["backend"], again["pending"]) == ([], "sqlite", [])


def test_events_and_sessions_read_the_store_that_store_names(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bus = PostgresBusStore.open(postgres_url)
    one = BusEvent(
        kind="webhook.received",
        source="system",
        channel="webhook",
        content=EventContent(text="built"),
        session="builds",
    )
    asyncio.run(bus.publish(one))
    asyncio.run(bus.consume("builds", [one.id], [UserMessage(content="built")]))
    bus.close()
    (listed,) = heron_json(capsys, "events", "tail", "--store", postgres_url, "--json")
    assert (listed["event"]["id"], listed["consumed"]) == (one.id, True)  # type: ignore[index]
    (session,) = heron_json(capsys, "sessions", "list", "--store", postgres_url, "--json")
    assert (session["session"], session["entries"]) == ("builds", 1)


def test_jobs_and_timers_list_the_store_that_store_names(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    stores = open_pg_trigger_stores(postgres_url)
    stores.jobs.insert(
        JobRecord(
            id="job-1",
            session="ops",
            call_id=None,
            command="make",
            cwd="ws",
            dir="jobs/job-1",
            state="working",
            started_at=10.0,
        )
    )
    stores.timers.insert(
        TimerRecord(
            id="tmr-1",
            session="ops",
            call_id=None,
            message="check the build",
            kind="every",
            every_s=60.0,
            cron=None,
            tz="UTC",
            misfire="catch_up",
            next_fire=70.0,
            fires=0,
            missed=0,
            state="active",
            created_at=10.0,
            last_fired=None,
        )
    )
    stores.close()
    args = ("--session", "ops", "--store", postgres_url, "--json")
    (job,) = heron_json(capsys, "jobs", "list", *args)
    (timer,) = heron_json(capsys, "timers", "list", *args)
    assert (job["job_id"], timer["timer_id"]) == ("job-1", "tmr-1")


def test_approvals_lists_and_answers_a_request_of_the_shared_store(
    postgres_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool = open_pool(postgres_url, max_size=2)
    store = PostgresRequestStore(pool)
    desk = RequestDesk(
        store,
        signer=DecisionSigner(DecisionKeyStore(tmp_path / "worker")),
        config=ApprovalsConfig(approvers={"console": ["alice"]}),
        channels=[ConsoleChannel()],
        approval_timeout_s=600.0,
        clock=FakeClock(start=time.time()),
    )
    opened = asyncio.run(
        desk.open_approval(session="main", call_id="c1", tool="pay", arguments={"amount": 5})
    )
    terminal = ("--store", postgres_url, "--state-dir", str(tmp_path / "terminal"))
    assert main(["approvals", "list", "-q", *terminal]) == 0
    assert capsys.readouterr().out.split() == [opened.id]
    assert main(["approvals", "approve", opened.id, "--as", "alice", *terminal]) == 0
    capsys.readouterr()
    answered = store.get(opened.id)
    assert answered is not None
    assert (answered.outcome, answered.answered_by) == ("approved", "console:alice")
    pool.close()


def test_audit_reads_both_trails_of_the_shared_store(
    postgres_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool = open_pool(postgres_url, max_size=2)
    PostgresApprovalAudit(pool).record(
        AuditRecord(
            timestamp="2026-12-02T03:00:00Z",
            tool="pay",
            arguments_summary="amount=5",
            decision="yes",
            decided_by="console:alice",
            request_id="apr-1",
            session_id="main",
        )
    )
    PostgresExecutionStore(pool).start(
        Execution(
            started=time.time(),
            ended=None,
            tool="pay",
            call_id="c1",
            session="main",
            turn_id="t1",
            agent=None,
            parent_agent=None,
            channel=None,
            operator="serve:worker-a",
            approved_by=None,
            owner="user",
            why=None,
            arguments="{}",
            status="running",
            success=None,
            duration_ms=None,
            result=None,
        )
    )
    pool.close()
    terminal = ("--store", postgres_url, "--state-dir", str(tmp_path / "terminal"), "--json")
    (decision,) = heron_json(capsys, "audit", "--approvals", *terminal)
    assert (decision["request_id"], decision["decided_by"]) == ("apr-1", "console:alice")
    (execution,) = heron_json(capsys, "audit", *terminal)
    assert (execution["tool"], execution["session"]) == ("pay", "main")
    config = tmp_path / "heron.toml"
    config.write_text(f'[store]\nurl = "{postgres_url}"\n', encoding="utf-8")
    elsewhere = ("--config", str(config), "--state-dir", str(tmp_path / "other"), "--json")
    (again,) = heron_json(capsys, "audit", *elsewhere)  # `[store] url` instead of --store
    assert again == execution


def test_agents_tree_and_cancel_reach_the_children_of_the_shared_store(
    postgres_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool = open_pool(postgres_url, max_size=2)
    leases = PostgresLeases(pool, owner="worker-a", ttl_s=0.0)  # the worker is gone
    lease = leases.acquire("main")
    assert lease is not None
    children = PostgresSubagentStore(pool)
    for child in ("k1", "k2"):
        children.add(
            SubagentRecord(
                id=child,
                agent="helper",
                task="look",
                mode="async",
                parent=None,
                root_session="main",
                parent_session="main",
                call_id=f"c_{child}",
                depth=1,
                owner=lease.epoch,
            )
        )
    terminal = ("--store", postgres_url, "--state-dir", str(tmp_path / "terminal"))
    assert main(["agents", "tree", "--json", *terminal]) == 0
    assert [n["id"] for n in json.loads(capsys.readouterr().out)] == ["k1", "k2"]
    # Its worker's lease has expired: nobody runs it any more, so the command ends it.
    assert main(["agents", "cancel", "k1", *terminal]) == 0
    assert capsys.readouterr().out.strip() == "k1 helper: cancelled"
    record = children.get("k1")
    assert record is not None and record.status == "cancelled"
    pool.close()
