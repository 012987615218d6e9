"""`JobManager`: detached background jobs that survive heron, reported on the event bus.

A job is one bash command started through a supervisor (`heron.always_on.jobs.supervisor`) in its
own session, inside the agent's sandbox (bubblewrap namespaces for the `bwrap` level; the sandbox's
resource limits, pids cgroup or unprivileged user for both levels) and after the same command
policy as the `shell` tool. Its record lives in a `JobStore` (`heron.always_on.jobs.store`; SQLite
by default), its output in a file, its end in the supervisor's status file, so nothing about it
depends on heron's process.

Reporting, exactly once: when a job ends, a `job.exit` event (bound to the starting call's id
and the job id) is published with an idempotency key, then the record is marked `reported`. A
crash between the two republishes the same key, which the bus stores once.

Restarts: `start()` re-attaches. Running jobs are watched again (the supervisor's pid, start
time and boot id guard against a recycled pid); jobs that ended meanwhile are reconciled from
their status file; a job whose supervisor is gone without a status file becomes an explicit
`job.lost` event, never silence, and whatever it left running is killed.

Deadlines: a job past its deadline gets one `system.process_timeout` event and, with
`on_timeout="kill"`, is stopped (SIGTERM to its process group and cgroup, SIGKILL after the
grace period) and ends as `failed`.

Timing: the supervisor's exit wakes the manager at once through a pidfd; otherwise it polls
every `poll_interval_s` on its `Clock`, and sooner when a deadline falls due. A session with no
open job is not polled: its next `start_job` wakes the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import pwd
import secrets
import shutil
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from heron._support.clock import Clock, RealClock, timestamp
from heron.always_on.bus.model import BusEvent
from heron.always_on.jobs import supervisor as sup
from heron.always_on.jobs.events import end_event, timeout_event
from heron.always_on.jobs.output import tail_lines
from heron.always_on.jobs.store import JobRecord, JobState, JobStore
from heron.errors import HeronError, StoreError
from heron.safety.command_policy import CommandPolicy, CommandVerdict, Decision
from heron.safety.secrets import known_secrets
from heron.sandbox.base import ResourceLimits, Sandbox, SandboxUnavailable
from heron.sandbox.bwrap import BwrapSandbox
from heron.sandbox.cgroups import probe_cgroup
from heron.sandbox.process import ProcessSandbox
from heron.toolsets.shell import agent_environment

log = logging.getLogger("heron.always_on.jobs")

Publish = Callable[[BusEvent], Awaitable[bool]]
FinishListener = Callable[[JobRecord], Awaitable[None]]
"""Awaited before a finished job's end is published (monitors flush the last output)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class JobConfig:
    """How jobs run. `limits=None` takes the sandbox's limits (note its CPU-time limit)."""

    poll_interval_s: float = 0.5
    default_timeout_s: float | None = 3600.0
    """Deadline of a job started without `timeout_s`; `None`: no deadline."""
    max_timeout_s: float = 7 * 24 * 3600.0
    on_timeout: Literal["kill", "notify"] = "kill"
    limits: ResourceLimits | None = None
    env_passthrough: tuple[str, ...] = ()
    exit_tail_lines: int = 20
    """Lines of output quoted in a `job.exit` event."""


class JobError(HeronError, RuntimeError):
    """A job operation failed; the message says why and what happened."""


class JobRefused(JobError):
    """The command policy did not let the command run; nothing was started."""

    def __init__(self, verdict: CommandVerdict, decision: Decision) -> None:
        self.verdict = verdict
        self.decision = decision
        super().__init__(f"command policy: {decision} ({verdict.risk} risk)")


class JobManager:
    """Starts, watches, cancels and reports the jobs of one session. See the module docstring."""

    def __init__(
        self,
        store: JobStore,
        *,
        state_dir: Path,
        workspace: Path,
        sandbox: Sandbox,
        policy: CommandPolicy,
        publish: Publish,
        session: str = "default",
        clock: Clock | None = None,
        config: JobConfig | None = None,
        cgroup_root: Path = Path("/sys/fs/cgroup"),
    ) -> None:
        self.store = store
        self.workspace = workspace.resolve()
        self.jobs_dir = state_dir / "jobs"
        self.session = session
        self.clock: Clock = clock or RealClock()
        self.config = config or JobConfig()
        self.limits = self.config.limits or sandbox.limits
        self.sandbox = sandbox
        self._policy = policy
        self._publish = publish
        self._cgroup_root = cgroup_root
        self._listeners: list[FinishListener] = []
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._pidfds: dict[str, int] = {}
        self._loop_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._waiters: dict[str, list[asyncio.Future[JobRecord]]] = {}
        self._launching: set[str] = set()

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Re-attach to this session's jobs (reconcile and report what ended) and start
        watching. Jobs keep running whether or not a manager watches them."""
        watched = await self.poll()
        if self._loop_task is None:
            self._loop_task = asyncio.ensure_future(self._run(watched))

    async def aclose(self) -> None:
        """Stop watching. Running jobs are not touched: the next `start()` finds them."""
        tasks = [t for t in (self._loop_task, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loop_task = None
        for job_id in list(self._pidfds):
            self._unarm(job_id)

    def add_finish_listener(self, listener: FinishListener) -> None:
        self._listeners.append(listener)

    # -- operations ---------------------------------------------------------------------------

    async def start_job(
        self,
        command: str,
        *,
        cwd: str | None = None,
        timeout_s: float | None = None,
        call_id: str | None = None,
        approved: bool = False,
    ) -> JobRecord:
        """Check `command` against the policy and start it detached; returns at once.

        Raises `JobRefused` (policy), `ValueError` (bad arguments) or `JobError` (could not
        start; nothing is left running)."""
        if not command.strip() or "\x00" in command:
            raise ValueError("`command` is empty or contains a NUL byte")
        where = self._resolve_cwd(cwd)
        timeout = self.config.default_timeout_s if timeout_s is None else timeout_s
        if timeout is not None and not 0 < timeout <= self.config.max_timeout_s:
            raise ValueError(f"timeout_s must be > 0 and <= {self.config.max_timeout_s:g}")
        verdict = self._policy.classify(command, cwd=where)
        decision = self._policy.decide(verdict, approved=approved)
        if decision != "run":
            raise JobRefused(verdict, decision)
        job_id = f"job-{secrets.token_hex(4)}"
        job_dir = self.jobs_dir / job_id
        spec = self._spec(job_id, job_dir, command, where)
        spec_path = _write_spec(job_dir, spec)
        now = self.clock.time()
        job = JobRecord(
            id=job_id,
            session=self.session,
            call_id=call_id,
            command=command,
            cwd=str(where),
            dir=str(job_dir),
            state="working",
            started_at=now,
            timeout_s=timeout,
            deadline=None if timeout is None else now + timeout,
            cgroup=spec["cgroup"],
        )
        # Stored before launching: a crash in between is found and reconciled on restart.
        self.store.insert(job)
        self._launching.add(job_id)  # not yet reconcilable: its processes are being started
        try:
            # The supervisor masks known secrets in the job's output before it reaches disk.
            report = await sup.launch_supervisor(spec_path, known_secrets().replacements())
        finally:
            self._launching.discard(job_id)
        if report.get("ok") is not True:
            error = str(report.get("error", "the supervisor failed"))
            self.store.update(job_id, state="failed", detail=error, reported=True)
            raise JobError(error)
        job = self.store.update(job_id, **sup.identity(report))
        self._arm(job)
        self._wake.set()  # the watching loop has an open job again
        return job

    def get(self, job_id: str) -> JobRecord | None:
        """A job of this session, or `None`."""
        job = self.store.get(job_id)
        return job if job is not None and job.session == self.session else None

    def jobs(self, limit: int = 50) -> list[JobRecord]:
        """This session's jobs, newest first."""
        return self.store.list(self.session, limit=limit)

    async def cancel(self, job_id: str) -> JobRecord:
        """Stop a job and its whole process group (and cgroup); returns its final record."""
        job = self.get(job_id)
        if job is None:
            raise KeyError(job_id)
        if job.finished:
            return job
        job = self.store.update(job_id, cancel_requested=True)
        await self._terminate(job)
        return await self.check(job_id)

    async def wait_finished(self, job_id: str) -> JobRecord:
        """Wait until the job's end has been published. The watching loop (`start()`) does the
        publishing; bound the wait with `asyncio.wait_for`."""
        job = self.get(job_id)
        if job is None:
            raise KeyError(job_id)
        if job.finished and job.reported:
            return job
        future: asyncio.Future[JobRecord] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(job_id, []).append(future)
        self._wake.set()
        return await future

    # -- watching -----------------------------------------------------------------------------

    async def poll(self) -> list[JobRecord]:
        """Check every open job of the session once; the jobs still open after it."""
        still: list[JobRecord] = []
        for job in self.store.open_jobs(self.session):
            if job.id not in self._launching:
                job = await self.check(job.id)
            if not job.finished or not job.reported:
                still.append(job)
        return still

    async def check(self, job_id: str) -> JobRecord:
        """Reconcile one job with its processes and files; publish its end if due."""
        async with self._lock:
            job = self.store.get(job_id)
            if job is None:
                raise KeyError(job_id)
            if not job.finished:
                job = await self._reconcile(job)
            if job.finished and not job.reported:
                job = await self._announce(job)
            return job

    async def _run(self, watched: list[JobRecord]) -> None:
        """Watch `watched` (the open jobs `start` has just polled), and the jobs started later."""
        while True:
            delay = self.config.poll_interval_s
            now = self.clock.time()
            for job in watched:
                if job.deadline is not None and not job.timed_out:
                    delay = min(delay, max(job.deadline - now, 0.0))
            if watched or self._waiters:
                sleeper = asyncio.ensure_future(self.clock.sleep(delay))
                waker = asyncio.ensure_future(self._wake.wait())
                try:
                    await asyncio.wait([sleeper, waker], return_when=asyncio.FIRST_COMPLETED)
                finally:
                    sleeper.cancel()
                    waker.cancel()
            else:  # no open job: nothing to poll until one starts (most sessions, most wakes)
                await self._wake.wait()
            self._wake.clear()
            try:
                watched = await self.poll()
            except (OSError, StoreError):
                log.exception("job poll failed; retrying")

    async def _reconcile(self, job: JobRecord) -> JobRecord:
        if job.supervisor_pid is None:  # heron stopped between storing and launching
            procs = sup.read_json(Path(job.dir) / sup.PROCS_FILE)
            if procs is not None:
                job = self.store.update(job.id, **sup.identity(procs))
        status = sup.read_json(Path(job.dir) / sup.STATUS_FILE)
        if status is None:
            if sup.alive(job.supervisor_pid, job.supervisor_start, job.boot_id):
                self._arm(job)
                return await self._check_deadline(job)
            status = sup.read_json(Path(job.dir) / sup.STATUS_FILE)  # written just before exit
        self._unarm(job.id)
        if status is None:
            sup.kill_leftovers(dataclasses.asdict(job), job.cgroup)
            return self.store.update(
                job.id,
                state="lost",
                ended_at=self.clock.time(),
                detail="its supervisor is gone and left no exit status",
            )
        code, sig = status.get("exit_code"), status.get("signal")
        state: JobState = "completed" if code == 0 else "failed"
        if job.cancel_requested and code != 0:
            state = "cancelled"
        return self.store.update(
            job.id, state=state, exit_code=code, signal=sig, ended_at=status.get("ended_at")
        )

    async def _check_deadline(self, job: JobRecord) -> JobRecord:
        if job.deadline is None or job.timed_out or self.clock.time() < job.deadline:
            return job
        kill = self.config.on_timeout == "kill"
        await self._publish(timeout_event(job, when=timestamp(self.clock), kill=kill))
        job = self.store.update(job.id, timed_out=True)
        if kill:
            task = asyncio.ensure_future(self._terminate(job))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return job

    async def _announce(self, job: JobRecord) -> JobRecord:
        for listener in self._listeners:
            try:
                await listener(job)
            except Exception:
                log.exception("job finish listener failed for %s", job.id)
        event = end_event(
            job,
            when=timestamp(self.clock),
            tail=tail_lines(job, self.config.exit_tail_lines),
            killed_at_deadline=self.config.on_timeout == "kill",
        )
        await self._publish(event)
        job = self.store.update(job.id, reported=True)
        for future in self._waiters.pop(job.id, []):
            if not future.done():
                future.set_result(job)
        return job

    # -- processes ----------------------------------------------------------------------------

    async def _terminate(self, job: JobRecord) -> None:
        """SIGTERM to the job's group and cgroup; SIGKILL if it outlives the grace period."""
        grace = self.limits.kill_grace_s
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not sup.alive(job.supervisor_pid, job.supervisor_start, job.boot_id):
                return
            assert job.child_pid is not None  # recorded together with the supervisor
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(job.child_pid, sig)
            sup.signal_cgroup(job.cgroup, sig)
            if await sup.wait_gone(job.supervisor_pid, job.supervisor_start, job.boot_id, grace):
                return

    def _arm(self, job: JobRecord) -> None:
        """Wake the loop the moment the supervisor exits (pidfd), instead of at the next poll."""
        if job.id in self._pidfds or job.supervisor_pid is None or not sup.HAS_PIDFD:
            return
        try:
            fd = os.pidfd_open(job.supervisor_pid)
        except OSError:
            self._wake.set()
            return
        self._pidfds[job.id] = fd

        def fired() -> None:
            self._unarm(job.id)
            self._wake.set()

        asyncio.get_running_loop().add_reader(fd, fired)

    def _unarm(self, job_id: str) -> None:
        fd = self._pidfds.pop(job_id, None)
        if fd is not None:
            asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)

    # -- building -----------------------------------------------------------------------------

    def _resolve_cwd(self, cwd: str | None) -> Path:
        where = (self.workspace / (cwd or ".")).resolve()
        if not where.is_relative_to(self.workspace):
            raise ValueError(f"cwd {cwd!r} is outside the workspace {self.workspace}")
        if not where.is_dir():
            raise ValueError(f"cwd {cwd!r} is not a directory in the workspace")
        return where

    def _spec(self, job_id: str, job_dir: Path, command: str, where: Path) -> dict[str, Any]:
        sandbox = self.sandbox
        if not isinstance(sandbox, ProcessSandbox | BwrapSandbox):
            raise SandboxUnavailable(
                f"detached jobs cannot run in a {sandbox.level!r} sandbox of type "
                f"{type(sandbox).__name__}: it cannot wrap a long-lived command line"
            )
        argv = [shutil.which("bash") or "/bin/bash", "-c", command]
        if isinstance(sandbox, BwrapSandbox):
            if not where.is_relative_to(sandbox.workspace):
                raise ValueError(f"cwd {where} is outside the sandbox workspace")
            argv = [*sandbox.bwrap_args(where), "--", *argv]
        limits = self.limits
        mode = sandbox.pids_limit if limits.max_processes is not None else "none"
        user = None
        if mode == "uid-rlimit":
            uid = int(sandbox.metadata()["run_as_uid"])
            user = [uid, pwd.getpwuid(uid).pw_gid]
        cgroup = None
        if mode in ("cgroup-v2", "cgroup-v1"):
            tree = probe_cgroup(self._cgroup_root)
            if tree is None:
                raise SandboxUnavailable(f"no writable pids cgroup under {self._cgroup_root}")
            cgroup = str(tree.base / job_id)
        return {
            "dir": str(job_dir),
            "argv": argv,
            "cwd": str(where),
            "env": agent_environment(self.workspace, self.config.env_passthrough),
            "rlimits": sup.rlimit_triples(
                cpu_seconds=limits.cpu_seconds,
                address_space_bytes=limits.address_space_bytes,
                file_size_bytes=limits.file_size_bytes,
                open_files=limits.open_files,
                max_processes=limits.max_processes if mode in ("uid-rlimit", "rlimit") else None,
            ),
            "user": user,
            "cgroup": cgroup,
            "pids_max": limits.max_processes,
        }


def _write_spec(job_dir: Path, spec: dict[str, Any]) -> Path:
    """Create the job directory (owner-only) and the command's `$HOME`; write the spec."""
    job_dir.mkdir(mode=0o700, parents=True)
    Path(spec["env"]["HOME"]).mkdir(parents=True, exist_ok=True)
    path = job_dir / sup.SPEC_FILE
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path
