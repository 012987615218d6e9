"""`JobStore`: durable job records (`JobRecord`), the interface every back end implements.

A record holds everything needed to find a job again after heron restarts: the supervisor's
and the command's process identities (pid, start time, boot id), the process group, the job
directory with its output and status files, the deadline, and whether the job's end has been
published on the bus (`reported`), which is what makes that publication happen exactly once.

The embedded implementation is `heron.always_on.jobs.sqlite_store.SqliteJobStore`. The methods
are synchronous (each is one short local transaction in SQLite) and called from the event
loop's thread by `JobManager`; a back-end failure raises `heron.errors.StoreError`.
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from heron._support.vocabulary import TERMINAL_STATUSES
from heron.always_on.jobs.supervisor import OUTPUT_FILE

JobState = Literal["working", "input_required", "completed", "failed", "cancelled", "lost"]
"""The words of heron's status vocabulary (`heron._support.vocabulary.Status`) a job uses:
`lost` when its fate cannot be known. Detached jobs read /dev/null, so they never ask for
input; a job's timeout is the `timed_out` flag beside the state its end gives it (a killed job
is `failed`), and a job starts `working` (it is never `queued`)."""

FINAL_STATES: frozenset[str] = frozenset(TERMINAL_STATUSES)


@dataclass(frozen=True, kw_only=True, slots=True)
class JobRecord:
    """One detached job as stored. `child_pid` is also the command's process group id."""

    id: str
    session: str
    call_id: str | None
    command: str
    cwd: str
    dir: str
    state: JobState
    supervisor_pid: int | None = None
    supervisor_start: int | None = None
    child_pid: int | None = None
    child_start: int | None = None
    boot_id: str = ""
    cgroup: str | None = None
    started_at: float
    timeout_s: float | None = None
    deadline: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    cancel_requested: bool = False
    timed_out: bool = False
    reported: bool = False
    detail: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def output_path(self) -> Path:
        return Path(self.dir) / OUTPUT_FILE


JOB_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(JobRecord))
"""The stored fields of a job, in declaration order: what `JobStore.update` may change."""


class JobStore(Protocol):
    """Durable job records, looked up by id and by session."""

    def insert(self, job: JobRecord) -> None:
        """Store a new job (its id must be new)."""
        ...

    def update(self, job_id: str, **changes: Any) -> JobRecord:
        """Change fields of a job and return the stored result; `ValueError` for a name not in
        `JOB_FIELDS` (nothing changes), `KeyError` for an unknown job, and
        `heron._support.vocabulary.StatusError` (nothing changes) for a `state` that would move
        a finished job to another state."""
        ...

    def get(self, job_id: str) -> JobRecord | None:
        """The job, or `None` when there is no such job."""
        ...

    def list(self, session: str, *, limit: int = 50) -> builtins.list[JobRecord]:
        """The session's latest `limit` jobs, newest first."""
        ...

    def open_jobs(self, session: str) -> Iterator[JobRecord]:
        """Jobs of the session still running, or finished without their end published yet,
        oldest first."""
        ...


__all__ = ["FINAL_STATES", "JOB_FIELDS", "JobRecord", "JobState", "JobStore"]
