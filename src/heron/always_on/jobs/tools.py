"""The background-job tools: `start_job`, `job_status`, `job_output`, `cancel_job`, `list_jobs`.

`start_job` is an asynchronous tool interface: it returns a job id (the task id) at once, and
the job's end arrives later as a `job.exit` (or `job.lost`) event bound to the starting call's
id and the job id. Task states follow the MCP tasks model: `working`, `input_required`,
`completed`, `failed`, `cancelled`, plus `lost` when the outcome cannot be known.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from heron._support.timefmt import utc_rfc3339
from heron.always_on.jobs.manager import JobError, JobManager, JobRefused
from heron.always_on.jobs.output import output_size, read_output, tail_lines
from heron.always_on.jobs.store import JobRecord
from heron.sandbox.base import SandboxError
from heron.tools.definition import Tool, ToolContext, ToolResult
from heron.tools.function_tool import tool

MAX_OUTPUT_BYTES = 64_000
DEFAULT_OUTPUT_BYTES = 8_000


def rfc3339(epoch: float | None) -> str | None:
    """An epoch time as an RFC 3339 UTC timestamp (seconds precision)."""
    return None if epoch is None else utc_rfc3339(epoch)


def job_summary(job: JobRecord) -> dict[str, Any]:
    """What the tools report about a job."""
    return {
        "job_id": job.id,
        "state": job.state,
        "command": job.command,
        "cwd": job.cwd,
        "started_at": rfc3339(job.started_at),
        "deadline": rfc3339(job.deadline),
        "ended_at": rfc3339(job.ended_at),
        "exit_code": job.exit_code,
        "signal": job.signal,
        "timed_out": job.timed_out,
        "cancel_requested": job.cancel_requested,
        "output_bytes": output_size(job),
        "detail": job.detail,
    }


def _missing(job_id: str) -> ToolResult:
    return ToolResult.fail(f"no job {job_id!r} in this session; list_jobs shows the known jobs")


def _start_description(deadline_text: str) -> str:
    return (
        "Start a long-running bash command in the background and return its job id at once.\n\n"
        "Use it for builds, test suites, downloads and anything that takes longer than a "
        "`shell` call should. The command runs detached from heron (it survives a restart), "
        "checked by the same command policy and inside the same sandbox and environment as "
        "`shell`; stdin is empty and stdout and stderr go to the job's output. When the job "
        "ends, a `job.exit` event (or `job.lost` if its fate cannot be known) arrives for this "
        "call. Meanwhile use `job_status`, `job_output`, `cancel_job` and `monitor_shell`. "
        f"Deadline: {deadline_text}."
    )


# The decorators are made once: each session's closures reuse their definitions.
@functools.lru_cache(maxsize=8)
def _start_job(deadline_text: str, network: bool) -> Callable[[Callable[..., Any]], Tool]:
    """`start_job`'s decorator for a deadline rule and a sandbox's network."""
    return tool(
        name="start_job",
        description=_start_description(deadline_text),
        destructive=True,
        open_world=network,
        owner="builtin",
        runtime_args=["approved"],
        examples=[
            {"command": "make test 2>&1", "timeout_s": 1800},
            {"command": "python train.py --epochs 10", "cwd": "experiments"},
        ],
    )


_JOB_STATUS = tool(name="job_status", read_only=True, owner="builtin")
_JOB_OUTPUT = tool(name="job_output", read_only=True, owner="builtin")
_CANCEL_JOB = tool(name="cancel_job", destructive=True, idempotent=True, owner="builtin")
_LIST_JOBS = tool(name="list_jobs", read_only=True, owner="builtin")


def job_tools(manager: JobManager) -> list[Tool]:
    """The five job tools, bound to one `JobManager`."""
    default_timeout = manager.config.default_timeout_s
    deadline_text = (
        f"without timeout_s the deadline is {default_timeout:g} s"
        if default_timeout is not None
        else "without timeout_s the job has no deadline"
    )
    if manager.config.on_timeout == "kill":
        deadline_text += "; a job past its deadline is stopped"

    @_start_job(deadline_text, manager.sandbox.network)
    async def start_job(
        command: str,
        ctx: ToolContext,
        cwd: str | None = None,
        timeout_s: float | None = None,
        approved: bool = False,
    ) -> ToolResult:
        """Start a background job.

        Args:
            command: The bash command line, run as written with `bash -c`.
            cwd: Directory relative to the workspace to run in (default: the workspace).
            timeout_s: Seconds until the job's deadline, when a `process_timeout` event
                arrives (see the deadline rule above).
            approved: Set by the runtime only.
        """
        try:
            job = await manager.start_job(
                command, cwd=cwd, timeout_s=timeout_s, call_id=ctx.call_id, approved=approved
            )
        except JobRefused as refused:
            data = {"policy": refused.verdict.to_data(), "started": False}
            if refused.decision == "refuse":
                why = "refused by the command policy (high risk); nothing was started."
            else:
                why = (
                    "this command is medium risk and needs approval, which this call did not "
                    "have; nothing was started."
                )
            return ToolResult.fail(f"{why}\n{refused.verdict.explain()}", data=data)
        except (ValueError, JobError, SandboxError) as exc:
            return ToolResult.fail(f"{exc}; nothing was started")
        ctx.progress(f"started {job.id}")
        summary = job_summary(job)
        return ToolResult.ok(
            f"started background job {job.id} (state: working). Its end arrives as a job.exit "
            f"event for this call. Deadline: {summary['deadline'] or 'none'}.",
            data={**summary, "task_id": job.id, "call_id": ctx.call_id},
        )

    @_JOB_STATUS
    async def job_status(job_id: str) -> ToolResult:
        """State of a background job: working, completed, failed, cancelled or lost, its exit
        code, times, output size and its last lines of output.

        Args:
            job_id: The id `start_job` returned, e.g. `job-1a2b3c4d`.
        """
        job = manager.get(job_id)
        if job is None:
            return _missing(job_id)
        summary = job_summary(job)
        tail = tail_lines(job, 5)
        summary["last_lines"] = tail
        head = f"{job.id}: {job.state}"
        if job.exit_code is not None:
            head += f" (exit code {job.exit_code})"
        text = "\n".join([head, *tail]) if tail else head
        return ToolResult.ok(text, data=summary)

    @_JOB_OUTPUT
    async def job_output(
        job_id: str, offset: int | None = None, limit: int = DEFAULT_OUTPUT_BYTES
    ) -> ToolResult:
        """Read a background job's output (stdout and stderr together).

        Args:
            job_id: The id `start_job` returned.
            offset: Byte offset to read from; omit it to read the newest output. Page on
                with the `next_offset` of the previous read.
            limit: Bytes to read, 1 to 64000.
        """
        job = manager.get(job_id)
        if job is None:
            return _missing(job_id)
        if not 0 < limit <= MAX_OUTPUT_BYTES:
            return ToolResult.fail(f"limit must be between 1 and {MAX_OUTPUT_BYTES}")
        if offset is not None and offset < 0:
            return ToolResult.fail("offset must be >= 0")
        chunk = read_output(job, offset, limit)
        head = f"[{job.id} {job.state}: bytes {chunk.start}-{chunk.end} of {chunk.size}]"
        data = {
            "job_id": job.id,
            "state": job.state,
            "start": chunk.start,
            "next_offset": chunk.end,
            "size": chunk.size,
            "more": chunk.end < chunk.size,
        }
        return ToolResult.ok(f"{head}\n{chunk.text}" if chunk.text else head, data=data)

    @_CANCEL_JOB
    async def cancel_job(job_id: str) -> ToolResult:
        """Stop a background job and every process it started (SIGTERM, then SIGKILL after a
        grace period). A job that already ended is left as it is.

        Args:
            job_id: The id `start_job` returned.
        """
        job = manager.get(job_id)
        if job is None:
            return _missing(job_id)
        if job.finished:
            return ToolResult.ok(f"{job.id} had already ended: {job.state}", data=job_summary(job))
        job = await manager.cancel(job_id)
        return ToolResult.ok(f"{job.id} is now {job.state}", data=job_summary(job))

    @_LIST_JOBS
    async def list_jobs() -> ToolResult:
        """List this session's background jobs, newest first, with their states."""
        jobs = manager.jobs()
        if not jobs:
            return ToolResult.ok("no background jobs", data={"jobs": []})
        lines = [f"{j.id} {j.state:<9} {j.command[:60]}" for j in jobs]
        return ToolResult.ok("\n".join(lines), data={"jobs": [job_summary(j) for j in jobs]})

    return [start_job, job_status, job_output, cancel_job, list_jobs]
