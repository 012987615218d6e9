"""The files of a skill folder, read as hostile input: only regular files, only inside the
folder, never more than asked for, and never a walk without an end.

A project's skill folder comes with the repository, so anything in it may be a trap: a FIFO or
a device where a file is expected (an `open` that never returns, a read that never ends), a
symbolic link to the operator's own files (`~/.ssh/id_rsa` shown in a diff, stored in the trust
store), a tree of a million entries. `open_inside` opens one file only when it resolves inside
the folder and is a regular file (checked on the open descriptor, opened non-blocking so a FIFO
cannot hold it); `walk_skill` lists the folder without following links out of it and stops at
a bound, saying what it left out.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from heron.errors import HeronError

__all__ = [
    "MAX_ENTRIES",
    "MAX_FILES",
    "SkillFileRefused",
    "SkillTree",
    "check_relative",
    "kind_of",
    "open_inside",
    "walk_skill",
]

MAX_FILES = 200
"""Files listed (and pinned) per skill; a skill with more is listed in part and, from a
project, cannot be pinned."""
MAX_ENTRIES = 5_000
"""Directory entries a walk looks at (hidden ones included) before it stops."""

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


class SkillFileRefused(HeronError, OSError):
    """A file of a skill folder that heron does not open: outside the folder, not a regular
    file, or a path that is not a plain relative one. An `OSError`, as a failed open is."""

    def __init__(self, message: str, *, outside: bool = False) -> None:
        super().__init__(message)
        self.outside = outside
        """The path leads out of the folder (`..`, absolute, a link)."""


def kind_of(mode: int) -> str:
    """What a file mode is, for a message (`a FIFO`)."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def check_relative(rel: str) -> str | None:
    """Why `rel` is not a plain path relative to a folder, or None when it is."""
    if "\x00" in rel:
        return "the path holds a NUL byte"
    if rel.startswith(("/", "\\")) or os.path.isabs(rel):
        return "it is an absolute path; give it relative to the skill's folder"
    if ".." in PurePosixPath(rel.replace("\\", "/")).parts:
        return "'..' would leave the skill's folder"
    return None


def _inside(folder: Path, rel: str) -> Path:
    """`folder / rel` resolved, when it stays inside `folder` (resolved too)."""
    why = check_relative(rel)
    if why is not None:
        raise SkillFileRefused(f"{rel!r}: {why}", outside=True)
    base = _real(folder)
    target = _real(base / rel)
    if not target.is_relative_to(base):
        raise SkillFileRefused(
            f"{rel!r} links out of the skill's folder (to {target})", outside=True
        )
    return target


def _real(path: Path) -> Path:
    # realpath, not Path.resolve: a link loop must not raise RuntimeError.
    return Path(os.path.realpath(path))


@contextmanager
def open_inside(folder: Path, rel: str) -> Iterator[tuple[BinaryIO, int]]:
    """`folder / rel` open for reading, with its size: only a regular file inside `folder`.

    Raises `SkillFileRefused` for a path out of the folder or a file that is not regular
    (FIFO, device, socket, directory), and the usual `OSError`s (missing, permission)."""
    target = _inside(folder, rel)
    fd = os.open(target, _OPEN_FLAGS)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SkillFileRefused(f"{rel!r} is not a regular file ({kind_of(info.st_mode)})")
        os.set_blocking(fd, True)
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with fh:
        yield fh, info.st_size


@dataclass(frozen=True, kw_only=True, slots=True)
class SkillTree:
    """What a walk of a skill folder found, relative to the folder."""

    files: tuple[str, ...] = ()
    """Regular files (links to regular files inside the folder included), SKILL.md excluded;
    hidden ones are not looked at."""
    links_out: tuple[tuple[str, str], ...] = ()
    """Links that lead out of the folder, with where they end up: never listed or read."""
    odd: tuple[tuple[str, str], ...] = ()
    """Entries that are not regular files (FIFOs, devices, sockets, broken links), with why
    (`it is not a regular file (a FIFO)`)."""
    unreadable: tuple[tuple[str, str], ...] = ()
    """Directories the walk could not list, with why."""
    truncated: bool = False
    """More than `MAX_FILES` files or `MAX_ENTRIES` entries: the walk stopped."""


def walk_skill(folder: Path, *, skip: str = "SKILL.md") -> SkillTree:
    """The files of a skill folder, in path order, within the bounds; links are followed only
    when they stay inside the folder, directories behind links are not entered."""
    base = _real(folder)
    files: list[str] = []
    links_out: list[tuple[str, str]] = []
    odd: list[tuple[str, str]] = []
    unreadable: list[tuple[str, str]] = []
    seen = 0
    pending: list[PurePosixPath] = [PurePosixPath()]
    while pending:
        rel_dir = pending.pop()
        try:
            with os.scandir(base / rel_dir) as it:
                entries = []
                for entry in it:
                    seen += 1
                    if seen > MAX_ENTRIES:
                        break
                    entries.append(entry)
        except OSError as exc:
            unreadable.append((rel_dir.as_posix(), exc.strerror or str(exc)))
            continue
        subdirs: list[PurePosixPath] = []
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name.startswith("."):
                continue
            rel = rel_dir / entry.name
            try:
                if entry.is_symlink():
                    target = _real(base / rel)
                    if not target.is_relative_to(base):
                        links_out.append((rel.as_posix(), str(target)))
                        continue
                    mode = os.stat(target).st_mode
                    if stat.S_ISDIR(mode):
                        continue  # the directory itself is walked where it is
                else:
                    mode = entry.stat(follow_symlinks=False).st_mode
            except OSError as exc:
                why = exc.strerror or str(exc)
                odd.append((rel.as_posix(), f"it cannot be examined ({why}), a broken link?"))
                continue
            if stat.S_ISDIR(mode):
                subdirs.append(rel)
            elif not stat.S_ISREG(mode):
                odd.append((rel.as_posix(), f"it is not a regular file ({kind_of(mode)})"))
            elif rel.as_posix() != skip:
                files.append(rel.as_posix())
        pending.extend(reversed(subdirs))
        if seen > MAX_ENTRIES or len(files) > MAX_FILES:
            break
    truncated = seen > MAX_ENTRIES or len(files) > MAX_FILES
    files.sort()
    return SkillTree(
        files=tuple(files[:MAX_FILES]),
        links_out=tuple(links_out),
        odd=tuple(odd),
        unreadable=tuple(unreadable),
        truncated=truncated,
    )
