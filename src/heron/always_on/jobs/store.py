"""Durable job records in heron's SQLite database (table `jobs`), the job's output file, and
the events that report a job.

A record holds everything needed to find a job again after heron restarts: the supervisor's
and the command's process identities (pid, start time, boot id), the process group, the job
directory with its output and status files, the deadline, and whether the job's end has been
published on the bus (`reported`), which is what makes that publication happen exactly once.
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import signal
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from heron.always_on.bus.model import (
    BusEvent,
    Channel,
    EventContent,
    EventContext,
    EventKind,
    Source,
)
from heron.always_on.jobs.supervisor import OUTPUT_FILE

JobState = Literal["working", "input_required", "completed", "failed", "cancelled", "lost"]
"""The MCP tasks model (`working`, `input_required`, `completed`, `failed`, `cancelled`) plus
`lost`: the job's fate cannot be known. Detached jobs read /dev/null, so they never ask for
input; `input_required` is part of the model for other asynchronous tools."""

FINAL_STATES: frozenset[str] = frozenset({"completed", "failed", "cancelled", "lost"})

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id               TEXT PRIMARY KEY,
    session          TEXT NOT NULL,
    call_id          TEXT,
    command          TEXT NOT NULL,
    cwd              TEXT NOT NULL,
    dir              TEXT NOT NULL,
    state            TEXT NOT NULL,
    supervisor_pid   INTEGER,
    supervisor_start INTEGER,
    child_pid        INTEGER,
    child_start      INTEGER,
    boot_id          TEXT NOT NULL DEFAULT '',
    cgroup           TEXT,
    started_at       REAL NOT NULL,
    timeout_s        REAL,
    deadline         REAL,
    ended_at         REAL,
    exit_code        INTEGER,
    signal           INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    timed_out        INTEGER NOT NULL DEFAULT 0,
    reported         INTEGER NOT NULL DEFAULT 0,
    detail           TEXT
);
CREATE INDEX IF NOT EXISTS jobs_by_session ON jobs (session, started_at);
"""


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


_FIELDS = [f.name for f in dataclasses.fields(JobRecord)]
_BOOLS = {"cancel_requested", "timed_out", "reported"}


def _record(row: sqlite3.Row | tuple[Any, ...]) -> JobRecord:
    values = dict(zip(_FIELDS, row, strict=True))
    for name in _BOOLS:
        values[name] = bool(values[name])
    return JobRecord(**values)


class JobStore:
    """Job records on a connection from `heron._support.state.open_db`. Not thread-safe: use it from
    the event loop's thread."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        with conn:
            conn.executescript(_SCHEMA)

    def insert(self, job: JobRecord) -> None:
        marks = ", ".join("?" * len(_FIELDS))
        with self._conn:
            self._conn.execute(
                f"INSERT INTO jobs ({', '.join(_FIELDS)}) VALUES ({marks})",
                [getattr(job, name) for name in _FIELDS],
            )

    def update(self, job_id: str, **changes: Any) -> JobRecord:
        """Change fields of a job and return the stored result."""
        unknown = set(changes) - set(_FIELDS)
        if unknown:
            raise ValueError(f"unknown job fields: {sorted(unknown)}")
        sets = ", ".join(f"{name} = ?" for name in changes)
        with self._conn:
            self._conn.execute(f"UPDATE jobs SET {sets} WHERE id = ?", [*changes.values(), job_id])
        job = self.get(job_id)
        if job is None:
            raise KeyError(job_id)
        return job

    def get(self, job_id: str) -> JobRecord | None:
        row = self._conn.execute(
            f"SELECT {', '.join(_FIELDS)} FROM jobs WHERE id = ?", (job_id,)
        ).fetchone()
        return None if row is None else _record(row)

    def list(self, session: str, *, limit: int = 50) -> list[JobRecord]:
        """The session's jobs, newest first."""
        rows = self._conn.execute(
            f"SELECT {', '.join(_FIELDS)} FROM jobs WHERE session = ?"
            " ORDER BY started_at DESC, rowid DESC LIMIT ?",
            (session, limit),
        )
        return [_record(row) for row in rows]

    def open_jobs(self, session: str) -> Iterator[JobRecord]:
        """Jobs still running, or finished without their end published yet."""
        rows = self._conn.execute(
            f"SELECT {', '.join(_FIELDS)} FROM jobs WHERE session = ?"
            " AND (state NOT IN ('completed', 'failed', 'cancelled', 'lost') OR reported = 0)"
            " ORDER BY started_at, rowid",
            (session,),
        ).fetchall()
        return (_record(row) for row in rows)


@dataclass(frozen=True, kw_only=True, slots=True)
class OutputChunk:
    """Part of a job's output: `text` is bytes `start`..`end` (decoded) of `size` in all."""

    text: str
    start: int
    end: int
    size: int


def read_output(job: JobRecord, offset: int | None, limit: int) -> OutputChunk:
    """Up to `limit` bytes of output from byte `offset` (default: the newest `limit` bytes),
    never cutting a UTF-8 character: `end` is where the next read continues."""
    path = job.output_path
    with contextlib.suppress(FileNotFoundError), open(path, "rb") as handle:
        size = handle.seek(0, 2)
        start = max(0, size - limit) if offset is None else min(max(offset, 0), size)
        handle.seek(start)
        raw = handle.read(limit)
        if offset is None:  # a tail may start inside a character
            skip = 0
            while skip < min(3, len(raw)) and raw[skip] & 0xC0 == 0x80:
                skip += 1
            raw, start = raw[skip:], start + skip
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        text = decoder.decode(raw, final=job.finished and start + len(raw) >= size)
        end = start + len(raw) - len(decoder.getstate()[0])
        return OutputChunk(text=text, start=start, end=end, size=size)
    return OutputChunk(text="", start=0, end=0, size=0)


def tail_lines(job: JobRecord, lines: int) -> list[str]:
    """The last `lines` lines of a job's output."""
    if lines <= 0:
        return []
    return read_output(job, None, 16 * 1024).text.splitlines()[-lines:]


def output_size(job: JobRecord) -> int:
    try:
        return job.output_path.stat().st_size
    except FileNotFoundError:
        return 0


# -- events ------------------------------------------------------------------------------------


def job_event(
    job: JobRecord,
    kind: EventKind,
    text: str,
    data: dict[str, Any],
    *,
    when: str,
    key: str,
    source: Source = "tool",
    channel: Channel = "async_tool",
) -> BusEvent:
    """An event about `job`, bound to its starting call and its job (task) id."""
    return BusEvent(
        kind=kind,
        source=source,
        channel=channel,
        session=job.session,
        timestamp=when,
        content=EventContent(text=text, data={"job_id": job.id, **data}),
        context=EventContext(call_id=job.call_id, related_task=job.id),
        idempotency_key=key,
    )


def timeout_event(job: JobRecord, *, when: str, kill: bool) -> BusEvent:
    """`system.process_timeout`: the job passed its deadline (published once per job)."""
    what = "it is being stopped" if kill else "it keeps running"
    return job_event(
        job,
        "system.process_timeout",
        f"background job {job.id} (`{short_command(job.command)}`) passed its deadline of "
        f"{job.timeout_s:g} s; {what}.",
        {"action": "kill" if kill else "notify"},
        when=when,
        key=f"system.process_timeout:{job.id}",
        source="system",
        channel="system",
    )


def end_event(job: JobRecord, *, when: str, tail: list[str], killed_at_deadline: bool) -> BusEvent:
    """`job.exit` for a job that ended (with the last lines of its output), `job.lost` for one
    whose fate is unknown. The idempotency key makes the report exactly-once."""
    command = short_command(job.command)
    if job.state == "lost":
        text = (
            f"background job {job.id} (`{command}`) is lost: {job.detail}, so heron cannot "
            "tell whether or how it finished. Check its effects before running it again."
        )
        return job_event(
            job, "job.lost", text, {"state": "lost"}, when=when, key=f"job.lost:{job.id}"
        )
    how = f"exit code {job.exit_code}"
    if job.signal is not None:
        how = f"killed by {signal_name(job.signal)}"
    if job.timed_out and killed_at_deadline and job.state != "completed":
        how += f" after passing its {job.timeout_s:g} s deadline"
    lines = [f"background job {job.id} (`{command}`) {job.state}: {how}."]
    if tail:
        lines.append(f"last {len(tail)} lines of output (job_output reads the rest):")
        lines.extend(tail)
    data = {
        "state": job.state,
        "exit_code": job.exit_code,
        "signal": job.signal,
        "timed_out": job.timed_out,
        "output_bytes": output_size(job),
    }
    return job_event(job, "job.exit", "\n".join(lines), data, when=when, key=f"job.exit:{job.id}")


def short_command(command: str, limit: int = 80) -> str:
    """A command on one line, cut to `limit` characters."""
    flat = " ".join(command.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
