"""A held start: a launcher that forks, then waits until heron has limited it.

A `preexec_fn` (join the run's pids cgroup, set the limits between `fork` and `exec`) makes
Python start a child with `fork`, whose cost grows with heron's resident memory (page tables):
about 3 ms at 50 MiB, 19 ms at 300 MiB on the machine `bench/sandbox_startup.py` was run on. A
launcher that can wait before it starts the command — bubblewrap, with `--info-fd` and
`--block-fd` — needs none:

1. heron starts `/bin/sh` with `vfork`; the shell joins the run's pids cgroup (`JOIN`) and
   becomes the launcher, so the launcher and everything it forks are counted from the start
   (a cgroup namespace it makes is rooted at the run's cgroup, as with a `preexec_fn`);
2. the launcher forks the command's parent and reports it on `info_fd`
   (`{"child-pid": N, …}`), then waits on `block_fd`;
3. heron checks that the reported process is the launcher's own child, sets the run's limits on
   both processes (`prlimit`), and writes to `block_fd`: only then does the command start, so
   its limits hold from its first instruction.

A launcher that cannot be limited is killed before its block is closed (an EOF would let it go
on). What a `preexec_fn` would do inside the command's namespaces (the `process` level's
confinement) cannot be done this way: that level keeps its `preexec_fn`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from heron.sandbox.base import SandboxError

__all__ = ["JOIN", "Held", "Release"]

JOIN: Final = (
    'echo 0 > "$1" || { echo "heron: cannot join the pids cgroup of this run" >&2; exit 125; }; '
    'shift; exec "$@"'
)
"""`/bin/sh -c JOIN sh <cgroup.procs> <launcher…>`: join the cgroup, become the launcher."""

Limits = list[tuple[int, tuple[int, int]]]


@dataclass(frozen=True, slots=True)
class Held:
    """The launcher's side: `info_fd` (write end) for its report, `block_fd` (read end) to wait
    on. Both belong on the launcher's command line."""

    info_fd: int
    block_fd: int


class Release:
    """heron's side of a held start (see the module docstring)."""

    def __init__(self) -> None:
        self.info_read, info_write = os.pipe2(os.O_CLOEXEC)
        block_read, self.block_write = os.pipe2(os.O_CLOEXEC)
        self.held = Held(info_fd=info_write, block_fd=block_read)

    def close_child_ends(self) -> None:
        """After the spawn: the launcher has its copies."""
        for fd in (self.held.info_fd, self.held.block_fd):
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        """Close heron's ends (a launcher still waiting reads EOF and goes on: kill it first
        unless it was released)."""
        for fd in (self.info_read, self.block_write):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.info_read = self.block_write = -1

    async def go(
        self,
        launcher: int,
        limits: Limits,
        *,
        timeout_s: float,
        kill: Callable[[], None],
    ) -> None:
        """Limit the launcher (pid `launcher`) and its reported child, then release it. Returns
        without releasing when it ended before (nothing of the command ran: its own error is
        the result); raises `SandboxError` when it cannot be limited. Either way, a launcher
        not released is killed (`kill`) before heron's ends are closed."""
        released = False
        try:
            try:
                child = await self._child_pid(timeout_s)
            except TimeoutError:
                raise SandboxError("the launcher did not start within the timeout") from None
            parent = None if child is None else _parent_of(child)
            if child is None or parent is None:
                return  # it ended before forking, or meanwhile
            if parent != launcher:  # heron limits only what the launcher it started forked
                raise SandboxError(f"the launcher reported process {child}, not its own child")
            try:
                for pid in (launcher, child):
                    for which, pair in limits:
                        resource.prlimit(pid, which, pair)
                os.write(self.block_write, b"1")
            except ProcessLookupError:
                return  # it ended meanwhile: nothing ran
            except OSError as exc:
                raise SandboxError(f"the command could not be confined: {exc}") from exc
            released = True
        finally:
            if not released:
                kill()
            self.close()

    async def _child_pid(self, timeout_s: float) -> int | None:
        """The pid the launcher reports (None: it ended before reporting one)."""
        loop = asyncio.get_running_loop()
        found: asyncio.Future[int | None] = loop.create_future()
        buffer = bytearray()

        def readable() -> None:
            chunk = os.read(self.info_read, 65536)
            buffer.extend(chunk)
            try:
                info = json.loads(buffer) if chunk else None
            except ValueError:
                return  # the launcher writes its JSON in pieces
            loop.remove_reader(self.info_read)
            pid = info.get("child-pid") if isinstance(info, dict) else None
            found.set_result(pid if isinstance(pid, int) and pid > 0 else None)

        loop.add_reader(self.info_read, readable)
        try:
            return await asyncio.wait_for(found, timeout_s)
        finally:
            loop.remove_reader(self.info_read)


def _parent_of(pid: int) -> int | None:
    """The parent of process `pid` (None when there is no such process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[1])
