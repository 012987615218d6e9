"""The escape suite's rig: the host-side things the attempts aim at, and the suite's sandboxes.

`EscapeRig.start()` lays out files outside the workspace (world-readable, private,
world-writable), starts a loopback and an external listener, and gathers what must not leak
(heron's environment entries, its memory address, its command line).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import secrets
import select
import socket
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from heron.sandbox.base import AGENT_ENV, MIB, ResourceLimits
from heron.sandbox.bwrap import BwrapSandbox
from heron.sandbox.process import ProcessSandbox, python_roots

__all__ = ["SUITE_LIMITS", "EscapeRig", "suite_sandbox", "visible_outside"]

SUITE_LIMITS = ResourceLimits(
    cpu_seconds=20,
    address_space_bytes=1024 * MIB,
    file_size_bytes=1 * MIB,
    open_files=256,
    max_processes=48,
    max_output_bytes=1 * MIB,
    tmp_size_bytes=8 * MIB,
    kill_grace_s=0.3,
)
"""The limits the suite's sandboxes run under (the resource attempts rely on them)."""


def suite_sandbox(
    level: str, *, workspace: Path, spares: bool = False
) -> ProcessSandbox | BwrapSandbox:
    """A sandbox of `level` under `SUITE_LIMITS` (`spares`: a `bwrap` one with spare sandboxes;
    the caller closes it). Where only RLIMIT_NPROC of heron's own user binds the process count
    (heron is not root, no writable cgroup), that limit counts every process and thread of the
    user, heron's included: it is raised by what the user already runs, so the suite does not
    starve heron itself."""

    def build(limits: ResourceLimits) -> ProcessSandbox | BwrapSandbox:
        if level == "bwrap":
            return BwrapSandbox(workspace=workspace, limits=limits, spares=spares)
        return ProcessSandbox(workspace=workspace, limits=limits)

    sandbox = build(SUITE_LIMITS)
    if sandbox.pids_limit != "rlimit":
        return sandbox
    # Room for heron's own threads and the attempts that run side by side.
    return build(dataclasses.replace(SUITE_LIMITS, max_processes=user_tasks() + 160))


def visible_outside(
    sandbox: ProcessSandbox, workspace: Path, candidates: Sequence[Path]
) -> Path | None:
    """The first candidate directory (outside `workspace`, writable by heron) that commands of
    `sandbox` see as it is: not private, not hidden, enterable by the user they run as. The
    suite lays out its files in a fresh directory there."""
    from heron.sandbox.confine import enterable

    plan = sandbox.plan(workspace)
    for candidate in candidates:
        where = candidate.resolve()
        if where.is_relative_to(workspace) or not os.access(where, os.W_OK | os.X_OK):
            continue
        if plan is not None and plan.hides(where):
            continue
        who = plan.run_as if plan is not None else None
        if who is not None and not all(enterable(p, *who) for p in [where, *where.parents]):
            continue
        return where
    return None


def user_tasks() -> int:
    """Processes and threads of heron's user (what RLIMIT_NPROC counts)."""
    uid, count = os.getuid(), 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(entry / "task"))
    return count


_NOT_CANARIES = {"PATH", "LANG", "LC_ALL", "HOME", "PWD", "OLDPWD", "SHLVL", "_"}


@dataclass(kw_only=True)
class EscapeRig:
    """The host-side fixtures the attempts aim at. Build it with `EscapeRig.start()`."""

    workspace: Path
    outside: Path
    """A directory outside the workspace, visible to a process that shares the host's files:
    `public.txt` (0644), `private.txt` (0600), `open/` (0777) with `victim` (0666), and
    `target.txt` (0666)."""
    token: str
    heron_pid: int
    heron_cmdline: str
    canaries: tuple[str, ...]
    """Entries of heron's real environment block that the sandbox's environment lacks."""
    memory_address: int
    """The start of a readable mapping of heron (for the /proc/<pid>/mem attempt)."""
    loopback_port: int
    external: tuple[str, int] | None
    """This host's non-loopback address and a listener on it, or None when there is none."""
    root_device: str | None
    home_entries: tuple[str, ...]
    """Names in heron's home directory that no sandbox exposes."""
    outside_visible: bool = True
    """Whether a process sandbox shows `outside` as it is (False: it is hidden there too)."""
    received: list[str] = field(default_factory=list)
    """Tokens the listeners received."""

    @property
    def env(self) -> dict[str, str]:
        path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        return {"PATH": path, "LANG": "C.UTF-8", "HOME": str(self.workspace)}

    def marker(self, attempt: str) -> str:
        """A token unique to the rig and the attempt (file names, `sleep` arguments)."""
        return f"{self.token}-{attempt}"

    @classmethod
    @contextlib.asynccontextmanager
    async def start(
        cls,
        *,
        workspace: Path,
        outside: Path,
        exposed: Sequence[Path] = (),
        outside_visible: bool = True,
    ) -> AsyncIterator[EscapeRig]:
        """Create the files under `outside`, start the listeners, yield the rig, stop them."""
        token = secrets.token_hex(4)
        await asyncio.to_thread(lay_out, outside, token)
        received: list[str] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                line = await asyncio.wait_for(reader.readline(), 5)
                received.append(line.decode(errors="replace").strip() or "(connected)")
            writer.close()

        loopback = await asyncio.start_server(handle, "127.0.0.1", 0)
        address = external_address()
        external = await asyncio.start_server(handle, address, 0) if address else None
        try:
            rig = cls(
                workspace=workspace,
                outside=outside,
                token=token,
                heron_pid=os.getpid(),
                heron_cmdline=cmdline(os.getpid()),
                canaries=canaries(),
                memory_address=readable_address(),
                loopback_port=loopback.sockets[0].getsockname()[1],
                external=(address, external.sockets[0].getsockname()[1])
                if address and external
                else None,
                root_device=root_device(),
                home_entries=home_entries(exposed),
                outside_visible=outside_visible,
                received=received,
            )
            yield rig
        finally:
            loopback.close()
            if external is not None:
                external.close()


# --- host-side facts ----------------------------------------------------------------------


def lay_out(outside: Path, token: str) -> None:
    outside.mkdir(parents=True, exist_ok=True)
    os.chmod(outside, 0o755)
    files = {"public.txt": 0o644, "private.txt": 0o600, "target.txt": 0o666}
    for name, mode in files.items():
        text = name.split(".")[0] if name != "target.txt" else "untouched"
        (outside / name).write_text(f"{text}-{token}\n")
        os.chmod(outside / name, mode)
    (outside / "open").mkdir(exist_ok=True)
    os.chmod(outside / "open", 0o777)
    (outside / "open" / "victim").write_text(f"untouched-{token}\n")
    os.chmod(outside / "open" / "victim", 0o666)


def canaries() -> tuple[str, ...]:
    """Entries of heron's environment block, except those that also appear on the command line
    of heron or one of its parents (`FOO=bar heron run`): reading a command line is
    `other_processes`, not the environment. Nor are entries heron itself hands the commands
    it runs (`AGENT_ENV`, and flags: a value under 8 characters such as
    `PYTHONDONTWRITEBYTECODE=1`): a concurrent command of the same user may show them."""
    try:
        block = Path("/proc/self/environ").read_bytes().decode(errors="replace")
    except OSError:
        return ()
    lines = " ".join(cmdline(pid) for pid in ancestry())
    passed = {f"{name}={value}" for name, value in AGENT_ENV.items()}
    entries = [e for e in block.split("\0") if "=" in e]
    return tuple(
        e
        for e in entries
        if e.split("=", 1)[0] not in _NOT_CANARIES
        and len(e.split("=", 1)[1]) >= 8
        and e not in passed
        and e not in lines
    )


def ancestry() -> list[int]:
    pids: list[int] = []
    pid = os.getpid()
    while pid > 1 and len(pids) < 64:
        pids.append(pid)
        try:
            stat_line = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat_line.rsplit(")", 1)[1].split()[1])
    return pids


def cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def readable_address() -> int:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/maps").read_text().splitlines():
            span, perms = line.split()[:2]
            if perms.startswith("r"):
                return int(span.split("-")[0], 16)
    return 0


def external_address() -> str | None:
    """This host's primary non-loopback IPv4 address (no packet is sent), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: only picks the outgoing interface
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def root_device() -> str | None:
    """The block device `/` is mounted from, when it is one."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            if fields[4] == "/":
                source = fields[fields.index("-") + 2]
                if source.startswith("/dev/") and Path(source).exists():
                    return source
    return None


def home_entries(exposed: Sequence[Path]) -> tuple[str, ...]:
    """Names in heron's home that no sandbox shows: not the first step towards heron's Python
    or another exposed path (sandboxes recreate those)."""
    home = Path.home()
    paths = [*exposed, *python_roots()]
    keep = {p.relative_to(home).parts[0] for p in paths if p.is_relative_to(home) and p != home}
    with contextlib.suppress(OSError):
        return tuple(sorted(n for n in os.listdir(home) if n not in keep and len(n) > 2))
    return ()


def alive(marker: str) -> list[int]:
    """Host processes whose command line contains `marker` and that are still running."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline and not gone(int(entry.name)):
            found.append(int(entry.name))
    return found


def gone(pid: int, within_s: float = 1.0) -> bool:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], within_s)[0])
    finally:
        os.close(fd)
