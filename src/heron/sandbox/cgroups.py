"""Per-run pids cgroups: where heron may make them, one per run, and their end.

`probe_cgroup` finds a writable place under the cgroup file system (cgroup v2 with the `pids`
controller, or the v1 `pids` hierarchy) and removes the empty groups heron processes that
ended abruptly left there. `CgroupTree.new_group` makes one group per run with its `pids.max`;
the child joins it between `fork` and `exec` (or, started held, through `heron.sandbox.held`'s
`JOIN`), so everything the command forks is counted and can be signalled, including processes
that escaped into another session. `RunGroup.remove` kills what is left and deletes the group.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from heron.sandbox.base import SandboxError

__all__ = ["CgroupTree", "RunGroup", "pid_alive", "probe_cgroup"]

_run_numbers = itertools.count(1)
_SWEEP_FIRST_S = 0.0005  # cgroup membership changes asynchronously after a kill or an exit:
_SWEEP_STEP_S = 0.01  # retry soon (it is usually a fraction of a millisecond), then back off


@dataclass(frozen=True, slots=True)
class CgroupTree:
    """The directory under which heron creates one pids cgroup per run."""

    version: Literal["cgroup-v2", "cgroup-v1"]
    base: Path

    def new_group(self, max_pids: int) -> RunGroup:
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
        return RunGroup(path=path, procs_fd=procs_fd, kill_file=self.version == "cgroup-v2")


@dataclass(slots=True)
class RunGroup:
    """One run's pids cgroup."""

    path: Path
    procs_fd: int
    """Open in heron until the child has joined (it writes "0", meaning itself)."""
    kill_file: bool

    @property
    def procs_path(self) -> Path:
        return self.path / "cgroup.procs"

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
        step = _SWEEP_FIRST_S
        while True:
            self.signal(signal.SIGKILL)
            try:
                self.path.rmdir()
                return
            except OSError:
                if time.monotonic() >= end:
                    return  # left for the next start-up's sweep of empty groups
            await asyncio.sleep(step)
            step = min(step * 2, _SWEEP_STEP_S)


def probe_cgroup(root: Path) -> CgroupTree | None:
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
            tree = CgroupTree("cgroup-v2", base)
        elif (root / "pids" / "cgroup.procs").is_file():
            base = root / "pids" / "heron"
            base.mkdir(exist_ok=True)
            tree = CgroupTree("cgroup-v1", base)
        else:
            return None
    except OSError:
        return None
    if not os.access(base, os.W_OK | os.X_OK):  # made earlier by another user (root)
        return None
    for stale in base.glob("run-*"):  # groups left by heron processes that ended abruptly
        owner = stale.name.split("-")[1]
        if owner.isdigit() and not pid_alive(int(owner)):
            with contextlib.suppress(OSError):
                stale.rmdir()
    return tree


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists (one this user may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
