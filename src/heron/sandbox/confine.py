"""How the `process` level confines a command: probed once, planned per run, applied in the child.

`HostFacts.probe()` finds out once per heron process what this kernel lets heron do (namespaces,
a fresh `/proc`, idmapped mounts, Landlock). `Confinement` turns that into a plan for one run,
and `Confinement.apply()` carries it out in the child between `fork` and `exec`:

1. new mount, IPC and UTS namespaces (plus a network namespace unless the network is `host`);
   as a normal user inside a new user namespace that maps heron's uid to itself;
2. private `/tmp`, `/var/tmp` and `/dev/shm` (size-limited tmpfs), and every directory the
   command's user may not enter (`/root`, a private home, pytest's temporary root) replaced by
   an empty one, with the paths heron must keep reachable (the workspace, heron's Python, extra
   read-only paths) bound back at their own place (heron's Python read-only even inside the
   workspace);
3. as root: the workspace bound **idmapped**, so the dedicated unprivileged user (`nobody` by
   default) owns what heron's user owns there and files it creates belong to heron's user on
   disk; a fresh `/proc` with `hidepid`, so heron and every other process of another user are
   invisible;
4. the identity switch (root: to the dedicated user, which also drops every capability), the
   parent-death signal, no_new_privs (setuid programs gain nothing);
5. Landlock: writes only beneath the workspace, the private temporary directories and a few
   devices (`/dev/null`, ...); no signals to processes outside the sandbox and no abstract
   UNIX sockets outside it (ABI 6).

A step the kernel does not allow is left out of the plan, never tried and ignored: the plan says
what binds, and `heron.sandbox.containment` reports it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import stat
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from heron.sandbox import _linux as k
from heron.sandbox.base import NetworkMode

__all__ = ["Confinement", "HostFacts"]

PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
"""World-writable directories replaced by a private tmpfs in every run."""
WRITABLE_DEVICES = (
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/random",
    "/dev/urandom",
)
_HIDE_OPTIONS = "mode=0755,size=1m"


@dataclass(frozen=True, kw_only=True, slots=True)
class HostFacts:
    """What this kernel lets heron do, found by trying it once in a throw-away child."""

    euid: int
    egid: int
    landlock_abi: int
    """0: no Landlock (kernel without it, or disabled)."""
    namespaces: bool
    """A new mount, IPC and UTS namespace can be made (as root, or inside a user namespace)."""
    user_namespace: bool
    """Namespaces need a user namespace first (heron is not root)."""
    network_namespace: bool
    proc_mount: bool
    """A fresh `/proc` with `hidepid` can be mounted (root only: a user namespace may not)."""
    last_cap: int
    problems: tuple[str, ...] = ()
    """Why a mechanism is missing, in words."""

    @staticmethod
    @functools.cache
    def probe() -> HostFacts:
        """The facts for this process (cached: the kernel does not change under heron)."""
        euid, egid = os.geteuid(), os.getegid()
        abi = k.landlock_abi()
        problems = [] if abi else ["Landlock is not available in this kernel"]
        worked, failure = _probe_namespaces(euid, egid)
        if failure:
            step = "a fresh /proc" if "ns" in worked else "namespaces"
            problems.append(f"{step} unavailable here ({failure})")
        return HostFacts(
            euid=euid,
            egid=egid,
            landlock_abi=abi,
            namespaces="ns" in worked,
            user_namespace=euid != 0,
            network_namespace="net" in worked,
            proc_mount="proc" in worked,
            last_cap=k.last_capability(),
            problems=tuple(problems),
        )


def _probe_namespaces(euid: int, egid: int) -> tuple[set[str], str]:
    """Try the namespace steps in a child that then runs `true`: the steps that worked
    (`ns`, `net`, `proc`) and the error that stopped the rest (empty when none did)."""
    read_end, write_end = os.pipe()

    def attempt() -> None:
        done: dict[str, object] = {"worked": []}
        worked: list[str] = []
        try:
            flags = k.CLONE_NEWNS | k.CLONE_NEWIPC | k.CLONE_NEWUTS
            for extra in (k.CLONE_NEWNET, 0):
                try:
                    if euid != 0:
                        _enter_user_namespace(flags | extra, euid, egid)
                    else:
                        k.unshare(flags | extra)
                except OSError:
                    if not extra:
                        raise
                    continue
                if extra:
                    worked.append("net")
                break
            k.mount(None, "/", None, k.MS_REC | k.MS_PRIVATE)
            k.mount("tmpfs", "/tmp", "tmpfs", k.MS_NOSUID | k.MS_NODEV, "size=1m")
            worked.append("ns")
            if "net" in worked:
                k.loopback_up()
            if euid == 0:
                k.mount(
                    "proc", "/proc", "proc", k.MS_NOSUID | k.MS_NODEV | k.MS_NOEXEC, "hidepid=2"
                )
                worked.append("proc")
        except OSError as exc:
            done["error"] = str(exc)
        done["worked"] = worked
        os.write(write_end, json.dumps(done).encode())

    try:
        with open(os.devnull, "rb") as devnull:
            subprocess.run(
                ["/bin/true"],
                stdin=devnull,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=attempt,
                check=False,
                timeout=10,
            )
        os.close(write_end)
        write_end = -1
        answer = json.loads(os.read(read_end, 4096) or b"{}")
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        answer = {"error": str(exc)}
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    return {str(w) for w in answer.get("worked", [])}, str(answer.get("error", ""))


def _enter_user_namespace(flags: int, uid: int, gid: int) -> None:
    """As a normal user: a new user namespace (with `flags`) mapping heron's ids to themselves."""
    k.unshare(k.CLONE_NEWUSER | flags)
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")


@functools.cache
def idmap_userns(host_uid: int, host_gid: int, as_uid: int, as_gid: int) -> int:
    """A user namespace (as a file descriptor, kept for the process) for idmapped mounts that
    show files of `host_uid:host_gid` as owned by `as_uid:as_gid`. Raises `OSError`."""
    holder = subprocess.Popen(
        ["/bin/cat"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: k.unshare(k.CLONE_NEWUSER),
    )
    try:
        Path(f"/proc/{holder.pid}/uid_map").write_text(f"{host_uid} {as_uid} 1")
        Path(f"/proc/{holder.pid}/gid_map").write_text(f"{host_gid} {as_gid} 1")
        return os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(5)


_idmap_support: dict[int, str | None] = {}


def idmap_problem(path: Path, userns_fd: int) -> str | None:
    """Why `path`'s file system cannot be idmapped here, or None when it can (cached per device)."""
    device = os.stat(path).st_dev
    if device in _idmap_support:
        return _idmap_support[device]
    read_end, write_end = os.pipe()

    def attempt() -> None:
        message = "ok"
        try:
            k.unshare(k.CLONE_NEWNS)
            k.mount(None, "/", None, k.MS_REC | k.MS_PRIVATE)
            tree = k.clone_tree(str(path))
            k.set_tree_attributes(tree, k.MOUNT_ATTR_IDMAP, userns_fd)
        except OSError as exc:
            message = str(exc)
        os.write(write_end, message.encode())

    try:
        subprocess.run(
            ["/bin/true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=attempt,
            check=False,
            timeout=10,
        )
        os.close(write_end)
        write_end = -1
        answer = os.read(read_end, 4096).decode() or "the probe did not report"
    except (OSError, subprocess.SubprocessError) as exc:
        answer = str(exc)
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    problem = None if answer == "ok" else f"idmapped mounts unavailable on {path} ({answer})"
    _idmap_support[device] = problem
    return problem


def enterable(path: Path, uid: int, gid: int) -> bool:
    """Whether `uid:gid` (with no supplementary groups) may search directory `path`."""
    try:
        info = path.stat()
    except OSError:
        return False
    if uid == 0:
        return True
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid == gid:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


@dataclass(frozen=True, kw_only=True, slots=True)
class Confinement:
    """The plan for one run: what the child does between `fork` and `exec` (see the module)."""

    namespaces: int = 0
    """`CLONE_*` flags for `unshare` (0: no namespaces)."""
    user_namespace: tuple[int, int] | None = None
    """`(uid, gid)` mapped to themselves in a new user namespace (heron is not root)."""
    covers: tuple[tuple[str, str], ...] = ()
    """`(directory, tmpfs options)`, outermost first: private temporary directories and
    directories hidden from the command's user."""
    binds: tuple[tuple[str, bool], ...] = ()
    """`(path, writable)` bound back at their place after the covers; the writable one (the
    workspace) is idmapped when `idmap_fd` is set, the others are read-only."""
    state_covers: tuple[str, ...] = ()
    """Directories mounted over last, empty and read-only: heron's state directories inside
    the workspace."""
    idmap_fd: int = -1
    proc: bool = False
    """Mount a fresh `/proc` with `hidepid=2`."""
    loopback: bool = False
    cwd: str = "/"
    run_as: tuple[int, int] | None = None
    """`(uid, gid)` to switch to (heron is root)."""
    drop_capabilities: bool = False
    """Stay uid 0 but without any capability (root, when the uid switch is impossible)."""
    landlock_abi: int = 0
    landlock_rules: tuple[tuple[str, int], ...] = ()
    landlock_scoped: int = 0
    last_cap: int = 40
    die_with_parent: bool = True
    tags: tuple[str, ...] = field(default=())
    """Short names of what binds, for `RunResult.metadata["confinement"]`."""

    @classmethod
    def plan(
        cls,
        facts: HostFacts,
        *,
        writable: Path,
        cwd: Path,
        exposed: Sequence[Path],
        network: NetworkMode,
        hidden: Sequence[Path] = (),
        run_as: tuple[int, int] | None,
        idmap_fd: int,
        private_size_bytes: int | None,
    ) -> Confinement:
        """The plan for a run whose writable tree is `writable`, started in `cwd`.

        `run_as` is the unprivileged user to switch to (None: keep heron's uid, or drop root's
        capabilities); `idmap_fd` the user namespace that idmaps `writable` for it (-1: none);
        `hidden` the directories inside `writable` covered by an empty read-only one (heron's
        state directories).
        """
        tags: list[str] = []
        namespaces = 0
        state_covers: tuple[str, ...] = ()
        covers: list[tuple[str, str]] = []
        binds: list[tuple[str, bool]] = []
        if facts.namespaces:
            namespaces = k.CLONE_NEWNS | k.CLONE_NEWIPC | k.CLONE_NEWUTS
            if network != "host":
                namespaces |= k.CLONE_NEWNET
                tags.append(f"netns-{network}")
            tags.append("userns" if facts.user_namespace else "mountns")
            size = f",size={private_size_bytes}" if private_size_bytes else ""
            covers += [
                (d, f"mode=1777{size}")
                for d in PRIVATE_DIRS
                if os.path.isdir(d) and not os.path.islink(d)
            ]
            reachable = [writable, *exposed]
            if run_as is not None:
                for target in reachable:
                    for parent in reversed(target.parents):
                        if not enterable(parent, *run_as):
                            covers.append((str(parent), _HIDE_OPTIONS))
                            break
            covers = _outermost(covers)
            for path in sorted(set(reachable), key=lambda p: len(p.parts)):
                text = str(path)
                is_writable = path == writable
                under_cover = any(_within(text, c) for c, _ in covers)
                # heron's own Python inside the workspace stays read-only: code planted there
                # would run in heron itself.
                in_workspace = not is_writable and _within(text, str(writable))
                if under_cover or in_workspace or (is_writable and idmap_fd >= 0):
                    binds.append((text, is_writable))
            state_covers = tuple(str(d) for d in hidden)
            if state_covers:
                tags.append("state-hidden")
            if idmap_fd >= 0:
                tags.append("idmap")
            if facts.proc_mount:
                tags.append("hidepid")
        if run_as is not None:
            tags.append(f"uid-{run_as[0]}")
        elif facts.euid == 0:
            tags.append("no-capabilities")
        rules: list[tuple[str, int]] = []
        scoped = 0
        abi = facts.landlock_abi
        if abi:
            write = k.landlock_write_rights(abi)
            rules.append((str(writable), write))
            rules += [(c, write) for c, opts in covers if c in PRIVATE_DIRS]
            rules += [(d, k.LL_WRITE_FILE | k.LL_TRUNCATE) for d in WRITABLE_DEVICES]
            scoped = k.LL_SCOPE_SIGNAL | k.LL_SCOPE_ABSTRACT_UNIX_SOCKET
            tags.append(f"landlock-{abi}")
        plan = cls(
            namespaces=namespaces,
            state_covers=state_covers,
            user_namespace=(facts.euid, facts.egid)
            if namespaces and facts.user_namespace
            else None,
            covers=tuple(covers),
            binds=tuple(binds),
            idmap_fd=idmap_fd if namespaces else -1,
            proc=bool(namespaces) and facts.proc_mount,
            loopback=network == "loopback",
            cwd=str(cwd),
            run_as=run_as,
            drop_capabilities=facts.euid == 0 and run_as is None,
            landlock_abi=abi,
            landlock_rules=tuple(rules),
            landlock_scoped=scoped,
            last_cap=facts.last_cap,
            tags=tuple(tags),
        )
        if plan.hides(cwd):
            raise ValueError(f"cwd {cwd} is hidden inside the sandbox (not under {writable})")
        return plan

    def hides(self, path: Path) -> bool:
        """Whether `path` is out of sight in the run (under a cover and not bound back)."""
        text = str(path)
        if any(_within(text, c) for c in self.state_covers):
            return True
        return any(_within(text, c) for c, _ in self.covers) and not any(
            _within(text, b) for b, _ in self.binds
        )

    def apply(self, report_fd: int = -1) -> None:
        """Carry out the plan in the child (between `fork` and `exec`). On failure the step and
        the error are written to `report_fd` and the exception propagates (no exec happens)."""
        step = "start"
        try:
            if self.namespaces:
                step = "namespaces"
                if self.user_namespace is not None:
                    _enter_user_namespace(self.namespaces, *self.user_namespace)
                else:
                    k.unshare(self.namespaces)
                k.mount(None, "/", None, k.MS_REC | k.MS_PRIVATE)
                step = "mounts"
                self._mount()
                if self.loopback:
                    step = "loopback"
                    k.loopback_up()
            if self.run_as is not None:
                uid, gid = self.run_as
                step = "standard streams"
                _own_pipes(uid, gid)
                step = "identity"
                os.setgroups([])
                os.setresgid(gid, gid, gid)
                os.setresuid(uid, uid, uid)
            elif self.drop_capabilities:
                step = "capabilities"
                k.drop_all_capabilities(self.last_cap)
            step = "cwd"
            os.chdir(self.cwd)
            if self.die_with_parent:
                step = "parent-death signal"
                k.die_with_parent(signal.SIGKILL)
            step = "no_new_privs"
            k.no_new_privs()
            if self.landlock_abi:
                step = "landlock"
                k.landlock_restrict(
                    self.landlock_abi,
                    handled_fs=k.landlock_write_rights(self.landlock_abi),
                    rules=list(self.landlock_rules),
                    scoped=self.landlock_scoped,
                )
        except BaseException as exc:
            if report_fd >= 0:
                with contextlib.suppress(OSError):
                    os.write(report_fd, f"{step}: {exc}".encode(errors="replace"))
            raise

    def _mount(self) -> None:
        trees: list[tuple[str, int]] = []
        for path, writable in self.binds:  # detached copies first: the covers hide the paths
            tree = k.clone_tree(path)
            if writable and self.idmap_fd >= 0:
                k.set_tree_attributes(tree, k.MOUNT_ATTR_IDMAP, self.idmap_fd)
            elif not writable:
                k.set_tree_attributes(tree, k.MOUNT_ATTR_RDONLY)
            trees.append((path, tree))
        for directory, options in self.covers:
            k.mount("tmpfs", directory, "tmpfs", k.MS_NOSUID | k.MS_NODEV, options)
        for path, tree in trees:
            if not os.path.lexists(path):
                if stat.S_ISDIR(os.fstat(tree).st_mode):
                    os.makedirs(path, mode=0o755, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                    os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
            k.attach_tree(tree, path)
            os.close(tree)
        for directory in self.state_covers:
            k.mount(
                "tmpfs", directory, "tmpfs", k.MS_NOSUID | k.MS_NODEV | k.MS_RDONLY, _HIDE_OPTIONS
            )
        if self.proc:
            k.mount("proc", "/proc", "proc", k.MS_NOSUID | k.MS_NODEV | k.MS_NOEXEC, "hidepid=2")


def _own_pipes(uid: int, gid: int) -> None:
    """Give the command's user its stdin/stdout/stderr pipes, so that reopening them
    (`echo x > /dev/stderr`, which goes through `/proc/self/fd/2`) is not refused."""
    for fd in (0, 1, 2):
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            continue
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):  # never a device such as /dev/null
            os.fchown(fd, uid, gid)


def _outermost(covers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Drop covers inside another cover (that one hides them already); outermost first."""
    kept: list[tuple[str, str]] = []
    for path, options in sorted(dict(covers).items(), key=lambda c: c[0].count("/")):
        if not any(_within(path, other) for other, _ in kept):
            kept.append((path, options))
    return kept
