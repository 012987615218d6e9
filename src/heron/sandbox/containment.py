"""What a sandbox contains, and how: the report `heron doctor` prints.

`containment_report(sandbox)` answers, for the sandbox in use on this machine (the kernel, the
user heron runs as, the tools installed), one line per `Aspect`: contained or not, and the
mechanism or the reason. It is derived from what the sandbox probed and planned, and the escape
suite (`heron.sandbox.escape`, run by `tests/unit/test_sandbox_escape.py` and
`bench/sandbox_escape.py`) checks every line against real attempts: an attempt on a contained
aspect must fail, an attempt on an aspect reported as not contained must succeed.

`ContainmentReport.holds(...)` is the question other parts of heron ask, e.g. whether
low-risk shell commands may run with no operator (`UNATTENDED_REQUIRES`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from heron.sandbox.base import MIB, NetworkMode, ResourceLimits, Sandbox, SandboxUnavailable
from heron.sandbox.bwrap import BwrapSandbox
from heron.sandbox.process import ProcessSandbox

__all__ = [
    "ASPECTS",
    "UNATTENDED_REQUIRES",
    "Aspect",
    "Containment",
    "ContainmentReport",
    "containment_report",
    "describe_level",
]

Aspect = Literal[
    "heron_environment",
    "heron_memory",
    "heron_files",
    "other_users_files",
    "files_outside_read",
    "files_outside_write",
    "other_processes",
    "signals",
    "outliving_the_call",
    "privileges",
    "resource_limits",
    "process_count",
    "network",
    "loopback",
]

ASPECTS: dict[Aspect, str] = {
    "heron_environment": "heron's environment (API keys): /proc/<heron>/environ, `ps e`",
    "heron_memory": "heron's memory: /proc/<heron>/mem and maps, ptrace",
    "heron_files": "private files of heron's user outside the workspace (home, configuration)",
    "other_users_files": "other users' private files (/etc/shadow, raw disks)",
    "files_outside_read": "files outside the workspace that any user may read",
    "files_outside_write": "writing, deleting or linking files outside the workspace",
    "other_processes": "seeing processes outside the sandbox and their command lines (heron's)",
    "signals": "signalling processes outside the sandbox (heron included)",
    "outliving_the_call": "processes left running after the call ends (setsid, double fork)",
    "privileges": "gaining privileges: setuid programs, mount, chroot, nsenter, cgroups",
    "resource_limits": "CPU, memory, file size, open files and output beyond their limits",
    "process_count": "more processes than the limit (fork bombs)",
    "network": "the network outside the sandbox",
    "loopback": "the host's loopback services (heron's own servers, local databases)",
}
"""Every aspect, in report order, with what it covers."""

UNATTENDED_REQUIRES: tuple[Aspect, ...] = (
    "heron_environment",
    "heron_memory",
    "heron_files",
    "files_outside_write",
)
"""What a sandbox must contain before a low-risk command may run with no operator."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Containment:
    """One aspect: contained or not, and the mechanism (or the reason it is not)."""

    aspect: Aspect
    contained: bool
    how: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ContainmentReport:
    """What one sandbox contains on this machine, aspect by aspect."""

    level: str
    network: str
    """The sandbox's default network mode."""
    items: tuple[Containment, ...]
    notes: tuple[str, ...] = field(default=())
    """Why a mechanism is missing here, and what would add it."""

    def item(self, aspect: Aspect) -> Containment:
        for entry in self.items:
            if entry.aspect == aspect:
                return entry
        raise KeyError(aspect)

    def contained(self, aspect: Aspect) -> bool:
        return self.item(aspect).contained

    def holds(self, *aspects: Aspect) -> bool:
        """Whether every named aspect is contained."""
        return all(self.contained(a) for a in aspects)

    def allows_unattended_low_risk(self) -> bool:
        """Whether heron's environment, memory and files and the files outside the workspace
        are contained (`UNATTENDED_REQUIRES`)."""
        return self.holds(*UNATTENDED_REQUIRES)

    def to_data(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "network": self.network,
            "contained": {i.aspect: i.contained for i in self.items},
            "how": {i.aspect: i.how for i in self.items},
            "notes": list(self.notes),
        }

    def render(self) -> str:
        """Plain text: one line per aspect, then the notes."""
        lines = [f"sandbox {self.level} (network {self.network})"]
        width = max(len(a) for a in ASPECTS)
        for entry in self.items:
            mark = "contained    " if entry.contained else "NOT contained"
            lines.append(f"  {mark}  {entry.aspect:<{width}}  {entry.how}")
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


def containment_report(sandbox: Sandbox, *, workspace: Path | None = None) -> ContainmentReport:
    """What `sandbox` contains on this machine. `workspace` is the writable tree to judge for a
    process sandbox built without one (default: the current directory)."""
    if isinstance(sandbox, BwrapSandbox):
        return _bwrap(sandbox)
    if isinstance(sandbox, ProcessSandbox):
        return _process(sandbox, workspace or sandbox.workspace or Path.cwd())
    unknown = f"unknown: {type(sandbox).__name__} does not describe its containment"
    return ContainmentReport(
        level=sandbox.level,
        network=sandbox.network_mode,
        items=tuple(Containment(aspect=a, contained=False, how=unknown) for a in ASPECTS),
    )


def describe_level(
    level: Literal["process", "bwrap"],
    *,
    workspace: Path,
    network: NetworkMode | None = None,
    limits: ResourceLimits | None = None,
) -> ContainmentReport:
    """The report for a level as heron would build it here (for `heron doctor`); a level that
    cannot be built is reported with every aspect not contained and the reason."""
    try:
        sandbox: Sandbox
        if level == "bwrap":
            sandbox = BwrapSandbox(workspace=workspace, limits=limits, network=network or "none")
        else:
            sandbox = ProcessSandbox(workspace=workspace, limits=limits, network=network or "host")
    except (SandboxUnavailable, ValueError) as exc:
        why = f"unavailable: {exc}"
        return ContainmentReport(
            level=level,
            network=network or "-",
            items=tuple(Containment(aspect=a, contained=False, how=why) for a in ASPECTS),
            notes=(str(exc),),
        )
    return containment_report(sandbox, workspace=workspace)


# --- the levels ---------------------------------------------------------------------------


def _limits_text(limits: ResourceLimits) -> tuple[bool, str]:
    parts = []
    unset = []
    for label, value, unit in (
        ("CPU", limits.cpu_seconds, "s"),
        ("memory", limits.address_space_bytes, "B"),
        ("file size", limits.file_size_bytes, "B"),
        ("open files", limits.open_files, ""),
    ):
        if value is None:
            unset.append(label)
        elif unit == "B":
            parts.append(f"{label} {value // MIB} MiB")
        else:
            parts.append(f"{label} {value}{(' ' + unit) if unit else ''}")
    text = ", ".join(parts) or "no rlimit set"
    text += f"; output kept up to {limits.max_output_bytes // MIB} MiB per stream"
    if limits.tmp_size_bytes:
        text += f"; private /tmp {limits.tmp_size_bytes // MIB} MiB"
    if unset:
        text += f"; unlimited: {', '.join(unset)}"
    text += "; set before exec, and hard limits cannot be raised without CAP_SYS_RESOURCE"
    text += " (the total disk use of the workspace is not limited)"
    return not unset, text


def _pids(sandbox: ProcessSandbox | BwrapSandbox, max_processes: int | None) -> Containment:
    mode = sandbox.pids_limit
    if max_processes is None or mode == "none":
        return Containment(aspect="process_count", contained=False, how="max_processes is not set")
    how = {
        "cgroup-v2": f"pids.max={max_processes} in a per-run cgroup (v2)",
        "cgroup-v1": f"pids.max={max_processes} in a per-run cgroup (v1 pids hierarchy)",
        "uid-rlimit": f"RLIMIT_NPROC={max_processes} of the dedicated user (shared by all of "
        "that user's processes on the host)",
        "rlimit": f"RLIMIT_NPROC={max_processes} of heron's user (counts all of its processes)",
    }[mode]
    return Containment(aspect="process_count", contained=True, how=how)


def _network(mode: NetworkMode, how_isolated: str) -> list[Containment]:
    if mode == "host":
        return [
            Containment(aspect="network", contained=False, how="network host: the host's network"),
            Containment(
                aspect="loopback",
                contained=False,
                how="network host: 127.0.0.1 and ::1 are the host's",
            ),
        ]
    own = "with its own loopback up" if mode == "loopback" else "with nothing but itself"
    return [
        Containment(aspect="network", contained=True, how=f"{how_isolated}, {own}"),
        Containment(
            aspect="loopback",
            contained=True,
            how=f"{how_isolated}: the host's loopback is another interface",
        ),
    ]


def _process(sandbox: ProcessSandbox, writable: Path) -> ContainmentReport:
    facts = sandbox.facts
    limits = sandbox.limits
    euid = os.geteuid()
    notes: list[str] = []
    items: list[Containment] = []

    def add(aspect: Aspect, contained: bool, how: str) -> None:
        items.append(Containment(aspect=aspect, contained=contained, how=how))

    limits_ok, limits_how = _limits_text(limits)
    if facts is None:  # limits only
        shared = "not confined (confine=False): the command runs as heron's user"
        for aspect in ASPECTS:
            if aspect == "resource_limits":
                add(aspect, limits_ok and euid != 0, limits_how)
            elif aspect == "process_count":
                items.append(_pids(sandbox, limits.max_processes))
            elif aspect in ("network", "loopback"):
                items += [i for i in _network("host", "") if i.aspect == aspect]
            else:
                add(aspect, False, shared)
        return ContainmentReport(level="process", network=sandbox.network_mode, items=tuple(items))
    notes += facts.problems
    who = sandbox.identity(writable)
    run_as = who.run_as
    try:
        plan = sandbox.plan(writable)
        hidden = [c for c, opts in plan.covers if "mode=0755" in opts] if plan else []
        private = [c for c, opts in plan.covers if "mode=1777" in opts] if plan else []
    except ValueError:
        hidden, private = [], []
    landlock = facts.landlock_abi
    hidepid = facts.namespaces and facts.proc_mount
    user_ns = facts.namespaces and facts.user_namespace
    root_no_caps = euid == 0 and run_as is None
    passed = "the command gets only the variables heron passes"
    if run_as is not None:
        uid = run_as[0]
        seen = "; /proc is mounted with hidepid, so heron's processes are not even listed"
        add(
            "heron_environment",
            True,
            f"{passed}; it runs as uid {uid}, which may not read /proc/<heron>/environ"
            + (seen if hidepid else ""),
        )
        add(
            "heron_memory",
            True,
            f"uid {uid} may not ptrace heron or read its /proc/<pid>/mem or maps"
            + (seen if hidepid else ""),
        )
        hide = f"; hidden (replaced by an empty directory): {', '.join(hidden)}" if hidden else ""
        add("heron_files", True, f"uid {uid} may not read heron's user's private files{hide}")
        add(
            "other_users_files",
            True,
            f"uid {uid}: files only their owners may read (/etc/shadow, raw disks) are refused",
        )
    elif root_no_caps:
        caps = "uid 0 without any capability"
        add(
            "heron_environment",
            True,
            f"{passed}; {caps} may not read the environment of a process holding capabilities "
            "(heron)",
        )
        add("heron_memory", True, f"{caps} may not ptrace heron or read its memory or maps")
        add("heron_files", False, f"{caps} still owns root's files")
        add("other_users_files", False, f"{caps} still owns /etc/shadow and the system's files")
    elif user_ns:
        how = "its own user namespace: /proc/<heron>/environ, mem and ptrace need rights over "
        how += "heron's namespace, which the command does not have"
        add("heron_environment", True, f"{passed}; {how}")
        add("heron_memory", True, how)
        add(
            "heron_files",
            False,
            "the command runs as heron's user (Landlock restricts writes, not reads)",
        )
        add(
            "other_users_files",
            True,
            "the kernel's permissions: heron's user may not read them either",
        )
    else:
        same = "the command runs as heron's user, which may read heron's /proc entries"
        add("heron_environment", False, f"{passed}, but {same}")
        add("heron_memory", False, same)
        add("heron_files", False, "the command runs as heron's user")
        add(
            "other_users_files",
            euid != 0,
            "the kernel's permissions: heron's user may not read them either",
        )
        notes.append(
            "allow unprivileged user namespaces (or use the bwrap level) to keep heron's "
            "environment and memory out of reach"
        )
    private_text = f"; private: {', '.join(private)}" if private else ""
    add(
        "files_outside_read",
        False,
        "the host's file system is visible: files any user may read can be read" + private_text,
    )
    if landlock:
        extra = f"; uid {run_as[0]}'s permissions as well" if run_as else ""
        add(
            "files_outside_write",
            True,
            f"Landlock (ABI {landlock}): writes only beneath the workspace, the private "
            f"temporary directories and /dev/null-like devices{extra}",
        )
    elif run_as is not None:
        add(
            "files_outside_write",
            False,
            f"uid {run_as[0]} may still write where any user may (outside the private "
            "temporary directories); Landlock would close that",
        )
    else:
        add("files_outside_write", False, "no Landlock: heron's user's permissions apply")
    scoped = landlock >= 6
    if run_as is not None and hidepid:
        add(
            "other_processes",
            True,
            f"/proc is mounted with hidepid: it lists only processes of uid {run_as[0]}, the "
            "command's own and those of other sandboxed commands running at that moment "
            "(there is no PID namespace at this level; bwrap has one)",
        )
    else:
        add(
            "other_processes",
            False,
            "other processes are listed in /proc with their command lines (no fresh /proc "
            "with hidepid here)",
        )
    scope = f"Landlock (ABI {landlock}) scopes signals to the sandbox"
    if run_as is not None:
        how = f"uid {run_as[0]} may not signal other users' processes"
        add("signals", True, f"{how}; {scope}" if scoped else how)
    elif scoped:
        add("signals", True, scope)
    else:
        add(
            "signals",
            False,
            "the command runs as heron's user and may signal heron (Landlock ABI 6 would "
            "scope signals to the sandbox)",
        )
    if sandbox.pids_limit.startswith("cgroup"):
        add(
            "outliving_the_call",
            True,
            "every process joins a per-run cgroup that is emptied when the call ends; the "
            "command also dies with heron",
        )
    else:
        add(
            "outliving_the_call",
            False,
            "the process group is killed when the call ends, but a process that starts its own "
            "session (setsid) survives (no writable pids cgroup)",
        )
    nnp = "no_new_privs (setuid programs gain nothing)"
    lock = "; Landlock forbids mount" if landlock else ""
    if run_as is not None:
        how = f"uid {run_as[0]} holds no capability; {nnp}{lock}"
    elif root_no_caps:
        how = f"every capability dropped, also from the bounding set; {nnp}{lock}"
    else:
        how = f"heron's user holds no capability; {nnp}{lock}"
    add("privileges", True, how)
    add("resource_limits", limits_ok, limits_how)
    items.append(_pids(sandbox, limits.max_processes))
    if sandbox.network_mode == "host" or facts.network_namespace:
        items += _network(sandbox.network_mode, "its own network namespace")
    notes.append(f"identity: {who.why}")
    if who.idmap_fd >= 0:
        try:
            owner = writable.stat().st_uid
        except OSError:
            owner = euid
        if owner != euid:
            notes.append(
                f"the workspace belongs to uid {owner}, not heron's: only files of heron's "
                "user are writable for the command (the idmap maps that one)"
            )
    order = list(ASPECTS)
    items.sort(key=lambda i: order.index(i.aspect))
    return ContainmentReport(
        level="process", network=sandbox.network_mode, items=tuple(items), notes=tuple(notes)
    )


def _bwrap(sandbox: BwrapSandbox) -> ContainmentReport:
    limits = sandbox.limits
    items: list[Containment] = []

    def add(aspect: Aspect, contained: bool, how: str) -> None:
        items.append(Containment(aspect=aspect, contained=contained, how=how))

    pid_ns = "its own PID namespace: heron's processes do not exist inside"
    mounted = _mounted(sandbox.ro_binds)
    add(
        "heron_environment",
        True,
        f"the command gets only the variables heron passes; {pid_ns}",
    )
    add("heron_memory", True, pid_ns)
    add("heron_files", True, f"not mounted: only {mounted} and the workspace are visible")
    add("other_users_files", True, "not mounted: a minimal /etc without shadow, a minimal /dev")
    add("files_outside_read", True, f"only {mounted} (read-only) and the workspace are visible")
    add(
        "files_outside_write",
        True,
        "everything but the workspace and a private /tmp is mounted read-only, and the "
        "command holds no capability to remount it",
    )
    add("other_processes", True, pid_ns)
    add("signals", True, f"{pid_ns}, so it cannot be named in a signal")
    add(
        "outliving_the_call",
        True,
        "when the command exits, its PID namespace ends and every process in it; bubblewrap "
        "dies with heron (--die-with-parent)",
    )
    uid = sandbox.run_as_uid
    who = f"uid {uid}" if uid is not None else "--cap-drop ALL"
    add(
        "privileges",
        True,
        f"{who}, no_new_privs, a new session; a user namespace made inside gains nothing: the "
        "mounts are read-only and locked",
    )
    limits_ok, limits_how = _limits_text(limits)
    add("resource_limits", limits_ok, limits_how)
    items.append(_pids(sandbox, limits.max_processes))
    items += _network(sandbox.network_mode, "its own network namespace (bubblewrap)")
    notes: tuple[str, ...] = ()
    if sandbox.network_mode == "loopback":
        notes = (
            "bubblewrap always brings the sandbox's own loopback up: none and loopback "
            "are the same at this level",
        )
    return ContainmentReport(
        level="bwrap", network=sandbox.network_mode, items=tuple(items), notes=notes
    )


def _mounted(extra: Sequence[Path]) -> str:
    system = "/usr, /bin, /lib*, a minimal /etc"
    return f"{system}, {', '.join(str(p) for p in extra)}" if extra else system
