"""Files of a folder that came from outside (a cloned repository's skills or agent files),
opened as hostile input: only regular files, only inside the folder.

Anything in such a folder may be a trap: a FIFO or a device where a file is expected (an `open`
that never returns, a read that never ends), or a symbolic link to the operator's own files
(`~/.ssh/id_rsa` shown in a diff, stored in the trust store). `open_inside` opens one file only
when it resolves inside the folder and is a regular file, checked on the open descriptor, which
is opened non-blocking so a FIFO cannot hold it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from heron.errors import HeronError

__all__ = [
    "FileRefused",
    "FileTooLarge",
    "check_relative",
    "kind_of",
    "open_inside",
    "open_regular",
    "read_at_most",
    "real_path",
]

_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symbolic link",
}
_OPEN_FLAGS = (
    os.O_RDONLY
    | os.O_NONBLOCK  # a FIFO opens at once instead of waiting for a writer
    | os.O_NOFOLLOW  # the path opened is already resolved: a link here was swapped in
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NOCTTY", 0)
)


class FileRefused(HeronError, OSError):
    """A file of a folder from outside that heron does not open: outside the folder, not a
    regular file, or a path that is not a plain relative one. An `OSError`, as a failed open is."""

    def __init__(self, message: str, *, outside: bool = False) -> None:
        super().__init__(message)
        self.outside = outside
        """The path leads out of the folder (`..`, absolute, a link)."""


class FileTooLarge(FileRefused):
    """A file over its reader's bound, as opened or as read (it grew meanwhile)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"it is {size:,} bytes; at most {limit:,} are read")
        self.size = size
        """The size seen: at open, or as read (then the bound and one byte)."""
        self.limit = limit


def read_at_most(handle: BinaryIO, size: int, limit: int) -> bytes:
    """All of a file opened by `open_regular` (`size` as opened) when it is at most `limit`
    bytes; never reads more than one byte past the bound. Raises `FileTooLarge`."""
    data = handle.read(limit + 1) if size <= limit else b""
    if size > limit or len(data) > limit:
        raise FileTooLarge(max(size, len(data)), limit)
    return data


def kind_of(mode: int) -> str:
    """What a file mode is, for a message (`a FIFO`)."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def check_relative(rel: str, *, place: str = "the folder") -> str | None:
    """Why `rel` is not a plain path relative to a folder (`place` names it), or None."""
    if "\x00" in rel:
        return "the path holds a NUL byte"
    if rel.startswith(("/", "\\")) or os.path.isabs(rel):
        return f"it is an absolute path; give it relative to {place}"
    if ".." in PurePosixPath(rel.replace("\\", "/")).parts:
        return f"'..' would leave {place}"
    return None


def _inside(folder: Path, rel: str, place: str) -> Path:
    """`folder / rel` resolved, when it stays inside `folder` (resolved too)."""
    why = check_relative(rel, place=place)
    if why is not None:
        raise FileRefused(f"{rel!r}: {why}", outside=True)
    base = real_path(folder)
    target = real_path(base / rel)
    if not target.is_relative_to(base):
        raise FileRefused(f"{rel!r} links out of {place} (to {target})", outside=True)
    return target


def real_path(path: Path) -> Path:
    # realpath, not Path.resolve: a link loop must not raise RuntimeError.
    return Path(os.path.realpath(path))


@contextmanager
def open_inside(
    folder: Path, rel: str, *, place: str = "the folder", shown: str | None = None
) -> Iterator[tuple[BinaryIO, int]]:
    """`folder / rel` open for reading, with its size: only a regular file inside `folder`
    (`place` names it in messages: "the skill's folder"; `shown` the file, else `rel`).

    Raises `FileRefused` for a path out of the folder or a file that is not regular
    (FIFO, device, socket, directory), and the usual `OSError`s (missing, permission)."""
    with open_regular(_inside(folder, rel, place), shown=shown or repr(rel)) as opened:
        yield opened


@contextmanager
def open_regular(
    path: Path, *, shown: str | None = None, follow: bool = False
) -> Iterator[tuple[BinaryIO, int]]:
    """`path` open for reading, with its size, when it is a regular file (checked on the open
    descriptor; a FIFO never holds the open). `follow` follows a last link (a path a user
    named); `open_inside` has resolved its path already. Raises `FileRefused` or `OSError`."""
    fd = os.open(path, _OPEN_FLAGS & ~os.O_NOFOLLOW if follow else _OPEN_FLAGS)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            name = shown or str(path)
            raise FileRefused(f"{name} is not a regular file ({kind_of(info.st_mode)})")
        os.set_blocking(fd, True)
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with fh:
        yield fh, info.st_size
