"""The few Linux system calls the process sandbox needs that `os` does not offer.

Namespaces (`unshare`), mounts (`mount`, and the new mount API: `open_tree`, `move_mount`,
`mount_setattr` for read-only and idmapped bind mounts), Landlock, capabilities and a few
`prctl`s, through `ctypes`. Everything here runs in the child between `fork` and `exec` as well
as in heron, so each wrapper is a plain system call that raises `OSError` on failure and
allocates nothing but its arguments. The system call numbers used are the same on every
architecture (they were added after the tables were unified, from number 424 on).

Imported only by the process sandbox, and only when it confines commands: `ctypes` costs
start-up time that a CLI which never runs a command should not pay.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REC = 0x4000
MS_PRIVATE = 1 << 18

_SYS_OPEN_TREE = 428
_SYS_MOVE_MOUNT = 429
_SYS_MOUNT_SETATTR = 442
_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446

_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000
_AT_RECURSIVE = 0x8000
_OPEN_TREE_CLONE = 1
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
MOUNT_ATTR_IDMAP = 0x00100000

_PR_SET_PDEATHSIG = 1
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAPABILITY_VERSION_3 = 0x20080522

# Landlock access rights (include/uapi/linux/landlock.h).
LL_EXECUTE = 1 << 0
LL_WRITE_FILE = 1 << 1
LL_READ_FILE = 1 << 2
LL_READ_DIR = 1 << 3
LL_REMOVE_DIR = 1 << 4
LL_REMOVE_FILE = 1 << 5
LL_MAKE_CHAR = 1 << 6
LL_MAKE_DIR = 1 << 7
LL_MAKE_REG = 1 << 8
LL_MAKE_SOCK = 1 << 9
LL_MAKE_FIFO = 1 << 10
LL_MAKE_BLOCK = 1 << 11
LL_MAKE_SYM = 1 << 12
LL_REFER = 1 << 13  # ABI 2
LL_TRUNCATE = 1 << 14  # ABI 3
LL_NET_BIND_TCP = 1 << 0  # ABI 4
LL_NET_CONNECT_TCP = 1 << 1
LL_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
LL_SCOPE_SIGNAL = 1 << 1
_LL_RULE_PATH_BENEATH = 1
_LL_CREATE_RULESET_VERSION = 1 << 0

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFF_RUNNING = 0x40


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_char_p,
]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.prctl.argtypes = [
    ctypes.c_int,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
]


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            flags,
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def clone_tree(path: str) -> int:
    """A detached copy of the mount tree at `path` (with its submounts), as a file descriptor."""
    flags = _OPEN_TREE_CLONE | os.O_CLOEXEC | _AT_RECURSIVE
    return _check(
        _libc.syscall(_SYS_OPEN_TREE, _AT_FDCWD, path.encode(), flags), f"open_tree {path}"
    )


def set_tree_attributes(tree_fd: int, attr_set: int, userns_fd: int = 0) -> None:
    """Make a detached tree read-only (`MOUNT_ATTR_RDONLY`) or idmapped (`MOUNT_ATTR_IDMAP`)."""
    attr = _MountAttr(attr_set, 0, 0, userns_fd)
    flags = _AT_EMPTY_PATH | _AT_RECURSIVE
    _check(
        _libc.syscall(
            _SYS_MOUNT_SETATTR,
            tree_fd,
            b"",
            flags,
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
        ),
        "mount_setattr",
    )


def attach_tree(tree_fd: int, target: str) -> None:
    """Mount a detached tree at `target`."""
    _check(
        _libc.syscall(
            _SYS_MOVE_MOUNT, tree_fd, b"", _AT_FDCWD, target.encode(), _MOVE_MOUNT_F_EMPTY_PATH
        ),
        f"move_mount {target}",
    )


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers, 0 when Landlock is off or absent."""
    try:
        version = _libc.syscall(
            _SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), _LL_CREATE_RULESET_VERSION
        )
    except OSError:
        return 0
    return max(int(version), 0)


def landlock_restrict(
    abi: int,
    *,
    handled_fs: int,
    rules: list[tuple[str, int]],
    handled_net: int = 0,
    scoped: int = 0,
) -> None:
    """Confine this thread (and everything it starts) with one Landlock ruleset.

    `rules` grants `(path, rights)`; a path that does not exist is skipped. The caller must
    have set no_new_privs (or hold CAP_SYS_ADMIN).
    """
    attr = _RulesetAttr(handled_fs, handled_net if abi >= 4 else 0, scoped if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = _check(
        _libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0),
        "landlock_create_ruleset",
    )
    try:
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                allowed = rights & handled_fs
                if not os.path.isdir(path):  # files take file rights only
                    allowed &= LL_WRITE_FILE | LL_TRUNCATE | LL_READ_FILE | LL_EXECUTE
                rule = _PathBeneath(allowed, fd)
                _check(
                    _libc.syscall(
                        _SYS_LANDLOCK_ADD_RULE,
                        ruleset,
                        _LL_RULE_PATH_BENEATH,
                        ctypes.byref(rule),
                        0,
                    ),
                    f"landlock_add_rule {path}",
                )
            finally:
                os.close(fd)
        _check(_libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def landlock_write_rights(abi: int) -> int:
    """Every right that changes the file system, for this ABI."""
    rights = (
        LL_WRITE_FILE
        | LL_REMOVE_DIR
        | LL_REMOVE_FILE
        | LL_MAKE_CHAR
        | LL_MAKE_DIR
        | LL_MAKE_REG
        | LL_MAKE_SOCK
        | LL_MAKE_FIFO
        | LL_MAKE_BLOCK
        | LL_MAKE_SYM
    )
    if abi >= 2:
        rights |= LL_REFER
    if abi >= 3:
        rights |= LL_TRUNCATE
    return rights


def no_new_privs() -> None:
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")


def die_with_parent(sig: int) -> None:
    _check(_libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0), "prctl(PDEATHSIG)")


def drop_all_capabilities(last_cap: int) -> None:
    """Empty the bounding, ambient, effective, permitted and inheritable sets for good."""
    for cap in range(last_cap + 1):
        _check(_libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), "prctl(CAPBSET_DROP)")
    _check(_libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "prctl(CAP_AMBIENT)")
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")


def last_capability() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 40


def loopback_up() -> None:
    """Bring `lo` up in the current network namespace."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh22x", b"lo", 0)
        flags = struct.unpack("16sh22x", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(
            sock, _SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", flags | _IFF_UP | _IFF_RUNNING)
        )
