"""Spare bubblewraps (`heron.sandbox.spare`): a spared call is the cold call, for the command.

Every test runs the real bubblewrap, cold and from a spare side by side with the same limits
(a per-run pids cgroup where the host has one, so the held start through `/bin/sh` is the path
compared), and compares what the command sees and what the caller gets back. Leftovers are
checked directly: heron's children and the run cgroups of this process, once the call or the
close has returned (every wait inside is an event: an exit, a closed pipe, an emptied group).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import shutil
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from heron.sandbox import BwrapSandbox, ResourceLimits, RunResult
from heron.sandbox.spare import Spares, command_bytes

BOUND = 5.0
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/nonexistent", "Z_LAST": "a=b c"}
LIMITS = ResourceLimits(kill_grace_s=0.3, open_files=99, cpu_seconds=17)

PROBE = r"""
echo "argv: $0 $*"; echo "pid: $$ ppid: $PPID"; pwd; umask; id
env -0 | sort -z | tr '\0' '\n'
ls -l /proc/self/fd | tail -n +2 | awk '{print $9, $10, $11}'
grep -E '^(Sig(Blk|Ign|Cgt)|Cap|NoNewPrivs|Seccomp)' /proc/self/status
cat /proc/self/limits /proc/self/cgroup
stat -L -c '%F %t:%T' /dev/stdin; hostname; ls -A /tmp /dev/shm
cut -d' ' -f4- /proc/self/mountinfo  # the mounts, without their ids and anonymous devices
echo /proc/[0-9]*  # bubblewrap's init and this shell: nothing else
"""


def need_bwrap() -> None:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap (`bwrap`) is required for this test; install bubblewrap")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def cold(workspace: Path) -> BwrapSandbox:
    need_bwrap()
    return BwrapSandbox(workspace=workspace, limits=LIMITS)


@pytest.fixture
async def spared(workspace: Path) -> AsyncIterator[BwrapSandbox]:
    need_bwrap()
    sandbox = BwrapSandbox(workspace=workspace, limits=LIMITS, spares=True)
    try:
        yield sandbox
    finally:
        await sandbox.aclose()
    assert leftovers(sandbox) == []


def pool(sandbox: BwrapSandbox) -> Spares:
    assert sandbox._spares is not None
    return sandbox._spares


def leftovers(sandbox: BwrapSandbox) -> list[str]:
    """heron's child processes and this process's run cgroups that are still there."""
    found = []
    for task in Path("/proc/self/task").iterdir():  # asyncio's child watcher threads come and go
        with contextlib.suppress(FileNotFoundError):
            found += [f"child {pid}" for pid in (task / "children").read_text().split()]
    tree = sandbox._inner._cgroups
    if tree is not None:
        found += [f"cgroup {p.name}" for p in tree.base.glob(f"run-{os.getpid()}-*")]
    return found


async def from_spare(
    sandbox: BwrapSandbox, argv: list[str], *, env: dict[str, str] = ENV, timeout_s: float = BOUND
) -> RunResult:
    """`argv` run by a ready spare (the test fails when the call ran cold)."""
    assert await sandbox.prepare()
    served = pool(sandbox).served
    result = await sandbox.run(argv, cwd=sandbox.workspace, env=env, timeout_s=timeout_s)
    assert pool(sandbox).served == served + 1, "the call did not run in the spare"
    return result


def same(result: RunResult) -> tuple[object, ...]:
    """What the caller gets back, pipe inode numbers aside (each call has its own pipes)."""
    scrub = re.compile(rb"pipe:\[\d+\]")
    return (
        result.exit_code,
        result.killed_by_signal,
        result.timed_out,
        scrub.sub(b"pipe", result.stdout).splitlines(),
        scrub.sub(b"pipe", result.stderr).splitlines(),
        result.stdout_bytes,
        result.stderr_bytes,
        result.level,
        dict(result.metadata),
    )


async def test_the_command_sees_what_it_sees_cold(cold: BwrapSandbox, spared: BwrapSandbox) -> None:
    argv = ["/bin/bash", "-c", PROBE, "probe", "one", "two words"]
    expected = await cold.run(argv, cwd=cold.workspace, env=ENV, timeout_s=BOUND)
    got = await from_spare(spared, argv)

    assert expected.exit_code == 0, expected
    assert same(got)[3] == same(expected)[3]  # stdout, line by line
    assert same(got) == same(expected)
    assert b"\nZ_LAST=a=b c\n" in got.stdout and b"\nPWD=%s\n" % bytes(cold.workspace) in got.stdout
    assert b"pid: 2 ppid: 1" in got.stdout  # bubblewrap's init is its parent, as cold


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["/no/such/program"], ENV),
        (["no-such-program"], ENV),
        (["no-such-program"], {"HOME": "/"}),  # no PATH: glibc's default
        (["not-executable"], {"PATH": "/usr/bin:."}),  # EACCES found, then ENOENT
        (["./script"], ENV),  # no `#!`: the shell runs it
        ([""], ENV),
    ],
)
async def test_a_program_that_cannot_start_fails_as_it_does_cold(
    cold: BwrapSandbox, spared: BwrapSandbox, argv: list[str], env: dict[str, str]
) -> None:
    (cold.workspace / "not-executable").write_text("#!/bin/sh\necho ran\n")
    script = cold.workspace / "script"
    script.write_text("echo ran from the shell $0\n")
    script.chmod(0o755)
    expected = await cold.run(argv, cwd=cold.workspace, env=env, timeout_s=BOUND)
    got = await from_spare(spared, argv, env=env, timeout_s=BOUND)

    assert same(got) == same(expected)
    assert got.exit_code in (0, 1)


async def test_exit_statuses_signals_and_truncated_output_are_as_cold(workspace: Path) -> None:
    need_bwrap()
    small = dataclasses.replace(LIMITS, max_output_bytes=1000)
    cold = BwrapSandbox(workspace=workspace, limits=small)
    spared = BwrapSandbox(workspace=workspace, limits=small, spares=True)
    scripts = ["exit 3", "kill -TERM $$", "kill -KILL $$", "head -c 5000 /dev/zero; echo e >&2"]
    try:
        for script in scripts:
            argv = ["/bin/bash", "-c", script]
            expected = await cold.run(argv, cwd=workspace, env=ENV, timeout_s=BOUND)
            got = await from_spare(spared, argv, timeout_s=BOUND)
            assert same(got) == same(expected), script
    finally:
        await spared.aclose()
    assert got.stdout_truncated and got.stdout_bytes == 5000
    assert leftovers(spared) == []


async def test_a_timeout_stops_a_spared_command_as_it_stops_a_cold_one(
    cold: BwrapSandbox, spared: BwrapSandbox
) -> None:
    argv = ["/bin/bash", "-c", "trap '' TERM; echo up; while :; do :; done"]
    expected = await cold.run(argv, cwd=cold.workspace, env=ENV, timeout_s=0.5)
    got = await from_spare(spared, argv, timeout_s=0.5)

    assert same(got) == same(expected)
    assert got.timed_out and got.killed_by_signal is not None and got.stdout == b"up\n"
    assert 0.5 <= got.duration_s < 0.5 + 3 * LIMITS.kill_grace_s + 1


async def test_each_call_has_its_own_tmp_pid_tree_and_processes(spared: BwrapSandbox) -> None:
    marker = "300.4711"
    first = await from_spare(
        spared,
        [
            "/bin/bash",
            "-c",
            f"echo x > /tmp/left; (setsid sleep {marker} &); ls /tmp/left; echo $$",
        ],
        timeout_s=BOUND,
    )
    second = await from_spare(
        spared, ["/bin/bash", "-c", "ls /tmp/left; echo $$; ps -e -o args"], timeout_s=BOUND
    )

    assert first.stdout == b"/tmp/left\n2\n"
    assert second.stdout.startswith(b"2\n") and b"No such file" in second.stderr
    assert marker.encode() not in second.stdout
    assert pool(spared).served == 2
    assert not _running(marker)


def _running(marker: str) -> list[Path]:
    """Processes anywhere on the host whose command line has `marker`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if marker.encode() in cmdline.read_bytes():
                found.append(cmdline)
    return found


async def test_a_spare_is_only_for_the_command_line_it_was_started_with(
    spared: BwrapSandbox,
) -> None:
    write = ["/bin/bash", "-c", "echo hi > written && echo ok && readlink /proc/self/ns/net"]
    hosts = os.readlink("/proc/self/ns/net").encode()
    assert await spared.prepare()
    served = pool(spared).served
    read_only = spared.with_read_only_workspace()
    refused = await read_only.run(write, cwd=spared.workspace, env=ENV, timeout_s=BOUND)
    host = await spared.run(write, cwd=spared.workspace, env=ENV, timeout_s=BOUND, network="host")
    assert pool(spared).served == served  # neither took the spare started for `none`
    assert b"Read-only file system" in refused.stderr and refused.stdout == b""
    assert host.network == "host" and host.stdout == b"ok\n" + hosts + b"\n"

    assert await read_only.prepare()  # the read-only twin's own spare (the pool is shared)
    writable = await spared.run(write, cwd=spared.workspace, env=ENV, timeout_s=BOUND)
    assert writable.stdout.startswith(b"ok\nnet:") and hosts not in writable.stdout
    assert (spared.workspace / "written").read_text() == "hi\n"
    assert (await from_spare(read_only, write, timeout_s=BOUND)).exit_code == 1


async def test_calls_a_spare_cannot_reproduce_exactly_run_cold(spared: BwrapSandbox) -> None:
    argv = ["/bin/cat"]
    assert await spared.prepare()
    given = await spared.run(argv, cwd=spared.workspace, env=ENV, timeout_s=BOUND, stdin=b"in")
    odd = await spared.run(["/bin/true"], cwd=spared.workspace, env={"A-B": "1"}, timeout_s=BOUND)
    sub = spared.workspace / "sub"
    sub.mkdir()
    elsewhere = await spared.run(["/bin/pwd"], cwd=sub, env=ENV, timeout_s=BOUND)

    assert pool(spared).served == 0
    assert given.stdout == b"in" and odd.exit_code == 0 and elsewhere.stdout == f"{sub}\n".encode()
    assert command_bytes(["a\0b"], ENV) is None and command_bytes(["a"], {"1X": ""}) is None


async def test_a_spare_that_was_killed_falls_back_to_the_cold_path(spared: BwrapSandbox) -> None:
    assert await spared.prepare()
    (spare,) = pool(spared)._idle.values()
    spare._started.kill()
    await spare._started.capture.exited

    result = await spared.run(["/bin/echo", "hi"], cwd=spared.workspace, env=ENV, timeout_s=BOUND)
    assert result.stdout == b"hi\n" and pool(spared).served == 0


async def test_a_spare_that_ended_before_taking_its_command_runs_nothing(
    spared: BwrapSandbox,
) -> None:
    assert await spared.prepare()
    (key,) = pool(spared)._idle
    spare = pool(spared)._take(key)
    assert spare is not None
    spare._started.signal(signal.SIGKILL)
    await spare._started.capture.exited  # ended between being taken and being handed the command

    command = command_bytes(["/bin/sh", "-c", f"echo ran > {spared.workspace}/ran"], ENV)
    assert command is not None
    assert await spare.run(command, timeout_s=BOUND) is None
    assert not (spared.workspace / "ran").exists()


async def test_a_spare_that_cannot_start_makes_its_command_line_run_cold(workspace: Path) -> None:
    need_bwrap()
    sandbox = BwrapSandbox(workspace=workspace, limits=LIMITS, spares=True)
    sandbox._launch_spare = _failing  # type: ignore[method-assign]
    try:
        assert not await sandbox.prepare()
        result = await sandbox.run(["/bin/echo", "hi"], cwd=workspace, env=ENV, timeout_s=BOUND)
        assert result.stdout == b"hi\n"
        assert not pool(sandbox)._starting and pool(sandbox).started == 0  # not tried again
    finally:
        await sandbox.aclose()


async def _failing(prefix: list[str], where: Path) -> None:
    from heron.sandbox.base import SandboxError

    raise SandboxError("no spare here")


async def test_closing_stops_idle_spares_and_later_calls_run_cold(spared: BwrapSandbox) -> None:
    assert await spared.prepare()
    assert await spared.prepare(network="host")
    assert len(leftovers(spared)) >= 2  # two bubblewraps and their cgroups wait
    await spared.aclose()
    assert leftovers(spared) == []

    result = await spared.run(["/bin/echo", "hi"], cwd=spared.workspace, env=ENV, timeout_s=BOUND)
    assert result.stdout == b"hi\n" and pool(spared).served == 0
    assert leftovers(spared) == []  # and it started no spare after the call


async def test_closing_while_a_spare_starts_leaves_nothing_at_any_point(workspace: Path) -> None:
    need_bwrap()
    steps = 0
    while True:  # close after 0, 1, 2, ... turns of the event loop, until the spare was ready
        sandbox = BwrapSandbox(workspace=workspace, limits=LIMITS, spares=True)
        preparing = asyncio.create_task(sandbox.prepare())
        for _ in range(steps):
            await asyncio.sleep(0)
        done = preparing.done()
        await sandbox.aclose()
        await asyncio.gather(preparing, return_exceptions=True)
        assert leftovers(sandbox) == [], f"after {steps} turns"
        if done:
            break
        steps += 1
    assert steps > 3


async def test_cancelling_a_spared_call_at_any_point_leaves_nothing(workspace: Path) -> None:
    need_bwrap()
    fifo = workspace / "started"
    os.mkfifo(fifo)
    argv = ["/bin/bash", "-c", f"trap '' TERM; echo up > {fifo}; exec sleep 300.0815"]
    steps = 0
    while True:  # cancel after 0, 1, 2, ... turns of the event loop, until the command runs
        sandbox = BwrapSandbox(workspace=workspace, limits=LIMITS, spares=True)
        assert await sandbox.prepare()
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            call = asyncio.create_task(sandbox.run(argv, cwd=workspace, env=ENV, timeout_s=60))
            for _ in range(steps):
                await asyncio.sleep(0)
            running = await _readable(reader) if steps > 50 else _ready(reader)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
        finally:
            os.close(reader)
            await sandbox.aclose()
        assert leftovers(sandbox) == [], f"after {steps} turns"
        assert pool(sandbox).served == 0  # cancelled: no result
        if running:
            break
        steps += 1


def _ready(fd: int) -> bool:
    try:
        return bool(os.read(fd, 10))
    except BlockingIOError:
        return False


async def _readable(fd: int) -> bool:
    loop = asyncio.get_running_loop()
    seen = asyncio.Event()
    loop.add_reader(fd, seen.set)
    try:
        await asyncio.wait_for(seen.wait(), BOUND)
    finally:
        loop.remove_reader(fd)
    return _ready(fd)


def test_spares_need_herons_python_inside(workspace: Path) -> None:
    need_bwrap()
    with pytest.raises(ValueError, match="expose_python"):
        BwrapSandbox(workspace=workspace, spares=True, expose_python=False)
