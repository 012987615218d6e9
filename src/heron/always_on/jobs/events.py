"""The bus events that report a job: its output (`job_event`), a passed deadline
(`timeout_event`) and its end (`end_event`), each with the idempotency key that makes the
report exactly-once."""

from __future__ import annotations

import signal
from typing import Any

from heron.always_on.bus.model import (
    BusEvent,
    Channel,
    EventContent,
    EventContext,
    EventKind,
    Source,
)
from heron.always_on.jobs.output import output_size
from heron.always_on.jobs.store import JobRecord


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
