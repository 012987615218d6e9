"""`ProcessSandbox`: a command in its own session, confined by the kernel, under resource limits
and a timeout.

What binds, and how:

- **heron itself** (environment, memory, configuration, home): the command gets exactly the
  environment heron passes. With namespaces (as root, or as a normal user where user
  namespaces are allowed) it runs in its own mount namespace; as root it runs as a dedicated
  unprivileged user (`nobody` by default) that cannot read `/proc/<heron>/environ` or
  `/proc/<heron>/mem`, cannot signal heron, and sees a `/proc` mounted with `hidepid` where
  heron's processes do not exist. Directories that user may not enter (`/root`, private
  homes) are replaced by empty ones, with only the workspace and heron's Python bound back.
  See `heron.sandbox.confine` for every step and what happens when one is unavailable.
- **Files**: the workspace is the only writable tree. As root it is bound idmapped, so the
  dedicated user owns what heron owns there (files it creates belong to heron's user on
  disk); outside it the user's own permissions refuse writes, and Landlock (where the kernel
  has it) refuses every write outside the workspace and the private `/tmp`, `/var/tmp` and
  `/dev/shm` whatever the permissions say.
- **CPU, memory, file size, open files**: `setrlimit` in the child between `fork` and `exec`
  (a `preexec_fn`), so the limits hold from the command's first instruction.
- **Process count**: RLIMIT_NPROC does not bind root, so the count is limited by a per-run
  cgroup with `pids.max` when the cgroup file system is writable (cgroup v2, or the v1 `pids`
  hierarchy; `heron.sandbox.cgroups`). Otherwise, when heron runs as root, RLIMIT_NPROC of
  the dedicated user binds it; as a normal user RLIMIT_NPROC binds directly (it counts every
  process of that user).
  `RunResult.metadata["pids_limit"]` says which one bound.
- **Network**: the host's by default (`network="host"`); `none` and `loopback` put the command
  in its own network namespace where the kernel allows it, and raise `SandboxUnavailable`
  where it does not.
- **Stopping**: the command leads a new session and process group. On timeout or
  cancellation heron sends SIGTERM to the group (and every process in the run's cgroup), waits
  the grace period, then sends SIGKILL. When the command exits by itself, whatever it left
  behind (background children, daemons) is killed too, so no process outlives its call; with a
  cgroup this includes processes that escaped into another session. The command also gets
  SIGKILL if heron dies.

`heron.sandbox.containment.containment_report()` states for a sandbox what is contained here
and how. `BwrapSandbox` adds a read-only view of the system and its own process tree. A
virtualenv is not a sandbox (see `heron.sandbox.base`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import pwd
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from heron._support.own_paths import state_dirs_inside
from heron.sandbox.base import (
    NETWORK_MODES,
    NetworkMode,
    ResourceLimits,
    RunResult,
    SandboxError,
    SandboxUnavailable,
)
from heron.sandbox.cgroups import CgroupTree, RunGroup, probe_cgroup
from heron.sandbox.held import JOIN, Held, Release

if TYPE_CHECKING:
    from heron.sandbox.confine import Confinement, HostFacts

__all__ = ["Identity", "PidsLimit", "ProcessSandbox", "Started", "python_roots"]

PidsLimit = Literal["cgroup-v2", "cgroup-v1", "uid-rlimit", "rlimit", "none"]
"""How the process count is bound: a cgroup, RLIMIT_NPROC under a dedicated unprivileged user,
RLIMIT_NPROC of heron's own (non-root) user, or not at all (`max_processes=None`)."""


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


def _preexec(
    pairs: list[tuple[int, tuple[int, int]]],
    cgroup_fd: int,
    plan: Confinement | None,
    report_fd: int,
) -> Callable[[], None]:
    def confine() -> None:
        if cgroup_fd >= 0:
            os.write(cgroup_fd, b"0")
        if plan is not None:
            plan.apply(report_fd)
        for which, pair in pairs:
            resource.setrlimit(which, pair)

    return confine


@dataclass(slots=True)
class Started:
    """A command started (and released, when held) whose end heron has not awaited yet."""

    transport: asyncio.SubprocessTransport
    capture: _Capture
    group: RunGroup | None
    plan: Confinement | None
    mode: NetworkMode
    at: float
    """When the command was given its start (`time.monotonic()`): its duration counts from here."""

    @property
    def pid(self) -> int:
        """The launcher's pid, which leads the process group."""
        return self.transport.get_pid()

    def signal(self, sig: int) -> None:
        """`sig` to the process group and to every process in the run's cgroup."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)
        if self.group is not None:
            self.group.signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)

    async def reap(self, grace_s: float) -> None:
        """Kill whatever is left, wait (bounded) for the pipes to close, delete the cgroup."""
        self.kill()
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.capture.closed), grace_s)
        finally:
            self.transport.close()
            if self.group is not None:
                await self.group.remove(grace_s)


def python_roots() -> list[Path]:
    """The directories heron's own interpreter needs (venv, base installation, executable),
    under the names heron uses and the names they resolve to (a venv may be a symbolic link)."""
    named = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).parent]
    roots = [*named, *(p.resolve() for p in named), Path(sys.executable).resolve().parent]
    return [p for p in dict.fromkeys(roots) if not p.resolve().is_relative_to("/usr")]


def check_network_mode(mode: object) -> NetworkMode:
    if mode not in NETWORK_MODES:
        raise ValueError(f"network must be one of {', '.join(NETWORK_MODES)}, not {mode!r}")
    return mode


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a command runs as, for one writable tree."""

    run_as: tuple[int, int] | None
    """`(uid, gid)` of the dedicated user, or None: heron's own uid (without capabilities when
    heron is root)."""
    idmap_fd: int
    """The user namespace that idmaps the writable tree for `run_as` (-1: none)."""
    why: str
    """How this was decided, in words (for the containment report)."""


class ProcessSandbox:
    """Runs commands as confined, limited child processes (level `process`). See the module
    docstring and `heron.sandbox.confine`.

    `workspace` is the only writable tree; without one, each run's `cwd` is. `network` is the
    default network mode (`host`: shared; `none` / `loopback`: an own network namespace).
    `user` is the unprivileged account commands run as when heron runs as root. Directories
    that account may not enter are hidden, except the workspace, heron's Python
    (`expose_python`) and `extra_ro_binds` (read-only). `confine=False` keeps only the limits
    (bubblewrap, which confines on its own, runs that way).
    """

    def __init__(
        self,
        *,
        workspace: Path | None = None,
        limits: ResourceLimits | None = None,
        network: NetworkMode = "host",
        cgroup_root: Path = Path("/sys/fs/cgroup"),
        user: str | int = "nobody",
        confine: bool = True,
        extra_ro_binds: Sequence[Path] = (),
        expose_python: bool = True,
    ) -> None:
        self.limits = limits or ResourceLimits()
        self.workspace = workspace.resolve() if workspace is not None else None
        self._network = check_network_mode(network)
        self.confined = confine
        """Whether commands are confined (namespaces, identity, Landlock) or only limited."""
        self.facts: HostFacts | None = None
        """What the kernel allows (probed once per heron process); None when not confined."""
        if confine:
            from heron.sandbox.confine import HostFacts

            self.facts = HostFacts.probe()
        self._cgroups: CgroupTree | None = None
        self.user = _lookup_user(user) if os.geteuid() == 0 else None
        """`(uid, gid)` of the dedicated account when heron runs as root, else None."""
        self.user_problem = (
            None if self.user is not None or os.geteuid() != 0 else f"no user {user!r}"
        )
        exposed = [Path(p).resolve() for p in extra_ro_binds]
        if expose_python:
            exposed += python_roots()
        self.exposed = tuple(dict.fromkeys(exposed))
        """Paths kept reachable (read-only) although a parent directory is hidden."""
        self.pids_limit: PidsLimit = "none"
        """The mechanism that binds `max_processes` for commands of this sandbox."""
        self._plans: dict[tuple[Path, Path, str, tuple[Path, ...]], Confinement] = {}
        self._check_network(self._network)
        if self.limits.max_processes is None:
            return
        self._cgroups = probe_cgroup(cgroup_root)
        if self._cgroups is not None:
            self.pids_limit = self._cgroups.version
        elif os.geteuid() != 0:
            self.pids_limit = "rlimit"
        elif self.user is None:
            raise SandboxUnavailable(
                f"cannot bind the process count: no writable pids cgroup under {cgroup_root} "
                f"and {self.user_problem} to run commands as"
            )
        else:
            self.pids_limit = "uid-rlimit"

    @property
    def level(self) -> Literal["process"]:
        return "process"

    @property
    def network(self) -> bool:
        return self._network == "host"

    @property
    def network_mode(self) -> NetworkMode:
        return self._network

    def with_network(self, mode: NetworkMode) -> ProcessSandbox:
        """The same sandbox (limits, cgroups, identity) with another default network."""
        self._check_network(check_network_mode(mode))
        twin = copy.copy(self)
        twin._network = mode
        return twin

    def _check_network(self, mode: NetworkMode) -> None:
        if mode == "host":
            return
        if self.facts is None or not self.facts.network_namespace:
            why = "it is not confined" if self.facts is None else "; ".join(self.facts.problems)
            raise SandboxUnavailable(
                f"the `process` sandbox level cannot give commands network {mode!r} here "
                f"(no network namespace: {why or 'not allowed'}); use the `bwrap` level"
            )

    def metadata(self) -> dict[str, str]:
        """How this sandbox binds commands, as reported in every `RunResult`."""
        meta = {"sandbox": "process", "pids_limit": self.pids_limit, "network": self._network}
        if self.user is not None and (self.confined or self.pids_limit == "uid-rlimit"):
            meta["run_as_uid"] = str(self.user[0])
        return meta

    def identity(self, writable: Path) -> Identity:
        """Who commands with this writable tree run as (see `Identity`)."""
        facts = self.facts
        if os.geteuid() != 0:
            return Identity(None, -1, "heron's own user (heron is not root)")
        fallback = self.pids_limit == "uid-rlimit"
        if facts is None:
            if fallback:
                return Identity(self.user, -1, "the dedicated user (binds the process count)")
            return Identity(None, -1, "root (not confined)")
        if self.user is None:
            return Identity(None, -1, f"root without capabilities ({self.user_problem})")
        if not facts.namespaces:
            why = "; ".join(facts.problems) or "no mount namespace"
            if fallback:
                return Identity(self.user, -1, f"the dedicated user, no idmapped workspace ({why})")
            return Identity(None, -1, f"root without capabilities ({why})")
        from heron.sandbox.confine import idmap_problem, idmap_userns

        try:
            fd = idmap_userns(os.geteuid(), os.getegid(), *self.user)
        except (OSError, subprocess.SubprocessError) as exc:
            problem: str | None = f"no user namespace for idmapping ({exc})"
        else:
            problem = idmap_problem(writable, fd)
        if problem is None:
            return Identity(self.user, fd, "the dedicated user, workspace idmapped")
        if fallback:
            return Identity(self.user, -1, f"the dedicated user ({problem})")
        return Identity(None, -1, f"root without capabilities ({problem})")

    def plan(self, cwd: Path, network: NetworkMode | None = None) -> Confinement | None:
        """The confinement of a run in `cwd` (None when this sandbox does not confine)."""
        if self.facts is None:
            return None
        from heron.sandbox.confine import Confinement

        writable = self.workspace or cwd.resolve()
        if writable == Path("/"):
            raise ValueError("a sandbox's writable tree cannot be `/`; give it a workspace")
        mode = network or self._network
        hidden = tuple(d for d in state_dirs_inside(writable) if d.is_dir())
        key = (writable, cwd.resolve(), mode, hidden)
        if key not in self._plans:
            if len(self._plans) > 64:
                self._plans.clear()
            who = self.identity(writable)
            self._plans[key] = Confinement.plan(
                self.facts,
                writable=writable,
                cwd=key[1],
                exposed=self.exposed,
                hidden=hidden,
                network=mode,
                run_as=who.run_as,
                idmap_fd=who.idmap_fd,
                private_size_bytes=self.limits.tmp_size_bytes,
            )
        return self._plans[key]

    async def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout_s: float,
        stdin: bytes | None = None,
        pass_fds: Sequence[int] = (),
        network: NetworkMode | None = None,
    ) -> RunResult:
        """Run `argv`; see `Sandbox.run`. Raises `OSError` when the program cannot be started,
        `SandboxError` when the command could not be confined."""
        return await self._run(
            argv,
            cwd=cwd,
            env=env,
            timeout_s=timeout_s,
            stdin=stdin,
            pass_fds=pass_fds,
            network=network,
        )

    async def _run(
        self,
        argv: Sequence[str] | Callable[[Held], Sequence[str]],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout_s: float,
        stdin: bytes | None,
        pass_fds: Sequence[int],
        network: NetworkMode | None,
        held: bool = False,
    ) -> RunResult:
        """`run`; with `held`, `argv(held)` is a launcher's command line, started held
        (`heron.sandbox.held`; only without confinement, which needs a `preexec_fn`)."""
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        started = await self._launch(
            argv,
            cwd=cwd,
            env=env,
            stdin_pipe=stdin is not None,
            pass_fds=pass_fds,
            network=network,
            held=held,
            timeout_s=timeout_s,
        )
        return await self._finish(started, timeout_s=timeout_s, stdin=stdin)

    async def _launch(
        self,
        argv: Sequence[str] | Callable[[Held], Sequence[str]],
        *,
        cwd: Path,
        env: Mapping[str, str],
        stdin_pipe: bool,
        pass_fds: Sequence[int],
        network: NetworkMode | None,
        held: bool,
        timeout_s: float,
    ) -> Started:
        """Start `argv` limited (and released, when `held`); a cancellation or an error here
        leaves nothing running."""
        if not argv:
            raise ValueError("argv is empty")
        mode = self._network if network is None else check_network_mode(network)
        self._check_network(mode)
        plan = self.plan(cwd, mode)
        limits = self.limits
        loop = asyncio.get_running_loop()
        group = (
            self._cgroups.new_group(limits.max_processes)
            if self._cgroups is not None and limits.max_processes is not None
            else None
        )
        pairs = _rlimit_pairs(limits, nproc=self.pids_limit in ("uid-rlimit", "rlimit"))
        extra: dict[str, Any] = {}
        if plan is None and self.pids_limit == "uid-rlimit" and self.user is not None:
            extra = {"user": self.user[0], "group": self.user[1], "extra_groups": []}
        release = None
        if held:
            assert callable(argv) and plan is None
            release = Release()
            argv = argv(release.held)
            pass_fds = (*pass_fds, release.held.info_fd, release.held.block_fd)
            if group is not None:
                group.close_procs_fd()
                argv = ["/bin/sh", "-c", JOIN, "heron-sandbox", str(group.procs_path), *argv]
        assert not callable(argv)
        report_read, report_write = os.pipe2(os.O_CLOEXEC)
        capture = _Capture(loop, limits.max_output_bytes)
        spawn = asyncio.ensure_future(
            loop.subprocess_exec(
                lambda: capture,
                *argv,
                stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=dict(env),
                start_new_session=True,
                pass_fds=tuple(pass_fds),
                preexec_fn=None
                if release is not None
                else _preexec(
                    pairs, group.procs_fd if group is not None else -1, plan, report_write
                ),
                **extra,
            )
        )
        cancelled = False
        try:
            try:
                try:
                    transport, _ = await asyncio.shield(spawn)
                except asyncio.CancelledError:
                    # Cancelled mid-spawn, asyncio itself would wait for the pipes to close,
                    # that is for every child to exit. Finish the spawn and stop the tree.
                    cancelled = True
                    transport, _ = await spawn
            except subprocess.SubprocessError as exc:
                os.close(report_write)
                report_write = -1
                detail = os.read(report_read, 4096).decode(errors="replace") or str(exc)
                raise SandboxError(f"the command could not be confined: {detail}") from exc
        except BaseException:
            if release is not None:
                release.close()
            if group is not None:
                await group.remove(limits.kill_grace_s)
            raise
        finally:
            if release is not None:
                release.close_child_ends()
            if group is not None:
                group.close_procs_fd()
            os.close(report_read)
            if report_write >= 0:
                os.close(report_write)
        started = Started(transport, capture, group, plan, mode, time.monotonic())
        try:
            if release is not None:
                if cancelled:
                    started.kill()
                    release.close()
                else:
                    await release.go(started.pid, pairs, timeout_s=timeout_s, kill=started.kill)
            if cancelled:
                raise asyncio.CancelledError
        except BaseException as exc:
            try:
                if isinstance(exc, asyncio.CancelledError):
                    await self._stop(started)
            finally:
                await started.reap(limits.kill_grace_s)
            raise
        return started

    async def _finish(
        self, started: Started, *, timeout_s: float, stdin: bytes | None
    ) -> RunResult:
        """Feed `stdin`, wait for the command within `timeout_s`, clean up, report."""
        capture = started.capture
        timed_out = False
        try:
            if stdin is not None:
                pipe = started.transport.get_pipe_transport(0)
                assert isinstance(pipe, asyncio.WriteTransport)  # stdin is a pipe when given
                pipe.write(stdin)
                pipe.close()
            try:
                await asyncio.wait_for(asyncio.shield(capture.exited), timeout_s)
            except TimeoutError:
                timed_out = True
                await self._stop(started)
            except asyncio.CancelledError:
                await self._stop(started)
                raise
            duration = time.monotonic() - started.at
        finally:
            # Whatever the command left behind dies with it; then its pipes reach EOF.
            await started.reap(self.limits.kill_grace_s)
        code = started.transport.get_returncode()
        plan = started.plan
        metadata = {**self.metadata(), "network": started.mode}
        if plan is not None:
            metadata["confinement"] = ",".join(plan.tags) or "limits only"
            if plan.run_as is None:
                metadata.pop("run_as_uid", None)
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
            metadata=metadata,
        )

    async def _stop(self, started: Started) -> None:
        """SIGTERM to the whole tree, SIGKILL after the grace period."""
        exited, grace = started.capture.exited, self.limits.kill_grace_s
        started.signal(signal.SIGTERM)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(exited), grace)
        finally:
            started.kill()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(exited), grace)


def _lookup_user(user: str | int) -> tuple[int, int] | None:
    try:
        entry = pwd.getpwuid(user) if isinstance(user, int) else pwd.getpwnam(user)
    except KeyError:
        if isinstance(user, int):
            return (user, user)  # a bare uid needs no account: the idmap does the rest
        return None
    return (entry.pw_uid, entry.pw_gid)
