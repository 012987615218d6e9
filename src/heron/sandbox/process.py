"""`ProcessSandbox`: a command in its own session, under resource limits and a timeout.

What binds, and how:

- **CPU, memory, file size, open files**: `setrlimit` in the child between `fork` and `exec`
  (a `preexec_fn`), so the limits hold from the command's first instruction. Setting them on
  the running child with `prlimit` would leave a window in which it runs unlimited. The
  function calls nothing but `os.write` and `resource.setrlimit`, so it takes no Python-level
  lock that another thread could hold across the fork.
- **Process count**: RLIMIT_NPROC does not bind root, so the count is limited by a per-run
  cgroup with `pids.max` when the cgroup file system is writable (cgroup v2, or the v1 `pids`
  hierarchy). Otherwise, when heron runs as root, the command runs as a dedicated unprivileged
  user (`nobody` by default) with RLIMIT_NPROC; as a normal user RLIMIT_NPROC binds directly
  (it counts every process of that user). `RunResult.metadata["pids_limit"]` says which one
  bound. Under the unprivileged-user fallback the workspace must be writable by that user and
  the programs it runs readable by it (`run_python` uses heron's own interpreter).
- **Stopping**: the command leads a new session and process group. On timeout or
  cancellation heron sends SIGTERM to the group (and every process in the run's cgroup), waits
  the grace period, then sends SIGKILL. When the command exits by itself, whatever it left
  behind (background children, daemons) is killed too, so no process outlives its call; with a
  cgroup this includes processes that escaped into another session.

This level shares the host's file system and network; `BwrapSandbox` adds namespaces. A
virtualenv is not a sandbox (see `heron.sandbox.base`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import pwd
import resource
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from heron.sandbox.base import ResourceLimits, RunResult, SandboxError, SandboxUnavailable

__all__ = ["PidsLimit", "ProcessSandbox"]

PidsLimit = Literal["cgroup-v2", "cgroup-v1", "uid-rlimit", "rlimit", "none"]
"""How the process count is bound: a cgroup, RLIMIT_NPROC under a dedicated unprivileged user,
RLIMIT_NPROC of heron's own (non-root) user, or not at all (`max_processes=None`)."""

_run_numbers = itertools.count(1)
_SWEEP_STEP_S = 0.01  # cgroup membership changes asynchronously after a kill


@dataclass(frozen=True, slots=True)
class _CgroupTree:
    """The directory under which heron creates one pids cgroup per run."""

    version: Literal["cgroup-v2", "cgroup-v1"]
    base: Path

    def new_group(self, max_pids: int) -> _RunGroup:
        name = f"run-{os.getpid()}-{next(_run_numbers)}-{secrets.token_hex(3)}"
        path = self.base / name
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(max_pids))
            procs_fd = os.open(path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
        except OSError as exc:
            with contextlib.suppress(OSError):
                path.rmdir()
            raise SandboxError(f"cannot create the pids cgroup {path}: {exc}") from exc
        return _RunGroup(path=path, procs_fd=procs_fd, kill_file=self.version == "cgroup-v2")


@dataclass(slots=True)
class _RunGroup:
    path: Path
    procs_fd: int
    """Open in heron until the child has joined (it writes "0", meaning itself)."""
    kill_file: bool

    def close_procs_fd(self) -> None:
        if self.procs_fd >= 0:
            os.close(self.procs_fd)
            self.procs_fd = -1

    def pids(self) -> list[int]:
        try:
            text = (self.path / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(pid) for pid in text.split()]

    def signal(self, sig: int) -> None:
        if sig == signal.SIGKILL and self.kill_file:
            with contextlib.suppress(OSError):
                (self.path / "cgroup.kill").write_text("1")
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    async def remove(self, deadline_s: float) -> None:
        """Kill every member until the group is empty, then delete it (bounded wait)."""
        self.close_procs_fd()
        end = time.monotonic() + deadline_s
        while True:
            self.signal(signal.SIGKILL)
            try:
                self.path.rmdir()
                return
            except OSError:
                if time.monotonic() >= end:
                    return  # left for the next start-up's sweep of empty groups
            await asyncio.sleep(_SWEEP_STEP_S)


def probe_cgroup(root: Path) -> _CgroupTree | None:
    """A writable place for per-run pids cgroups under `root`, or `None`.

    cgroup v2: `root` must offer the `pids` controller and accept `+pids` in its
    `cgroup.subtree_control` (a container's namespace root usually refuses: it holds
    processes). cgroup v1: the `pids` hierarchy at `root/pids` must accept a new directory.
    """
    controllers = root / "cgroup.controllers"
    try:
        if controllers.is_file():
            if "pids" not in controllers.read_text().split():
                return None
            (root / "cgroup.subtree_control").write_text("+pids")
            base = root / "heron"
            base.mkdir(exist_ok=True)
            (base / "cgroup.subtree_control").write_text("+pids")
            tree = _CgroupTree("cgroup-v2", base)
        elif (root / "pids" / "cgroup.procs").is_file():
            base = root / "pids" / "heron"
            base.mkdir(exist_ok=True)
            tree = _CgroupTree("cgroup-v1", base)
        else:
            return None
    except OSError:
        return None
    for stale in base.glob("run-*"):  # groups left by heron processes that ended abruptly
        owner = stale.name.split("-")[1]
        if owner.isdigit() and not _alive(int(owner)):
            with contextlib.suppress(OSError):
                stale.rmdir()
    return tree


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Capture(asyncio.SubprocessProtocol):
    """Keeps up to `limit` bytes per stream and counts the rest."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self.limit = limit
        self.kept: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}
        self.total: dict[int, int] = {1: 0, 2: 0}
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.total[fd] += len(data)
        kept = self.kept[fd]
        room = self.limit - len(kept)
        if room > 0:
            kept += data[:room]

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


def _rlimit_pairs(limits: ResourceLimits, nproc: bool) -> list[tuple[int, tuple[int, int]]]:
    wanted: list[tuple[int, int | None, int]] = [
        # (resource, soft, extra hard headroom): CPU gets SIGXCPU first, SIGKILL a second later
        (resource.RLIMIT_CPU, limits.cpu_seconds, 1),
        (resource.RLIMIT_AS, limits.address_space_bytes, 0),
        (resource.RLIMIT_FSIZE, limits.file_size_bytes, 0),
        (resource.RLIMIT_NOFILE, limits.open_files, 0),
        (resource.RLIMIT_CORE, 0, 0),  # no core dumps of sandboxed commands in the workspace
    ]
    if nproc:
        wanted.append((resource.RLIMIT_NPROC, limits.max_processes, 0))
    pairs: list[tuple[int, tuple[int, int]]] = []
    for which, soft, headroom in wanted:
        if soft is None:
            continue
        _, hard_now = resource.getrlimit(which)
        hard = soft + headroom
        if hard_now != resource.RLIM_INFINITY:  # a child can only lower its hard limit
            hard = min(hard, hard_now)
        pairs.append((which, (min(soft, hard), hard)))
    return pairs


def _preexec(pairs: list[tuple[int, tuple[int, int]]], cgroup_fd: int) -> Callable[[], None]:
    def confine() -> None:
        if cgroup_fd >= 0:
            os.write(cgroup_fd, b"0")
        for which, pair in pairs:
            resource.setrlimit(which, pair)

    return confine


def _signal_group(pgid: int, group: _RunGroup | None, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    if group is not None:
        group.signal(sig)


class ProcessSandbox:
    """Runs commands as limited child processes (level `process`). See the module docstring.

    `cgroup_root` is where cgroups are mounted; `fallback_user` is the unprivileged account used
    to bind the process count when no cgroup is writable and heron runs as root.
    """

    def __init__(
        self,
        *,
        limits: ResourceLimits | None = None,
        cgroup_root: Path = Path("/sys/fs/cgroup"),
        fallback_user: str = "nobody",
    ) -> None:
        self.limits = limits or ResourceLimits()
        self._cgroups: _CgroupTree | None = None
        self._user: tuple[int, int] | None = None
        self.pids_limit: PidsLimit = "none"
        """The mechanism that binds `max_processes` for commands of this sandbox."""
        if self.limits.max_processes is None:
            return
        self._cgroups = probe_cgroup(cgroup_root)
        if self._cgroups is not None:
            self.pids_limit = self._cgroups.version
        elif os.geteuid() != 0:
            self.pids_limit = "rlimit"
        else:
            try:
                entry = pwd.getpwnam(fallback_user)
            except KeyError:
                raise SandboxUnavailable(
                    f"cannot bind the process count: no writable pids cgroup under {cgroup_root} "
                    f"and no user {fallback_user!r} to run commands as"
                ) from None
            self._user = (entry.pw_uid, entry.pw_gid)
            self.pids_limit = "uid-rlimit"

    @property
    def level(self) -> Literal["process"]:
        return "process"

    @property
    def network(self) -> bool:
        return True  # a plain process shares the host's network

    def metadata(self) -> dict[str, str]:
        """How this sandbox binds commands, as reported in every `RunResult`."""
        meta = {"sandbox": "process", "pids_limit": self.pids_limit, "network": "host"}
        if self._user is not None:
            meta["run_as_uid"] = str(self._user[0])
        return meta

    async def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout_s: float,
        stdin: bytes | None = None,
        pass_fds: Sequence[int] = (),
    ) -> RunResult:
        """Run `argv`; see `Sandbox.run`. Raises `OSError` when the program cannot be started."""
        if not argv:
            raise ValueError("argv is empty")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        limits = self.limits
        loop = asyncio.get_running_loop()
        group = (
            self._cgroups.new_group(limits.max_processes)
            if self._cgroups is not None and limits.max_processes is not None
            else None
        )
        pairs = _rlimit_pairs(limits, nproc=self.pids_limit in ("uid-rlimit", "rlimit"))
        extra: dict[str, Any] = {}
        if self._user is not None:
            extra = {"user": self._user[0], "group": self._user[1], "extra_groups": []}
        capture = _Capture(loop, limits.max_output_bytes)
        spawn = asyncio.ensure_future(
            loop.subprocess_exec(
                lambda: capture,
                *argv,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=dict(env),
                start_new_session=True,
                pass_fds=tuple(pass_fds),
                preexec_fn=_preexec(pairs, group.procs_fd if group is not None else -1),
                **extra,
            )
        )
        cancelled = False
        try:
            try:
                transport, _ = await asyncio.shield(spawn)
            except asyncio.CancelledError:
                # Cancelled mid-spawn, asyncio itself would wait for the pipes to close, that
                # is for every child to exit. Finish the spawn and stop the tree instead.
                cancelled = True
                transport, _ = await spawn
        except BaseException:
            if group is not None:
                await group.remove(limits.kill_grace_s)
            raise
        finally:
            if group is not None:
                group.close_procs_fd()
        started = time.monotonic()
        pgid = transport.get_pid()
        timed_out = False
        try:
            if cancelled:
                await self._stop(pgid, group, capture)
                raise asyncio.CancelledError
            if stdin is not None:
                pipe = transport.get_pipe_transport(0)
                assert isinstance(pipe, asyncio.WriteTransport)  # stdin is a pipe when given
                pipe.write(stdin)
                pipe.close()
            try:
                await asyncio.wait_for(asyncio.shield(capture.exited), timeout_s)
            except TimeoutError:
                timed_out = True
                await self._stop(pgid, group, capture)
            except asyncio.CancelledError:
                await self._stop(pgid, group, capture)
                raise
            duration = time.monotonic() - started
        finally:
            # Whatever the command left behind dies with it; then its pipes reach EOF.
            _signal_group(pgid, group, signal.SIGKILL)
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(capture.closed), limits.kill_grace_s)
            finally:
                transport.close()
                if group is not None:
                    await group.remove(limits.kill_grace_s)
        code = transport.get_returncode()
        return RunResult(
            exit_code=code if code is not None and code >= 0 else None,
            stdout=bytes(capture.kept[1]),
            stderr=bytes(capture.kept[2]),
            stdout_bytes=capture.total[1],
            stderr_bytes=capture.total[2],
            timed_out=timed_out,
            killed_by_signal=-code if code is not None and code < 0 else None,
            duration_s=duration,
            level="process",
            metadata=self.metadata(),
        )

    async def _stop(self, pgid: int, group: _RunGroup | None, capture: _Capture) -> None:
        """SIGTERM to the whole tree, SIGKILL after the grace period."""
        _signal_group(pgid, group, signal.SIGTERM)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(capture.exited), self.limits.kill_grace_s)
        finally:
            _signal_group(pgid, group, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(capture.exited), self.limits.kill_grace_s)
