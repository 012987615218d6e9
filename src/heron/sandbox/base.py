"""The `Sandbox` protocol: how heron runs a command it does not trust.

Every execution tool (`shell`, `run_python`) goes through a `Sandbox`; the level is chosen per
agent in configuration. Two levels ship with heron:

- `process` (`ProcessSandbox`): a child process in its own session with resource limits (CPU
  seconds, address space, file size, open files, process count) and a wall-clock timeout that
  kills the whole process tree, confined by what the kernel offers without extra software:
  its own mount namespace with private temporary directories, a dedicated unprivileged user
  (when heron runs as root) that cannot see or read heron, and Landlock so that only the
  workspace is writable. It shares the host's network unless told otherwise.
- `bwrap` (`BwrapSandbox`): the same limits inside bubblewrap namespaces: a read-only view of
  the system, the workspace as the only writable tree, a private `/tmp`, its own process tree
  and no network unless the deployment allows it.

`heron.sandbox.containment` reports, for a sandbox in use, what it contains and how;
`docs/security.md` has the same table in prose.

A virtualenv is **not** a sandbox: it only chooses which Python packages import. Code running
in a virtualenv reads and writes everything the user can, opens sockets and starts processes.

A stronger back end (a microVM such as Firecracker or Cloud Hypervisor, or a remote container
service) plugs in by implementing this protocol: `run` boots or reuses a guest with the
workspace shared into it, runs `argv` there with the same limits and returns a `RunResult`.
Tools only ever see the protocol, so nothing else changes. A back end that cannot honour a
request (for example `pass_fds`, which `run_python` uses for its tool channel) raises
`SandboxUnavailable` rather than quietly doing less.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from heron.errors import HeronError

SandboxLevel = Literal["process", "bwrap"]
NetworkMode = Literal["none", "loopback", "host"]
"""What a command may reach. `none`: nothing outside the sandbox; `loopback`: in addition, a
loopback interface of the sandbox's own (servers the command starts itself; the host's
loopback services stay unreachable); `host`: the host's network, its loopback included."""
NETWORK_MODES: tuple[NetworkMode, ...] = ("none", "loopback", "host")

MIB = 1024 * 1024
GIB = 1024 * MIB

AGENT_ENV: Mapping[str, str] = {
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "MANPAGER": "cat",
    "SYSTEMD_PAGER": "cat",
    "NO_COLOR": "1",
    "TERM": "dumb",
    "CI": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "DEBIAN_FRONTEND": "noninteractive",
    "PIP_NO_INPUT": "1",
    "PYTHONUNBUFFERED": "1",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
}
"""Variables that keep command-line tools non-interactive and their output plain (the shell tool
hands them to every command)."""


class SandboxError(HeronError, RuntimeError):
    """A sandbox could not run a command (as opposed to the command failing)."""


class SandboxUnavailable(SandboxError):
    """The requested isolation cannot be provided here. heron never silently downgrades."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ResourceLimits:
    """Limits applied to every command a sandbox runs. `None` leaves a limit unset."""

    cpu_seconds: int | None = 120
    """CPU time (RLIMIT_CPU). The process gets SIGXCPU at the limit and SIGKILL a second later."""
    address_space_bytes: int | None = 4 * GIB
    """Virtual memory (RLIMIT_AS); allocations beyond it fail (Python raises MemoryError)."""
    file_size_bytes: int | None = 1 * GIB
    """Largest file the command may write (RLIMIT_FSIZE)."""
    open_files: int | None = 1024
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    max_processes: int | None = 256
    """Processes and threads the command may have at once (cgroup `pids.max`, else see
    `ProcessSandbox` for the fallback)."""
    max_output_bytes: int = 8 * MIB
    """Bytes kept per stream (stdout, stderr); the rest is counted and dropped."""
    tmp_size_bytes: int | None = 512 * MIB
    """Size of each private temporary directory (`/tmp`, `/var/tmp`, `/dev/shm`: a tmpfs)."""
    kill_grace_s: float = 2.0
    """Time between SIGTERM and SIGKILL when a command is stopped."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunResult:
    """What happened to one command. Output is raw bytes; decoding is the caller's choice."""

    exit_code: int | None
    """The exit status, or `None` when the process was ended by a signal."""
    stdout: bytes
    stderr: bytes
    stdout_bytes: int
    """How many bytes the command really wrote to stdout (`stdout` keeps at most the limit)."""
    stderr_bytes: int
    timed_out: bool
    """The wall-clock timeout expired and heron stopped the command."""
    killed_by_signal: int | None
    """The signal that ended the process (SIGTERM/SIGKILL after a timeout, SIGXCPU, ...)."""
    duration_s: float
    level: SandboxLevel
    metadata: Mapping[str, str] = field(default_factory=dict)
    """How the sandbox bound the command, e.g. `{"pids_limit": "cgroup-v2", "network": "none"}`."""

    @property
    def network(self) -> str:
        """The network the command had (`none`, `loopback`, `host`), as the sandbox reported."""
        return self.metadata.get("network", "unknown")

    @property
    def stdout_truncated(self) -> bool:
        return self.stdout_bytes > len(self.stdout)

    @property
    def stderr_truncated(self) -> bool:
        return self.stderr_bytes > len(self.stderr)

    @property
    def ok(self) -> bool:
        """Exited by itself with status 0."""
        return self.exit_code == 0 and not self.timed_out


@runtime_checkable
class Sandbox(Protocol):
    """Runs one command to completion under isolation and limits.

    Both shipped levels also offer `with_network(mode)`: the same sandbox with another default
    network, which a tool set uses to get its own (`heron.toolsets.shell.with_network`).
    """

    @property
    def level(self) -> SandboxLevel:
        """The isolation level this back end provides."""
        ...

    @property
    def network(self) -> bool:
        """Whether commands reach the host's network by default (`network_mode == "host"`)."""
        ...

    @property
    def network_mode(self) -> NetworkMode:
        """The network commands get unless a run asks for another."""
        ...

    @property
    def limits(self) -> ResourceLimits:
        """The limits every command runs under."""
        ...

    def with_network(self, mode: NetworkMode) -> Sandbox:
        """The same sandbox with another default network; `SandboxUnavailable` for a mode
        the back end cannot provide."""
        ...

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
        """Run `argv` in `cwd` with exactly `env` (nothing is inherited from heron).

        `stdin` is fed to the command and closed; without it the command reads /dev/null.
        `pass_fds` stay open in the command (same numbers). When `timeout_s` expires, or the
        awaiting task is cancelled, the whole process tree is stopped: SIGTERM, then SIGKILL
        after the grace period. Processes the command leaves behind are killed when it exits.
        `network` overrides `network_mode` for this run (the result's metadata says which one
        the command had); a mode the back end cannot provide raises `SandboxUnavailable`.
        """
        ...
