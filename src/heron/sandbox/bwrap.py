"""`BwrapSandbox`: bubblewrap namespaces around a limited process (level `bwrap`).

Inside the sandbox a command sees:

- `/usr` (and `/bin`, `/sbin`, `/lib*` as on the host) **read-only**, and a minimal `/etc`
  (accounts, name service, TLS roots, time zone, dynamic linker, Debian alternatives); the
  rest of the root is read-only and empty;
- the agent workspace, writable, at the same path as on the host (so paths in output match);
  read-only instead (`--ro-bind`) in the twin `with_read_only_workspace()` gives, for an
  agent that may only read it (a sub-agent spawned without write access);
- a private, empty `/tmp`, its own `/proc` and a minimal `/dev`;
- its own PID namespace (it cannot see or signal heron or other commands; when the command
  exits every process it started dies with the namespace), its own IPC and UTS namespaces;
- no network by default: its own network namespace, whose loopback interface reaches only the
  sandbox itself (`network="none"`; `"loopback"` is the same here, bubblewrap always brings
  that interface up); `network="host"` shares the host's network, its loopback included;
- no capabilities (`--cap-drop ALL`), a new session (no terminal injection), and
  `--die-with-parent` so the sandbox cannot outlive heron.

The environment is exactly the one passed to `run`, plus `PWD` (bubblewrap sets it when it
changes directory). Resource limits and timeouts are those of `ProcessSandbox`, applied to the
bubblewrap processes and inherited by everything inside: bubblewrap starts held
(`heron.sandbox.held`: in the run's pids cgroup from the start, its two processes limited with
`prlimit` before it may start the command), so heron starts it with `vfork`, whose cost does
not grow with heron's memory (a setuid `bwrap`, whose processes heron may not limit, or one
without `--info-fd` and `--block-fd`, starts with a `preexec_fn` as the `process` level does).
Under the unprivileged-user fallback for the process count, bubblewrap itself runs as that user
and needs unprivileged user namespaces. The Python installation heron runs on is bound read-only
as well (`expose_python`), so `run_python` works inside the sandbox.

With `spares=True` each command line's next bubblewrap is built after a call and waits for the
next one (`heron.sandbox.spare`: used by one command, containing the same; `aclose()` stops
them).

A missing `bwrap` binary is a `SandboxUnavailable` error at construction, never a silent
fallback to a weaker level. A virtualenv is not a sandbox (see `heron.sandbox.base`).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
import shutil
import stat
import subprocess
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from heron._support.own_paths import state_dirs_inside
from heron.sandbox.base import NetworkMode, ResourceLimits, RunResult, SandboxUnavailable
from heron.sandbox.held import Held
from heron.sandbox.process import PidsLimit, ProcessSandbox, check_network_mode, python_roots
from heron.sandbox.spare import Line, Spare, Spares, launch_spare

__all__ = ["BwrapSandbox"]

_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC = (
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "host.conf",
    "localtime",
    "timezone",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",  # Debian's /usr/bin/awk etc. are links through here
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "mime.types",
)
_NETWORK_ETC = ("resolv.conf", "gai.conf", "services", "protocols")


class BwrapSandbox:
    """Runs commands inside bubblewrap (level `bwrap`). See the module docstring.

    `workspace` is the only writable tree. `network` is the default network mode (`none`
    unless the deployment chooses otherwise). `extra_ro_binds` adds host paths read-only at
    the same location (tool chains outside `/usr`, for example). `user` is the unprivileged
    account bubblewrap runs as when no pids cgroup is writable and heron runs as root.
    """

    def __init__(
        self,
        *,
        workspace: Path,
        limits: ResourceLimits | None = None,
        network: NetworkMode = "none",
        bwrap: str | None = None,
        extra_ro_binds: Sequence[Path] = (),
        expose_python: bool = True,
        cgroup_root: Path = Path("/sys/fs/cgroup"),
        user: str | int = "nobody",
        read_only_workspace: bool = False,
        spares: bool = False,
    ) -> None:
        found = bwrap or shutil.which("bwrap")
        if found is None or not Path(found).is_file():
            raise SandboxUnavailable(
                "bubblewrap (`bwrap`) is not installed, so the `bwrap` sandbox level cannot run; "
                "install it (Debian/Ubuntu: `apt-get install bubblewrap`) or choose the "
                "`process` level explicitly"
            )
        self.bwrap = found
        self.workspace = workspace.resolve()
        self._network = check_network_mode(network)
        self._inner = ProcessSandbox(
            limits=limits, cgroup_root=cgroup_root, user=user, confine=False, expose_python=False
        )
        binds = [Path(p) for p in extra_ro_binds]
        if expose_python:
            binds += python_roots()
        self._ro_binds = _dedupe(binds)
        self._tmp_size = _supports_tmpfs_size(found)
        self._held = _supports_held_start(found)
        self._read_only_workspace = read_only_workspace
        if spares and not expose_python:
            raise ValueError("spare sandboxes run heron's Python inside: they need expose_python")
        self._spares = Spares() if spares else None

    @property
    def level(self) -> Literal["bwrap"]:
        return "bwrap"

    @property
    def network(self) -> bool:
        return self._network == "host"

    @property
    def network_mode(self) -> NetworkMode:
        return self._network

    def with_network(self, mode: NetworkMode) -> BwrapSandbox:
        """The same sandbox (limits, binds, cgroups) with another default network."""
        twin = copy.copy(self)
        twin._network = check_network_mode(mode)
        return twin

    @property
    def read_only_workspace(self) -> bool:
        """Whether commands see the workspace read-only (`--ro-bind`)."""
        return self._read_only_workspace

    def with_read_only_workspace(self) -> BwrapSandbox:
        """The same sandbox with the workspace mounted read-only: every write under it fails
        in the kernel (`EROFS`), whatever the command does; `/tmp` stays writable."""
        twin = copy.copy(self)
        twin._read_only_workspace = True
        return twin

    @property
    def ro_binds(self) -> tuple[Path, ...]:
        """Host paths bound read-only besides the system directories (heron's Python, extras)."""
        return tuple(self._ro_binds)

    @property
    def limits(self) -> ResourceLimits:
        return self._inner.limits

    @property
    def pids_limit(self) -> PidsLimit:
        return self._inner.pids_limit

    @property
    def run_as_uid(self) -> int | None:
        """The uid bubblewrap runs as: the dedicated user when it binds the process count."""
        user = self._inner.user
        return user[0] if user is not None and self.pids_limit == "uid-rlimit" else None

    def metadata(self) -> dict[str, str]:
        return {**self._inner.metadata(), "sandbox": "bwrap", "network": self._network}

    def bwrap_args(self, cwd: Path, network: NetworkMode | None = None) -> list[str]:
        """The bubblewrap command line (without the command) for a run in `cwd`."""
        mode = self._network if network is None else check_network_mode(network)
        args = [
            self.bwrap,
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
        ]
        if mode != "host":
            args.append("--unshare-net")
        args += ["--ro-bind", "/usr", "/usr"]
        for name in _SYSTEM_DIRS:
            path = Path(name)
            if path.is_symlink():
                args += ["--symlink", str(path.readlink()), name]
            elif path.is_dir():
                args += ["--ro-bind", name, name]
        etc = _ETC + (_NETWORK_ETC if mode == "host" else ())
        for name in etc:
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        args += ["--proc", "/proc", "--dev", "/dev"]
        size = self.limits.tmp_size_bytes
        if size is not None and self._tmp_size:
            args += ["--size", str(size)]
        args += ["--tmpfs", "/tmp"]
        # Parents are mounted before children, so a read-only path inside the workspace stays
        # read-only and the workspace inside a read-only path stays writable.
        mounts = [(p, False) for p in self._ro_binds if p != self.workspace]
        mounts.append((self.workspace, not self._read_only_workspace))
        for path, writable in sorted(mounts, key=lambda m: len(m[0].parts)):
            read_only = "--ro-bind" if path == self.workspace else "--ro-bind-try"
            args += ["--bind" if writable else read_only, str(path), str(path)]
        for state in state_dirs_inside(self.workspace):  # heron's own: an empty, read-only view
            if state.is_dir():
                args += ["--tmpfs", str(state), "--remount-ro", str(state)]
        # The root itself is a tmpfs bubblewrap builds; make it read-only once it is populated.
        args += ["--remount-ro", "/", "--chdir", str(cwd)]
        return args

    def _checked_cwd(self, cwd: Path) -> Path:
        where = cwd.resolve()
        if not where.is_relative_to(self.workspace):
            raise ValueError(f"cwd {cwd} is outside the sandbox workspace {self.workspace}")
        return where

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
        """Run `argv` inside the sandbox; see `Sandbox.run`. `cwd` must be in the workspace."""
        if not argv:
            raise ValueError("argv is empty")
        where = self._checked_cwd(cwd)
        mode = self._network if network is None else check_network_mode(network)
        prefix = self.bwrap_args(where, mode)

        def cold() -> Awaitable[RunResult]:
            return self._inner._run(
                self._line(prefix, argv),
                cwd=where,
                env=env,
                timeout_s=timeout_s,
                stdin=stdin,
                pass_fds=pass_fds,
                network=None,
                held=self._held,
            )

        if self._spares is None:
            result = await cold()
        else:
            result = await self._spares.serve(
                tuple(prefix),
                argv,
                env,
                timeout_s=timeout_s,
                exact=stdin is None and not pass_fds,
                cold=cold,
                launch=functools.partial(self._launch_spare, prefix, where),
            )
        metadata = {**self.metadata(), "network": mode}
        return dataclasses.replace(result, level="bwrap", metadata=metadata)

    def _line(self, prefix: list[str], argv: Sequence[str]) -> Line:
        """bubblewrap's command line for `argv`: to be started held when it can be."""
        if not self._held:
            return [*prefix, "--", *argv]

        def held(start: Held) -> list[str]:
            fds = ["--info-fd", str(start.info_fd), "--block-fd", str(start.block_fd)]
            return [*prefix, *fds, "--", *argv]

        return held

    def _launch_spare(self, prefix: list[str], where: Path) -> Awaitable[Spare]:
        line = functools.partial(self._line, prefix)
        return launch_spare(self._inner, line, cwd=where, held=self._held)

    async def prepare(self, *, cwd: Path | None = None, network: NetworkMode | None = None) -> bool:
        """Start the spare sandbox for runs in `cwd` (default: the workspace) with `network`,
        unless there is one, and wait until it is ready (False: this sandbox has no spares,
        or the spare failed). Runs start their next spare themselves; this is for the first."""
        if self._spares is None:
            return False
        where = self._checked_cwd(cwd or self.workspace)
        prefix = self.bwrap_args(where, self._network if network is None else network)
        return await self._spares.prepare(
            tuple(prefix), functools.partial(self._launch_spare, prefix, where)
        )

    async def aclose(self) -> None:
        """Stop the spare sandboxes (of this sandbox and its twins); later runs start cold."""
        if self._spares is not None:
            await self._spares.aclose()


@functools.cache
def _supports_tmpfs_size(bwrap: str) -> bool:
    """bubblewrap 0.7 and later take `--size` for a tmpfs."""
    try:
        shown = subprocess.run([bwrap, "--help"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return b"--size" in shown.stdout + shown.stderr


@functools.cache
def _supports_held_start(bwrap: str) -> bool:
    """Whether heron can start `bwrap` held: it has `--info-fd` and `--block-fd`, and is not
    setuid (heron could not limit the processes of a setuid launcher after they started)."""
    try:
        if os.stat(bwrap).st_mode & (stat.S_ISUID | stat.S_ISGID):
            return False
        shown = subprocess.run([bwrap, "--help"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    text = shown.stdout + shown.stderr
    return b"--info-fd" in text and b"--block-fd" in text


def _dedupe(paths: Sequence[Path]) -> list[Path]:
    """Drop duplicates and paths inside another bound path; parents first. Paths keep the name
    they are given (bubblewrap binds what a symbolic link points to at the link's place)."""
    unique = sorted({p.absolute() for p in paths}, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in unique:
        if not any(path.is_relative_to(parent) for parent in kept):
            kept.append(path)
    return kept
