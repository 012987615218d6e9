"""`JobStore`: job records by id and by session, field updates, the open jobs to watch."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from heron._support.vocabulary import StatusError
from heron.always_on.jobs.store import JOB_FIELDS, JobRecord, JobStore
from support.stores import StoreBackend


@pytest.fixture
def store(backend: StoreBackend) -> JobStore:
    return backend.jobs()


def job(
    job_id: str, *, session: str = "main", started_at: float = 100.0, **fields: Any
) -> JobRecord:
    return JobRecord(
        id=job_id,
        session=session,
        call_id=f"call-{job_id}",
        command=f"echo {job_id}",
        cwd="/ws",
        dir=f"/state/jobs/{job_id}",
        state=fields.pop("state", "working"),
        started_at=started_at,
        **fields,
    )


def test_a_job_reads_back_whole_through_another_store(
    store: JobStore, backend: StoreBackend
) -> None:
    full = job(
        "job-1",
        supervisor_pid=10,
        supervisor_start=11,
        child_pid=12,
        child_start=13,
        boot_id="boot",
        cgroup="/sys/fs/cgroup/heron/job-1",
        timeout_s=60.0,
        deadline=160.0,
        cancel_requested=True,
        detail="why not",
    )
    store.insert(full)
    assert backend.jobs().get("job-1") == full
    assert store.get("job-2") is None


def test_update_changes_the_named_fields_and_returns_the_stored_job(store: JobStore) -> None:
    store.insert(job("job-1"))
    changed = store.update("job-1", state="completed", exit_code=0, ended_at=130.5, reported=True)
    assert changed == dataclasses.replace(
        job("job-1"), state="completed", exit_code=0, ended_at=130.5, reported=True
    )
    assert store.get("job-1") == changed
    assert changed.finished and changed.reported


def test_update_refuses_an_unknown_field_or_job(store: JobStore) -> None:
    store.insert(job("job-1"))
    with pytest.raises(ValueError, match="colour"):
        store.update("job-1", state="failed", colour="red")
    assert store.get("job-1") == job("job-1")
    with pytest.raises(KeyError):
        store.update("job-9", state="failed")
    assert set(JOB_FIELDS) == {f.name for f in dataclasses.fields(JobRecord)}


def test_a_finished_job_keeps_its_state(store: JobStore) -> None:
    store.insert(job("job-1"))
    store.update("job-1", state="cancelled", reported=True)
    store.update("job-1", state="cancelled")  # the same final state again: nothing changes
    with pytest.raises(StatusError, match="cancelled"):
        store.update("job-1", state="working", detail="late report")
    assert store.get("job-1") == dataclasses.replace(job("job-1"), state="cancelled", reported=True)


def test_list_gives_the_sessions_latest_jobs_newest_first(store: JobStore) -> None:
    for n, started in enumerate((100.0, 300.0, 200.0)):
        store.insert(job(f"job-{n}", started_at=started))
    store.insert(job("elsewhere", session="other", started_at=400.0))
    assert [j.id for j in store.list("main")] == ["job-1", "job-2", "job-0"]
    assert [j.id for j in store.list("main", limit=2)] == ["job-1", "job-2"]
    assert [j.id for j in store.list("other")] == ["elsewhere"]
    assert store.list("nobody") == []


def test_open_jobs_are_running_or_not_yet_reported_oldest_first(store: JobStore) -> None:
    store.insert(job("running", started_at=300.0))
    store.insert(job("ended-unreported", state="failed", started_at=100.0))
    store.insert(job("ended-reported", state="completed", reported=True, started_at=200.0))
    store.insert(job("lost-unreported", state="lost", started_at=250.0))
    store.insert(job("other-session", session="other"))
    assert [j.id for j in store.open_jobs("main")] == [
        "ended-unreported",
        "lost-unreported",
        "running",
    ]
