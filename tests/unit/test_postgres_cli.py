"""`heron db migrate|status` on both back ends and `--store` on the state-reading commands
(`events`, `sessions`, `jobs`, `timers`),
against the test process's real PostgreSQL server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from heron._support.migrations import POSTGRESQL, SQLITE
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.bus.postgres_store import PostgresBusStore
from heron.always_on.jobs.store import JobRecord
from heron.always_on.triggers.postgres_store import open_pg_trigger_stores
from heron.always_on.triggers.timers import TimerRecord
from heron.cli.main import main
from heron.messages import UserMessage
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
