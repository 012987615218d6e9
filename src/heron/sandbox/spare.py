"""Spare bubblewraps: a sandbox built before its call, used by one command and then gone.

Most of a bubblewrap call is the kernel's work before the command runs: joining the run's pids
cgroup, the namespaces and the mounts (`docs/performance.md`). A spare does that work between
calls: it is started exactly as a cold call's bubblewrap (the same command line, held start,
pids cgroup and limits; `heron.sandbox.process`), but runs `heron.sandbox.waiter` in the place
of the command. At the call heron writes the command (arguments and environment) into the
waiter's channel and the waiter `exec`s it: the command is the process bubblewrap started, in
namespaces, a `/tmp`, a PID tree and a cgroup nothing else ever used, and from then on the call
is a cold call's (`ProcessSandbox._finish`: timeout, cancellation, output, clean-up).

A spare is used once. `Spares` keeps at most one per bubblewrap command line (which spells out
the network, the workspace's writability, the binds and the working directory), so a call is
only given a spare started with the command line it would have run cold. A call a spare cannot
reproduce exactly runs cold: with `stdin` or `pass_fds` (the spare's descriptors are fixed when
it starts), with an environment variable whose name is not a shell name (the cold start passes
the environment through `/bin/sh`, which drops those), or too large for the channel. A spare
not ready yet, or one that ended (killed, or its start failed), is not waited for: the call
runs cold. The next spare for a command line starts after a call with it returns, so it does
not compete with the call for the CPU. `Spares.aclose` stops them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from pathlib import Path

from heron.sandbox import waiter
from heron.sandbox.base import RunResult, SandboxError
from heron.sandbox.held import Held
from heron.sandbox.process import ProcessSandbox, Started

__all__ = ["Spare", "Spares", "launch_spare"]

Line = Sequence[str] | Callable[[Held], Sequence[str]]
"""A launcher's command line as `ProcessSandbox._launch` takes it."""

_START_TIMEOUT_S = 30.0
_CHANNEL_BYTES = 1 << 20  # the pipe size asked for; a command that does not fit runs cold
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@functools.cache
def _waiter_source() -> bytes:
    return Path(waiter.__file__).read_bytes()


def waiter_argv(ready: int, channel: int) -> list[str]:
    """The waiter's command line (heron's own interpreter, bound read-only in the sandbox)."""
    return [sys.executable, "-I", "-S", "-c", waiter.BOOT, str(ready), str(channel)]


def command_bytes(argv: Sequence[str], env: Mapping[str, str]) -> bytes | None:
    """What the waiter reads for `argv` with `env`; None when a spare cannot run it exactly
    as a cold start would (the cold start reports what is wrong with it)."""
    names_ok = all(_SHELL_NAME.fullmatch(name) for name in env)
    args = [os.fsencode(a) for a in argv]
    entries = [os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items()]
    if not names_ok or any(b"\0" in part for part in (*args, *entries)):
        return None
    return b"\0".join([str(len(args)).encode(), *args, *entries])


class Spare:
    """One started bubblewrap whose waiter takes one command (see the module docstring)."""

    def __init__(self, inner: ProcessSandbox, started: Started, ready: int, channel: int) -> None:
        self._inner = inner
        self._started = started
        self._ready_fd = ready
        self._channel = channel
        with contextlib.suppress(OSError):  # the default 64 KiB where the kernel refuses more
            fcntl.fcntl(channel, fcntl.F_SETPIPE_SZ, _CHANNEL_BYTES)
        self.capacity = fcntl.fcntl(channel, fcntl.F_GETPIPE_SZ)
        self._heard = bytearray()
        self._ended = False
        self._stopped = False
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.ready: asyncio.Future[bool] = loop.create_future()
        """True once the waiter waits for its command; False when it ended before."""
        os.set_blocking(ready, False)
        loop.add_reader(ready, self._readable)

    def _readable(self) -> None:
        with contextlib.suppress(BlockingIOError):
            chunk = os.read(self._ready_fd, 64)
            self._heard += chunk
            if not chunk:
                self._ended = True
                self.loop.remove_reader(self._ready_fd)
            if not self.ready.done() and (chunk or self._ended):
                self.ready.set_result(b"r" in self._heard)

    @property
    def failed(self) -> bool:
        """It ended before its waiter was ready, and not because heron stopped it."""
        return self.ready.done() and not self.ready.result() and not self._stopped

    @property
    def usable(self) -> bool:
        """Ready, and neither its waiter nor its bubblewrap has ended."""
        ready = self.ready.done() and self.ready.result()
        return ready and not self._ended and not self._started.capture.exited.done()

    async def run(self, command: bytes, *, timeout_s: float) -> RunResult | None:
        """Run `command` (`command_bytes`) as a cold call would; None when the spare ended
        before its waiter took the command (nothing of it ran: run it cold)."""
        self._stopped = True
        try:
            os.write(self._channel, command)  # fits: the pipe is empty and large enough
        except OSError:
            await self.stop()
            return None
        finally:
            self._close_channel()
        self._started.at = time.monotonic()
        try:
            result = await self._inner._finish(self._started, timeout_s=timeout_s, stdin=None)
        finally:
            self._close_ready()
        return result if b"x" in self._heard else None

    async def stop(self) -> None:
        """End the spare and everything in it, and delete its cgroup."""
        self._stopped = True
        self._close_channel()
        self._close_ready()
        await self._started.reap(self._inner.limits.kill_grace_s)

    def kill(self) -> None:
        """`stop` without awaiting (the event loop the spare belongs to has ended)."""
        self._stopped = True
        self._close_channel()
        self._started.kill()
        if self._ready_fd >= 0:
            os.close(self._ready_fd)
            self._ready_fd = -1

    def _close_channel(self) -> None:
        if self._channel >= 0:
            os.close(self._channel)
            self._channel = -1

    def _close_ready(self) -> None:
        if self._ready_fd < 0:
            return
        with contextlib.suppress(OSError):  # what the waiter said last, before it exec'd
            while chunk := os.read(self._ready_fd, 64):
                self._heard += chunk
        self.loop.remove_reader(self._ready_fd)
        os.close(self._ready_fd)
        self._ready_fd = -1
        if not self.ready.done():
            self.ready.set_result(False)


async def launch_spare(
    inner: ProcessSandbox, line: Callable[[list[str]], Line], *, cwd: Path, held: bool
) -> Spare:
    """Start a spare: `line(waiter)` is the cold call's launcher command line with the waiter
    in the place of the command."""
    ready_read, ready_write = os.pipe2(os.O_CLOEXEC)
    channel_read, channel_write = os.pipe2(os.O_CLOEXEC)
    try:
        os.write(channel_write, _waiter_source())  # far below the pipe's 64 KiB
        started = await inner._launch(
            line(waiter_argv(ready_write, channel_read)),
            cwd=cwd,
            env={},
            stdin_pipe=False,
            pass_fds=(ready_write, channel_read),
            network=None,
            held=held,
            timeout_s=_START_TIMEOUT_S,
        )
    except BaseException:
        os.close(ready_read)
        os.close(channel_write)
        raise
    finally:
        os.close(ready_write)
        os.close(channel_read)
    return Spare(inner, started, ready_read, channel_write)


class Spares:
    """At most one spare per key (a bubblewrap command line), `most` keys in all."""

    def __init__(self, most: int = 4) -> None:
        self.most = most
        self._idle: dict[Hashable, Spare] = {}
        self._starting: dict[Hashable, asyncio.Task[None]] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self._broken: set[Hashable] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self.served = 0
        """Calls a spare ran."""
        self.started = 0
        """Spares started."""

    async def serve(
        self,
        key: Hashable,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        timeout_s: float,
        exact: bool,
        cold: Callable[[], Awaitable[RunResult]],
        launch: Callable[[], Awaitable[Spare]],
    ) -> RunResult:
        """Run the call in the spare for `key` when there is a usable one (and `exact`: the
        call has no stdin or descriptors of its own), else `cold()`; then start the next."""
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        command = command_bytes(argv, env) if exact else None
        spare = self._take(key) if command is not None else None
        result = None
        if spare is not None and command is not None and len(command) <= spare.capacity:
            result = await spare.run(command, timeout_s=timeout_s)
            self.served += result is not None
        elif spare is not None:
            self._discard(spare)
        if result is None:
            result = await cold()
        self._refill(key, launch)
        return result

    async def prepare(self, key: Hashable, launch: Callable[[], Awaitable[Spare]]) -> bool:
        """Start the spare for `key` unless there is one; wait until it is ready (True) or
        failed (False). Cancelling the wait leaves the start to the pool."""
        self._refill(key, launch)
        starting = self._starting.get(key)
        if starting is not None:
            await asyncio.shield(starting)
        spare = self._idle.get(key)
        return spare is not None and await asyncio.shield(spare.ready)

    async def aclose(self) -> None:
        """Stop every spare, those still starting included. The pool starts no more."""
        self._own_loop()
        self._closed = True
        starting = list(self._starting.values())
        for task in starting:
            task.cancel()
        await asyncio.gather(*starting, return_exceptions=True)
        idle, self._idle = list(self._idle.values()), {}
        await asyncio.gather(*(spare.stop() for spare in idle), *self._stopping)

    def _take(self, key: Hashable) -> Spare | None:
        self._own_loop()
        spare = self._idle.get(key)
        if spare is None or not spare.ready.done():
            return None  # not ready yet: a cold start is sooner
        del self._idle[key]
        if spare.usable:
            return spare
        self._discard(spare)
        return None

    def _refill(self, key: Hashable, launch: Callable[[], Awaitable[Spare]]) -> None:
        self._own_loop()
        if self._closed or key in self._broken or key in self._idle or key in self._starting:
            return
        if len(self._idle) + len(self._starting) >= self.most:
            if not self._idle:
                return
            oldest = next(iter(self._idle))
            self._discard(self._idle.pop(oldest))
        self._starting[key] = asyncio.get_running_loop().create_task(self._start(key, launch))

    async def _start(self, key: Hashable, launch: Callable[[], Awaitable[Spare]]) -> None:
        try:
            spare = await launch()
        except (SandboxError, OSError):
            self._broken.add(key)  # as below
            return
        finally:
            self._starting.pop(key, None)
        self.started += 1
        if self._closed:
            await spare.stop()
            return
        self._idle[key] = spare
        spare.ready.add_done_callback(functools.partial(self._judge, key, spare))

    def _judge(self, key: Hashable, spare: Spare, _: object) -> None:
        if spare.failed:  # it would fail the same way each time: this key runs cold from now
            self._broken.add(key)

    def _discard(self, spare: Spare) -> None:
        task = asyncio.get_running_loop().create_task(spare.stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    def _own_loop(self) -> None:
        """Spares belong to the event loop that started them; on another, the old are killed."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        for spare in self._idle.values():
            spare.kill()
        self._idle, self._starting, self._stopping = {}, {}, set()
        self._loop = loop
