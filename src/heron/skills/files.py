"""The files of a skill folder, walked as hostile input: never a walk without an end.

A project's skill folder comes with the repository: a tree of a million entries, links out of
it, FIFOs among its files. `walk_skill` lists the folder without following links out of it and
stops at a bound, saying what it left out; one file is opened with
`heron._support.folder_files.open_inside`.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from heron._support.folder_files import kind_of, real_path

__all__ = [
    "MAX_ENTRIES",
    "MAX_FILES",
    "SkillTree",
    "walk_skill",
]

MAX_FILES = 200
"""Files listed (and pinned) per skill; a skill with more is listed in part and, from a
project, cannot be pinned."""
MAX_ENTRIES = 5_000
"""Directory entries a walk looks at (hidden ones included) before it stops."""


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
    base = real_path(folder)
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
                    target = real_path(base / rel)
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
