"""Sandboxes: limits, timeouts and process-tree cleanup (both levels), the process level's
confinement (identity, private directories, Landlock), namespaces (bwrap).

Every test runs real processes; the bwrap tests run the real bubblewrap binary. The escape
suite (`test_sandbox_escape.py`) tries every way out against each level's containment report.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import select
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

import pytest

from heron.sandbox import (
    BwrapSandbox,
    ProcessSandbox,
    ResourceLimits,
    RunResult,
    Sandbox,
    SandboxUnavailable,
    make_sandbox,
)
from heron.sandbox.confine import Confinement

BOUND = 5.0  # seconds; an upper bound for waits that normally take milliseconds
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
# The process-count limit has its own tests below; elsewhere it stays off (no per-run cgroup).
FAST = ResourceLimits(kill_grace_s=0.3, max_processes=None)


def need_bwrap() -> None:
    if shutil.which("bwrap") is None:
        pytest.fail(
            "bubblewrap (`bwrap`) is required for this test; install the bubblewrap package"
        )


def process_is_gone(pid: int, *, within_s: float = 2.0) -> bool:
    """True when `pid` has ended or ends within `within_s` (a kill is delivered asynchronously).

    Waits on a pidfd, which becomes readable when the process exits: an event, not a poll.
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], within_s)
        return bool(readable)
    finally:
        os.close(fd)


def processes_with(marker: str) -> list[int]:
    """Live processes whose command line contains `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline and not process_is_gone(int(entry.name)):
            found.append(int(entry.name))
    return found


def exists_on_host(path: str) -> bool:
    return Path(path).exists()


def unique_sleep() -> str:
    """A `sleep` argument no other process has, so the process can be found by its command line."""
    return f"300.{secrets.randbelow(10**6):06d}"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture(params=["process", "bwrap"])
def sandbox(request: pytest.FixtureRequest, workspace: Path) -> Sandbox:
    if request.param == "bwrap":
        need_bwrap()
        return BwrapSandbox(workspace=workspace, limits=FAST)
    return ProcessSandbox(limits=FAST)


@pytest.fixture
async def loopback_server() -> AsyncIterator[tuple[int, list[str]]]:
    """A TCP server on 127.0.0.1 that records every connection it accepts."""
    accepted: list[str] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append("connection")
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield port, accepted


async def bash(sandbox: Sandbox, script: str, cwd: Path, *, timeout_s: float = BOUND) -> str:
    result = await sandbox.run(["/bin/bash", "-c", script], cwd=cwd, env=ENV, timeout_s=timeout_s)
    return result.stdout.decode()


# --- both levels ----------------------------------------------------------------------------


async def test_a_command_that_never_exits_is_stopped_at_its_timeout(
    sandbox: Sandbox, workspace: Path
) -> None:
    result = await sandbox.run(["sleep", "300"], cwd=workspace, env=ENV, timeout_s=0.3)
    assert result.timed_out
    assert result.exit_code is None
    assert result.killed_by_signal in (signal.SIGTERM, signal.SIGKILL)
    assert result.duration_s < BOUND


async def test_a_command_ignoring_sigterm_is_killed_after_the_grace_period(
    workspace: Path,
) -> None:
    sandbox = ProcessSandbox(limits=FAST)
    script = "trap '' TERM; sleep 300"
    result = await sandbox.run(["/bin/bash", "-c", script], cwd=workspace, env=ENV, timeout_s=0.2)
    assert result.timed_out
    assert result.killed_by_signal == signal.SIGKILL


async def test_children_that_outlive_their_parent_are_killed(
    sandbox: Sandbox, workspace: Path
) -> None:
    marker = unique_sleep()
    # The child keeps the stdout pipe open, so the run also proves heron does not wait for it.
    output = await bash(sandbox, f"sleep {marker} & echo $!", workspace)
    assert output.strip().isdigit()
    assert processes_with(marker) == []


async def test_a_forked_child_is_killed_when_its_parent_exits_checked_by_pid(
    workspace: Path,
) -> None:
    sandbox = ProcessSandbox(limits=FAST)
    output = await bash(sandbox, "sleep 300 >/dev/null 2>&1 & echo $!", workspace)
    pid = int(output)
    assert process_is_gone(pid)


async def test_a_child_that_escaped_into_its_own_session_is_killed_through_the_cgroup(
    workspace: Path,
) -> None:
    sandbox = ProcessSandbox(limits=ResourceLimits(kill_grace_s=0.3))
    if not sandbox.pids_limit.startswith("cgroup"):
        pytest.skip(f"no writable pids cgroup here (process count bound by {sandbox.pids_limit})")
    marker = unique_sleep()
    await bash(
        sandbox, f"setsid sleep {marker} >/dev/null 2>&1 < /dev/null & echo started", workspace
    )
    assert processes_with(marker) == []


async def test_cancelling_a_run_kills_the_whole_process_group(workspace: Path) -> None:
    sandbox = ProcessSandbox(limits=FAST)
    read_end, write_end = os.pipe()
    script = f"sleep 300 & echo $! >&{write_end}; wait"
    task = asyncio.create_task(
        sandbox.run(
            ["/bin/bash", "-c", script],
            cwd=workspace,
            env=ENV,
            timeout_s=60,
            pass_fds=[write_end],
        )
    )
    loop = asyncio.get_running_loop()
    ready = asyncio.Event()
    loop.add_reader(read_end, ready.set)
    try:
        await asyncio.wait_for(ready.wait(), BOUND)  # the child is running
        child = int(os.read(read_end, 100))
    finally:
        loop.remove_reader(read_end)
        os.close(read_end)
        os.close(write_end)
    assert not process_is_gone(child)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert process_is_gone(child)


async def test_filling_memory_is_stopped_by_the_address_space_limit(
    sandbox: Sandbox, workspace: Path, tmp_path: Path
) -> None:
    limits = ResourceLimits(address_space_bytes=512 * 2**20, kill_grace_s=0.3, max_processes=None)
    limited = (
        BwrapSandbox(workspace=workspace, limits=limits)
        if sandbox.level == "bwrap"
        else ProcessSandbox(limits=limits)
    )
    hog = "chunks = []\nwhile True:\n    chunks.append(bytearray(64 * 2**20))"
    result = await limited.run(
        [sys.executable, "-c", hog], cwd=workspace, env=ENV, timeout_s=BOUND * 2
    )
    assert not result.timed_out
    assert result.exit_code == 1
    assert b"MemoryError" in result.stderr


async def test_spawning_too_many_processes_is_refused_by_the_process_limit(
    sandbox: Sandbox, workspace: Path
) -> None:
    limits = ResourceLimits(max_processes=16, kill_grace_s=0.3)
    limited = (
        BwrapSandbox(workspace=workspace, limits=limits)
        if sandbox.level == "bwrap"
        else ProcessSandbox(limits=limits)
    )
    if limited.pids_limit == "uid-rlimit":
        pytest.skip("no writable pids cgroup; the unprivileged-user fallback has its own test")
    spawner = (
        "import subprocess\nprocs = []\ntry:\n"
        "    for _ in range(64):\n        procs.append(subprocess.Popen(['sleep', '300']))\n"
        "    print('not limited')\n"
        "except OSError as exc:\n    print('limited after', len(procs), exc.errno)\n"
    )
    result = await limited.run(
        [sys.executable, "-c", spawner], cwd=workspace, env=ENV, timeout_s=BOUND * 2
    )
    assert result.stdout.startswith(b"limited after"), result
    assert result.metadata["pids_limit"] == limited.pids_limit


async def test_output_is_capped_and_its_true_size_reported(
    sandbox: Sandbox, workspace: Path
) -> None:
    capped_limits = ResourceLimits(max_output_bytes=1000, max_processes=None)
    capped = (
        BwrapSandbox(workspace=workspace, limits=capped_limits)
        if sandbox.level == "bwrap"
        else ProcessSandbox(limits=capped_limits)
    )
    result = await capped.run(
        ["/bin/bash", "-c", "head -c 100000 /dev/zero; echo err >&2"],
        cwd=workspace,
        env=ENV,
        timeout_s=BOUND,
    )
    assert result.ok
    assert len(result.stdout) == 1000 and result.stdout_bytes == 100_000
    assert result.stdout_truncated and not result.stderr_truncated
    assert result.stderr == b"err\n"


async def test_stdin_and_the_environment_are_exactly_what_the_caller_passes(
    sandbox: Sandbox, workspace: Path
) -> None:
    env = {"PATH": "/usr/bin:/bin", "ONLY_THIS": "yes"}
    printed = await sandbox.run(["env"], cwd=workspace, env=env, timeout_s=BOUND)
    expected = ["ONLY_THIS=yes", "PATH=/usr/bin:/bin"]
    if sandbox.level == "bwrap":
        expected.append(f"PWD={workspace}")  # bubblewrap's --chdir sets PWD
    assert sorted(printed.stdout.decode().splitlines()) == expected
    echoed = await sandbox.run(["cat"], cwd=workspace, env=env, timeout_s=BOUND, stdin=b"hello")
    assert echoed.stdout == b"hello"


async def test_passed_descriptors_reach_the_command(sandbox: Sandbox, workspace: Path) -> None:
    read_end, write_end = os.pipe()
    try:
        script = f"echo through-fd >&{write_end}"
        result = await sandbox.run(
            ["/bin/bash", "-c", script],
            cwd=workspace,
            env=ENV,
            timeout_s=BOUND,
            pass_fds=[write_end],
        )
        assert result.ok, result
        os.close(write_end)
        write_end = -1
        assert os.read(read_end, 100) == b"through-fd\n"
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


async def test_a_cpu_bound_command_is_stopped_by_the_cpu_limit(workspace: Path) -> None:
    sandbox = ProcessSandbox(
        limits=ResourceLimits(cpu_seconds=1, kill_grace_s=0.3, max_processes=None)
    )
    result = await sandbox.run(
        [sys.executable, "-c", "while True: pass"], cwd=workspace, env=ENV, timeout_s=BOUND * 2
    )
    assert not result.timed_out
    assert result.killed_by_signal in (signal.SIGXCPU, signal.SIGKILL)


# --- the unprivileged-user fallback --------------------------------------------------------


async def test_without_a_cgroup_root_runs_commands_as_an_unprivileged_user_with_nproc(
    tmp_path: Path, workspace: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("the unprivileged-user fallback applies when heron runs as root")
    sandbox = ProcessSandbox(
        limits=ResourceLimits(max_processes=8, kill_grace_s=0.3),
        cgroup_root=tmp_path / "no-cgroups-here",
    )
    assert sandbox.pids_limit == "uid-rlimit"
    who = await sandbox.run(["id", "-u"], cwd=workspace, env=ENV, timeout_s=BOUND)
    assert who.stdout.decode().strip() == who.metadata["run_as_uid"] != "0"
    forker = (
        "for (1..64) { my $pid = fork; if (!defined $pid) { print qq(limited after $_\\n); exit 0 }"
        " if ($pid == 0) { sleep 300; exit 0 } } print qq(not limited\\n);"
    )
    result = await sandbox.run(["perl", "-e", forker], cwd=workspace, env=ENV, timeout_s=BOUND)
    assert result.stdout.startswith(b"limited after"), result


# --- bwrap ---------------------------------------------------------------------------------


@pytest.fixture
def bwrap_sandbox(workspace: Path) -> BwrapSandbox:
    need_bwrap()
    return BwrapSandbox(workspace=workspace, limits=FAST)


async def test_writes_to_read_only_system_paths_fail_inside_bwrap(
    bwrap_sandbox: BwrapSandbox, workspace: Path
) -> None:
    probe = f"heron-probe-{secrets.token_hex(4)}"
    result = await bwrap_sandbox.run(
        ["/bin/bash", "-c", f"touch /usr/{probe}; touch /{probe}; touch /etc/{probe}"],
        cwd=workspace,
        env=ENV,
        timeout_s=BOUND,
    )
    assert result.stderr.count(b"Read-only file system") == 3, result.stderr
    assert not exists_on_host(f"/usr/{probe}")
    assert not exists_on_host(f"/{probe}")


async def test_the_workspace_is_writable_and_tmp_is_private_inside_bwrap(
    bwrap_sandbox: BwrapSandbox, workspace: Path
) -> None:
    name = f"heron-tmp-{secrets.token_hex(4)}"
    script = f"echo kept > {workspace}/out.txt && echo private > /tmp/{name} && ls /tmp"
    output = await bash(bwrap_sandbox, script, workspace)
    assert (workspace / "out.txt").read_text() == "kept\n"
    assert not exists_on_host(f"/tmp/{name}")
    assert name in output


async def test_network_is_unreachable_from_the_bwrap_sandbox(
    workspace: Path, loopback_server: tuple[int, list[str]]
) -> None:
    need_bwrap()
    port, accepted = loopback_server
    connect = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
    isolated = BwrapSandbox(workspace=workspace, limits=FAST)
    blocked = await isolated.run(
        ["/bin/bash", "-c", connect], cwd=workspace, env=ENV, timeout_s=BOUND
    )
    assert blocked.exit_code != 0 and b"connected" not in blocked.stdout
    assert accepted == []
    assert blocked.metadata["network"] == "none"
    allowed = BwrapSandbox(workspace=workspace, limits=FAST, network="host")
    reached = await allowed.run(
        ["/bin/bash", "-c", connect], cwd=workspace, env=ENV, timeout_s=BOUND
    )
    assert reached.stdout == b"connected\n"
    assert reached.metadata["network"] == "host"


async def test_bwrap_hides_host_processes(bwrap_sandbox: BwrapSandbox, workspace: Path) -> None:
    output = await bash(bwrap_sandbox, "ls /proc | grep -c '^[0-9]'", workspace)
    assert int(output) < 10  # bubblewrap's init, bash, ls and grep; not the host's processes


async def test_bwrap_starts_held_and_every_limit_binds_from_the_commands_first_instruction(
    workspace: Path,
) -> None:
    need_bwrap()
    limits = ResourceLimits(
        cpu_seconds=7,
        address_space_bytes=3 * 2**30,
        file_size_bytes=5 * 2**20,
        open_files=77,
        max_processes=33,
        kill_grace_s=0.3,
    )
    sandbox = BwrapSandbox(workspace=workspace, limits=limits)
    # The command's first instruction is `cat`'s: what it reads is what it started under.
    shown = await sandbox.run(
        ["/bin/cat", "/proc/self/limits", "/proc/self/cgroup"],
        cwd=workspace,
        env=ENV,
        timeout_s=BOUND,
    )
    text = shown.stdout.decode()
    rows = {line[:26].strip(): line[26:].split()[:2] for line in text.splitlines()}

    assert sandbox._held, "this bubblewrap should start held (not setuid, --info-fd, --block-fd)"
    assert rows["Max cpu time"] == ["7", "8"]
    assert rows["Max address space"] == [str(3 * 2**30)] * 2
    assert rows["Max file size"] == [str(5 * 2**20)] * 2
    assert rows["Max open files"] == ["77", "77"]
    assert rows["Max core file size"] == ["0", "0"]
    if sandbox.pids_limit.startswith("cgroup"):
        # bubblewrap started inside the run's pids cgroup: its cgroup namespace is rooted there.
        pids = [line for line in text.splitlines() if ":pids:" in line or line.startswith("0::")]
        assert pids and all(line.endswith(":/") for line in pids), text


async def test_a_command_bwrap_cannot_start_is_a_result_not_a_hang(
    bwrap_sandbox: BwrapSandbox, workspace: Path
) -> None:
    result = await bwrap_sandbox.run(["/no/such/program"], cwd=workspace, env=ENV, timeout_s=BOUND)
    assert result.exit_code == 1 and b"/no/such/program" in result.stderr, result


LAUNCHER = """
import json, os, sys
info, block, report = (int(x) for x in sys.argv[1:4])
child = os.fork()
if child == 0:
    os.read(block, 1) or os._exit(3)  # released: the command would run now
    open(sys.argv[4], "w").write("ran")
    os._exit(0)
os.write(info, json.dumps({"child-pid": child if report == 0 else report}).encode())
os.close(info)
os.waitpid(child, 0)
"""


async def test_a_held_launcher_is_released_only_with_its_own_child_and_killed_otherwise(
    workspace: Path,
) -> None:
    from heron.sandbox.base import SandboxError
    from heron.sandbox.held import Held

    sandbox = ProcessSandbox(limits=FAST, confine=False)
    ran = workspace / "ran"

    def launcher(report: int) -> Coroutine[Any, Any, RunResult]:
        def argv(held: Held) -> list[str]:
            fds = [str(held.info_fd), str(held.block_fd), str(report)]
            return [sys.executable, "-c", LAUNCHER, *fds, str(ran)]

        return sandbox._run(
            argv,
            cwd=workspace,
            env=ENV,
            timeout_s=BOUND,
            stdin=None,
            pass_fds=(),
            network=None,
            held=True,
        )

    with pytest.raises(SandboxError, match="not its own child"):
        await launcher(report=os.getpid())  # heron itself: never limited, never released
    refused_ran = ran.exists()
    released = await launcher(report=0)

    assert not refused_ran  # killed before its block could read EOF and go on
    assert released.exit_code == 0 and ran.read_text() == "ran"


async def test_a_missing_bwrap_binary_is_a_clear_error_not_a_downgrade(workspace: Path) -> None:
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        BwrapSandbox(workspace=workspace, bwrap=str(workspace / "no-such-bwrap"))


async def test_bwrap_refuses_a_working_directory_outside_the_workspace(
    bwrap_sandbox: BwrapSandbox, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="outside the sandbox workspace"):
        await bwrap_sandbox.run(["true"], cwd=tmp_path, env=ENV, timeout_s=BOUND)


def test_make_sandbox_builds_the_configured_level_and_never_fakes_isolation(
    workspace: Path,
) -> None:
    need_bwrap()
    assert make_sandbox("process", workspace=workspace).level == "process"
    isolated = make_sandbox("bwrap", workspace=workspace)
    assert isolated.level == "bwrap" and not isolated.network
    with pytest.raises(SandboxUnavailable, match="cannot block the network"):
        make_sandbox("process", workspace=workspace, network=False)


# --- the process level's confinement -------------------------------------------------------


async def test_as_root_commands_run_as_the_dedicated_user_and_files_stay_herons(
    workspace: Path,
) -> None:
    if os.geteuid() != 0:
        pytest.skip("the dedicated user applies when heron runs as root")
    sandbox = ProcessSandbox(workspace=workspace, limits=FAST)
    (workspace / "mine.txt").write_text("heron's\n")
    script = "id -u; echo more >> mine.txt && echo made > new.txt && echo ok"
    result = await sandbox.run(["/bin/bash", "-c", script], cwd=workspace, env=ENV, timeout_s=BOUND)
    uid, ok = result.stdout.decode().split()
    assert uid == result.metadata["run_as_uid"] != "0" and ok == "ok", result
    assert "idmap" in result.metadata["confinement"]
    assert (workspace / "mine.txt").read_text() == "heron's\nmore\n"
    assert (workspace / "new.txt").stat().st_uid == os.geteuid()  # heron's on disk


async def test_tmp_is_private_and_directories_the_user_may_not_enter_are_hidden(
    workspace: Path, tmp_path: Path
) -> None:
    sandbox = ProcessSandbox(workspace=workspace, limits=FAST)
    name = f"heron-tmp-{secrets.token_hex(4)}"
    sibling = tmp_path / "sibling.txt"
    sibling.write_text("beside the workspace\n")
    script = f"echo private > /tmp/{name} && cat /tmp/{name}; cat {sibling}; ls {workspace}"
    result = await sandbox.run(["/bin/bash", "-c", script], cwd=workspace, env=ENV, timeout_s=BOUND)
    assert result.stdout.decode().splitlines()[0] == "private"
    assert not exists_on_host(f"/tmp/{name}")
    assert b"beside the workspace" not in result.stdout  # pytest's /tmp tree is not shared


async def test_a_working_directory_hidden_in_the_sandbox_is_refused(
    workspace: Path, tmp_path: Path
) -> None:
    hidden = tmp_path / "elsewhere"
    hidden.mkdir()
    sandbox = ProcessSandbox(workspace=workspace, limits=FAST)
    with pytest.raises(ValueError, match="hidden inside the sandbox"):
        await sandbox.run(["true"], cwd=hidden, env=ENV, timeout_s=BOUND)


async def test_without_confinement_only_the_limits_apply(workspace: Path) -> None:
    plain = ProcessSandbox(limits=FAST, confine=False)
    result = await plain.run(["id", "-u"], cwd=workspace, env=ENV, timeout_s=BOUND)
    assert result.stdout.decode().strip() == str(os.geteuid())
    assert "confinement" not in result.metadata


def test_herons_python_inside_the_workspace_is_bound_read_only() -> None:
    facts = ProcessSandbox(limits=FAST).facts
    if facts is None or not facts.namespaces:
        pytest.skip("no mount namespace for the process level on this host")
    plan = Confinement.plan(
        facts,
        writable=Path("/srv/project"),
        cwd=Path("/srv/project"),
        exposed=[Path("/srv/project/.venv"), Path("/opt/elsewhere")],
        network="host",
        run_as=None,
        idmap_fd=-1,
        private_size_bytes=None,
    )
    assert ("/srv/project/.venv", False) in plan.binds
    assert not any(path == "/opt/elsewhere" for path, _ in plan.binds)  # reachable as it is
