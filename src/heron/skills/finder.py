"""Where skills are found, in order of precedence:

1. the project: `.heron/skills/<name>/SKILL.md` and, for skills written for other agents,
   `.agents/skills/<name>/SKILL.md` (both gated by trust, `heron.skills.trust`);
2. the user's folder, `$XDG_CONFIG_HOME/heron/skills/` (default `~/.config/heron/skills/`), and
   the folders `[skills] dirs` names;
3. installed packages: a distribution declares an entry point in the group `heron.skills`
   whose value is a package; its skills lie in that package's `skills/` folder, as package
   data (`[project.entry-points."heron.skills"] mytools = "mytools"` →
   `mytools/skills/<name>/SKILL.md`). An entry point that loads to a path (a `str` or
   `Path`) names the folder itself.

A name found twice is taken from the first place it is found; the later one is reported.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import metadata, resources
from pathlib import Path
from typing import Any

from heron.skills.skill import SKILL_FILE, Problem, Skill, SkillSource, parse_skill

__all__ = [
    "ENTRY_POINT_GROUP",
    "MAX_SKILLS_PER_ROOT",
    "PROJECT_DIRS",
    "SkillRoot",
    "SkillScan",
    "find_skills",
    "skill_roots",
    "user_skills_dir",
]

ENTRY_POINT_GROUP = "heron.skills"
PROJECT_DIRS = (".heron/skills", ".agents/skills")
MAX_SKILLS_PER_ROOT = 1000
"""Skill folders read in one folder of skills (in name order); the rest are reported as left
out. A project's folders come with the repository: each costs a read of up to 256 KiB."""
_MAX_ROOT_ENTRIES = 100_000
"""Entries of one folder of skills looked at, at all (names only)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SkillRoot:
    """A folder whose sub-folders are skills."""

    path: Path
    source: SkillSource
    label: str = ""
    """Where it came from, for people (`project`, `user`, `package mytools`)."""
    inside: Path | None = None
    """The folder its skills must lie in, links resolved (a project's: what the repository
    holds), or `None`."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SkillScan:
    """Every usable skill (first of each name) and every problem met on the way."""

    skills: tuple[Skill, ...] = ()
    problems: tuple[Problem, ...] = ()
    roots: tuple[SkillRoot, ...] = field(default=())


def user_skills_dir() -> Path:
    """`$XDG_CONFIG_HOME/heron/skills`, else `~/.config/heron/skills`."""
    base = os.environ.get("XDG_CONFIG_HOME")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".config"
    return root / "heron" / "skills"


EntryPoints = Callable[[], Iterable[Any]]


def _entry_points() -> Iterable[Any]:
    return metadata.entry_points(group=ENTRY_POINT_GROUP)


def package_roots(entry_points: EntryPoints = _entry_points) -> tuple[list[SkillRoot], list[str]]:
    """The skill folders installed packages declare, and the entry points that failed."""
    roots: list[SkillRoot] = []
    failed: list[str] = []
    for ep in entry_points():
        try:
            loaded = ep.load()
            if isinstance(loaded, str | os.PathLike):
                path = Path(loaded)
            else:
                path = Path(str(resources.files(loaded.__name__) / "skills"))
        except Exception as exc:  # a broken package must not stop the agent
            failed.append(f"entry point {ep.name!r} ({ep.value}): {type(exc).__name__}: {exc}")
            continue
        roots.append(SkillRoot(path=path, source="package", label=f"package {ep.name}"))
    return roots, failed


def skill_roots(
    project_dir: Path | None,
    *,
    user_dir: Path | None = None,
    extra_dirs: Sequence[Path] = (),
    packages: bool = True,
    entry_points: EntryPoints = _entry_points,
) -> tuple[list[SkillRoot], list[str]]:
    """The folders to look in, in precedence order, and package entry points that failed."""
    roots = (
        [
            SkillRoot(
                path=project_dir / d, source="project", label=f"project {d}", inside=project_dir
            )
            for d in PROJECT_DIRS
        ]
        if project_dir is not None
        else []
    )
    roots.append(SkillRoot(path=user_dir or user_skills_dir(), source="user", label="user"))
    roots += [SkillRoot(path=d, source="user", label=f"folder {d}") for d in extra_dirs]
    failed: list[str] = []
    if packages:
        found, failed = package_roots(entry_points)
        roots += found
    return roots, failed


def _folders(root: Path) -> tuple[list[Path], list[str], bool]:
    """The skill folders of `root` heron reads (by name, hidden ones left out, at most
    `MAX_SKILLS_PER_ROOT`), the names of the ones it leaves out, and whether it stopped
    looking (more than `_MAX_ROOT_ENTRIES` entries)."""
    names: list[str] = []
    capped = False
    try:
        with os.scandir(root) as it:
            for n, entry in enumerate(it):
                if n >= _MAX_ROOT_ENTRIES:
                    capped = True
                    break
                if not entry.name.startswith(".") and entry.is_dir():
                    names.append(entry.name)
    except OSError:
        return [], [], False
    names.sort()
    read = [root / name for name in names[:MAX_SKILLS_PER_ROOT]]
    return read, names[MAX_SKILLS_PER_ROOT:], capped


def _has_entries(folder: Path) -> bool:
    # One entry, not the listing (`Path.iterdir` lists the whole folder first).
    try:
        with os.scandir(folder) as it:
            return next(it, None) is not None
    except OSError:
        return False


def _left_out(root: SkillRoot, rest: list[str], capped: bool) -> Problem:
    shown = ", ".join(rest[:10]) + (", …" if len(rest) > 10 else "")
    more = f"{len(rest)}{'+' if capped else ''} more folder(s)"
    if capped:
        shown += f"; only the first {_MAX_ROOT_ENTRIES} entries were looked at"
    return Problem(
        path=root.path,
        message=f"{more} left out: heron reads at most {MAX_SKILLS_PER_ROOT} skill folders "
        f"in one folder ({shown})",
    )


def find_skills(roots: Sequence[SkillRoot]) -> SkillScan:
    """Every skill under `roots` (leniently read), first of each name winning."""
    skills: dict[str, Skill] = {}
    problems: list[Problem] = []
    for root in roots:
        if not root.path.is_dir():
            continue
        folders, rest, capped = _folders(root.path)
        inside = root.inside.resolve() if root.inside is not None else None
        for folder in folders:
            if inside is not None and not (target := folder.resolve()).is_relative_to(inside):
                # A cloned repository's link would bring in any folder of this machine, and
                # `read_skill_file` would then read what lies under it.
                problems.append(
                    Problem(
                        path=folder,
                        message=f"it links out of the project (to {target}): not read",
                    )
                )
                continue
            # lexists: a SKILL.md that is a FIFO, a device or a link is reported by parse_skill
            if not os.path.lexists(folder / SKILL_FILE):
                if _has_entries(folder):
                    problems.append(
                        Problem(
                            path=folder,
                            message=f"{folder.name!r} is in a folder of skills but has no "
                            f"{SKILL_FILE}",
                            severity="warning",
                        )
                    )
                continue
            skill, found = parse_skill(folder, root.source)
            problems.extend(found)
            if skill is None:
                continue
            first = skills.get(skill.name)
            if first is not None:
                problems.append(
                    Problem(
                        path=folder,
                        message=f"skill {skill.name!r} is also in {first.folder}, which wins",
                        severity="warning",
                    )
                )
                continue
            skills[skill.name] = skill
        if rest or capped:
            problems.append(_left_out(root, rest, capped))
    return SkillScan(skills=tuple(skills.values()), problems=tuple(problems), roots=tuple(roots))
