"""The job supervisor: a tiny process that outlives heron, runs one command and records its end.

heron starts it as a script (`python -I -S supervisor.py <job dir>/spec.json`; standard library
only, so it starts in milliseconds and never imports heron). The script forks: the parent (the
launcher) waits until the supervisor has started the command, prints one JSON report line and
exits; the child becomes the supervisor, in its own session, re-parented to init, so neither
heron's exit nor a signal to heron's process group reaches it.

The supervisor starts the command in a new session of its own (its process group is the
command's pid), with stdin from /dev/null and stdout and stderr appended to `output.log`,
under the resource limits, cgroup and user the spec names. When heron holds known secrets
(`heron.safety.secrets`), it hands their values and placeholders to the launcher on its
standard input — never in the spec or any file — and the command's output goes through a pipe
the supervisor reads, so each value becomes its placeholder before `output.log` is written
(a value split across two reads is held back until the next one decides it).

It writes `procs.json` (its own and the command's pid, their start times and the boot id:
enough to recognise them later and not mistake a recycled pid for them) before reporting
success. When the command exits, whatever it left behind in its process group or cgroup is
killed, then `status.json` (exit code or signal, end time) is written atomically. A
`status.json` therefore means the job is over; a supervisor that is gone without one means its
fate is unknown.

SIGTERM, SIGINT and SIGHUP sent to the supervisor are passed on to the command's process group,
so stopping the supervisor stops the job and its end is still recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

SPEC_FILE = "spec.json"
OUTPUT_FILE = "output.log"
PROCS_FILE = "procs.json"
STATUS_FILE = "status.json"
LOG_FILE = "supervisor.log"

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_PUMP_DRAIN_S = 5.0  # after the command's group is killed, how long the output may still flow

Masks = Sequence[tuple[bytes, bytes]]
"""(secret value, placeholder) pairs, longest value first."""


def mask_output(data: bytes, masks: Masks) -> tuple[bytes, bytes]:
    """`data` with every value replaced, split into what may be written now and the tail
    that could be the start of a value continued in the next read."""
    for value, mark in masks:
        if value in data:
            data = data.replace(value, mark)
    keep = 0
    for value, _ in masks:
        for size in range(min(len(value) - 1, len(data)), keep, -1):
            if data.endswith(value[:size]):
                keep = size
                break
    return data[: len(data) - keep], data[len(data) - keep :]


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _pump(source: int, out: int, masks: Masks) -> None:
    """Copy the command's output to `output.log`, masked, until every writer has closed it."""
    held = b""
    try:
        while chunk := os.read(source, 65536):
            ready, held = mask_output(held + chunk, masks)
            _write_all(out, ready)
        _write_all(out, held)  # the end: a tail held back is no secret's start after all
    finally:
        os.close(source)
        os.close(out)


_CGROUP_SWEEPS = 50  # cgroup membership lags a kill; bounded retries before giving up on rmdir


def start_ticks(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot), or `None` if it is gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    # The command name may contain spaces and parentheses: fields start after the last ")".
    fields = text[text.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def boot_id() -> str:
    """This boot's id: a pid and start time only identify a process within one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def alive(pid: int | None, ticks: int | None, boot: str) -> bool:
    """Whether the process recorded as (`pid`, `ticks`, `boot`) is still running."""
    if pid is None or ticks is None or boot != boot_id():
        return False
    return start_ticks(pid) == ticks


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Write `data` so readers see the old file or the complete new one, never a part."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in `path`, or `None` if there is none (yet)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def signal_cgroup(path: str | None, sig: int) -> None:
    """Send `sig` to every process in the cgroup at `path` (cgroup v2 kills in one write)."""
    if not path:
        return
    group = Path(path)
    if sig == signal.SIGKILL:
        with contextlib.suppress(OSError):
            (group / "cgroup.kill").write_text("1")
    try:
        members = (group / "cgroup.procs").read_text().split()
    except OSError:
        return
    for member in members:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(member), sig)


def remove_cgroup(path: str | None) -> None:
    """Kill what is left in the cgroup and delete it (bounded; a leftover is harmless)."""
    if not path or not Path(path).is_dir():
        return
    for _ in range(_CGROUP_SWEEPS):
        signal_cgroup(path, signal.SIGKILL)
        try:
            Path(path).rmdir()
            return
        except OSError:
            time.sleep(0.01)


def _confine(rlimits: Sequence[Sequence[int]], procs_fd: int) -> Callable[[], None]:
    # Runs between fork and exec: only os.write and setrlimit, no locks.
    pairs = [(which, (soft, hard)) for which, soft, hard in rlimits]

    def confine() -> None:
        if procs_fd >= 0:
            os.write(procs_fd, b"0")
        for which, pair in pairs:
            resource.setrlimit(which, pair)

    return confine


def _make_cgroup(spec: Mapping[str, Any]) -> int:
    """Create the job's cgroup; returns an fd on its `cgroup.procs` (or -1 without one)."""
    path = spec.get("cgroup")
    if not path:
        return -1
    group = Path(path)
    group.mkdir(exist_ok=True)
    if spec.get("pids_max") is not None:
        (group / "pids.max").write_text(str(spec["pids_max"]))
    return os.open(group / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)


def _report(fd: int, data: Mapping[str, Any]) -> None:
    os.write(fd, json.dumps(data).encode())
    os.close(fd)


def supervise(spec: Mapping[str, Any], report_fd: int, masks: Masks = ()) -> int:
    """Start the command, report, wait for it, clean up, write the status file."""
    job_dir = Path(spec["dir"])
    procs_fd = -1
    out = -1
    log = -1
    pump: threading.Thread | None = None
    try:
        log = os.open(
            job_dir / OUTPUT_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600
        )
        if masks:  # the output passes through the supervisor, which masks it
            source, out = os.pipe2(os.O_CLOEXEC)
            pump = threading.Thread(target=_pump, args=(source, log, masks), daemon=True)
        else:
            out, log = log, -1
        procs_fd = _make_cgroup(spec)
        user: dict[str, Any] = {}
        if spec.get("user") is not None:
            uid, gid = spec["user"]
            user = {"user": uid, "group": gid, "extra_groups": []}
        child = subprocess.Popen(
            spec["argv"],
            cwd=spec["cwd"],
            env=spec["env"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_confine(spec.get("rlimits", []), procs_fd),
            **user,
        )
    except Exception as exc:
        remove_cgroup(spec.get("cgroup"))
        _report(report_fd, {"ok": False, "error": f"cannot start the command: {exc}"})
        return 1
    finally:
        for fd in (out, procs_fd):
            if fd >= 0:
                os.close(fd)
    if pump is not None:
        pump.start()
    me = os.getpid()
    identity = {
        "supervisor_pid": me,
        "supervisor_start": start_ticks(me),
        "child_pid": child.pid,
        "child_start": start_ticks(child.pid),
        "boot_id": boot_id(),
    }
    try:
        write_json_atomic(job_dir / PROCS_FILE, identity)
    except OSError as exc:  # unrecorded, the job could never be found again: stop it now
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        remove_cgroup(spec.get("cgroup"))
        _report(report_fd, {"ok": False, "error": f"cannot record the job's processes: {exc}"})
        return 1
    for sig in _FORWARDED:
        signal.signal(sig, lambda number, _frame: _forward(child.pid, spec, number))
    _report(report_fd, {"ok": True, **identity})
    code = child.wait()
    ended = time.time()
    # Nothing the command started outlives it, as with the `shell` tool.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    remove_cgroup(spec.get("cgroup"))
    if pump is not None:  # the output is complete before the job is reported over
        pump.join(_PUMP_DRAIN_S)
    status = {
        "exit_code": code if code >= 0 else None,
        "signal": -code if code < 0 else None,
        "ended_at": ended,
    }
    write_json_atomic(job_dir / STATUS_FILE, status)
    return 0


def _forward(pgid: int, spec: Mapping[str, Any], number: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, number)
    signal_cgroup(spec.get("cgroup"), number)


def _detach_stdio(job_dir: Path) -> None:
    """Let go of the launcher's pipes (heron reads them to EOF) and log to the job dir."""
    null = os.open(os.devnull, os.O_RDONLY)
    log = os.open(job_dir / LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)


def _read_masks() -> list[tuple[bytes, bytes]]:
    """The (value, placeholder) pairs heron wrote on standard input (none from a terminal)."""
    if sys.stdin is None or sys.stdin.isatty():
        return []
    raw = sys.stdin.buffer.read()
    if not raw.strip():
        return []
    pairs = [(v.encode("utf-8"), m.encode("utf-8")) for v, m in json.loads(raw)]
    return sorted(pairs, key=lambda pair: -len(pair[0]))


def launch(spec_path: Path) -> int:
    """Fork the supervisor, relay its report on stdout; 0 when the command started."""
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    masks = _read_masks()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            os.close(read_fd)
            os.setsid()
            _detach_stdio(Path(spec["dir"]))
            code = supervise(spec, write_fd, masks)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(write_fd)
    chunks = []
    while chunk := os.read(read_fd, 65536):
        chunks.append(chunk)
    os.close(read_fd)
    report = b"".join(chunks).decode("utf-8", "replace")
    if not report:
        report = json.dumps({"ok": False, "error": "the supervisor ended before reporting"})
    sys.stdout.write(report + "\n")
    sys.stdout.flush()
    return 0 if json.loads(report).get("ok") is True else 1


# -- heron's side: launching, recognising, waiting for and cleaning up after a supervisor ---
# asyncio is imported inside these functions, never at the top: the script must start fast.

HAS_PIDFD = hasattr(os, "pidfd_open")
IDENTITY_FIELDS = ("supervisor_pid", "supervisor_start", "child_pid", "child_start", "boot_id")


def identity(report: Mapping[str, Any]) -> dict[str, Any]:
    """The process identity fields of a launch report or `procs.json`."""
    return {key: report.get(key) for key in IDENTITY_FIELDS}


async def launch_supervisor(
    spec_path: Path, masks: Sequence[tuple[str, str]] = ()
) -> dict[str, Any]:
    """Run this script on `spec_path`; returns its report once the command has started
    (`{"ok": true, <identity>}`) or could not start (`{"ok": false, "error": ...}`). `masks`
    are (secret value, placeholder) pairs the supervisor applies to the command's output; they
    travel on the launcher's standard input, never through a file."""
    import asyncio

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        "-S",
        __file__,
        str(spec_path),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    payload = json.dumps([list(pair) for pair in masks]).encode() if masks else b""
    out, err = await proc.communicate(payload)
    try:
        report = json.loads(out.decode("utf-8", "replace").strip() or "{}")
    except ValueError:
        report = {}
    if not isinstance(report, dict) or "ok" not in report:
        detail = err.decode("utf-8", "replace").strip()[-500:]
        return {"ok": False, "error": f"the job supervisor failed to start: {detail}"}
    return report


async def wait_gone(pid: int | None, ticks: int | None, boot: str, grace_s: float) -> bool:
    """Wait up to `grace_s` for the process (`pid`, `ticks`, `boot`) to exit; True once gone."""
    import asyncio

    if pid is None or not alive(pid, ticks, boot):
        return True
    loop = asyncio.get_running_loop()
    if not HAS_PIDFD:
        deadline = loop.time() + grace_s
        while loop.time() < deadline:
            await asyncio.sleep(0.02)
            if not alive(pid, ticks, boot):
                return True
        return False
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return True
    gone: asyncio.Future[None] = loop.create_future()

    def exited() -> None:
        if not gone.done():
            gone.set_result(None)

    loop.add_reader(fd, exited)
    try:
        await asyncio.wait_for(gone, grace_s)
        return True
    except TimeoutError:
        return not alive(pid, ticks, boot)
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def kill_leftovers(procs: Mapping[str, Any], cgroup: str | None) -> None:
    """Kill what a job whose supervisor vanished left running: its process group (only if its
    leader is still the recorded process) and its cgroup."""
    pid = procs.get("child_pid")
    if pid is not None and alive(pid, procs.get("child_start"), procs.get("boot_id", "")):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    remove_cgroup(cgroup)


def rlimit_triples(
    *,
    cpu_seconds: int | None,
    address_space_bytes: int | None,
    file_size_bytes: int | None,
    open_files: int | None,
    max_processes: int | None,
) -> list[list[int]]:
    """`[resource, soft, hard]` for the spec; `max_processes=None` sets no RLIMIT_NPROC."""
    wanted: list[tuple[int, int | None, int]] = [
        (resource.RLIMIT_CPU, cpu_seconds, 1),  # SIGXCPU first, SIGKILL a second later
        (resource.RLIMIT_AS, address_space_bytes, 0),
        (resource.RLIMIT_FSIZE, file_size_bytes, 0),
        (resource.RLIMIT_NOFILE, open_files, 0),
        (resource.RLIMIT_CORE, 0, 0),  # no core dumps in the workspace
        (resource.RLIMIT_NPROC, max_processes, 0),
    ]
    triples: list[list[int]] = []
    for which, soft, headroom in wanted:
        if soft is None:
            continue
        hard = soft + headroom
        _, hard_now = resource.getrlimit(which)
        if hard_now != resource.RLIM_INFINITY:  # a process can only lower its hard limit
            hard = min(hard, hard_now)
        triples.append([which, min(soft, hard), hard])
    return triples


if __name__ == "__main__":
    sys.exit(launch(Path(sys.argv[1])))
