"""One skill in the open Agent Skills layout, read leniently and checked strictly.

A skill is a folder holding `SKILL.md`: YAML front matter between `---` lines, then Markdown
instructions. The front matter has `name` (at most 64 characters of `[a-z0-9-]`, no leading,
trailing or doubled hyphen, equal to the folder's name) and `description` (at most 1,024
characters), optionally `license`, `compatibility` (at most 500), `metadata` (a string-to-string
map) and `allowed-tools`. Beside it: `scripts/`, `references/`, `assets/`.

Loading is lenient: `parse_skill` takes what it can and returns every problem it saw. Only a
skill that cannot be used (no `SKILL.md`, no front matter, no description) is left out; a front
matter that YAML refuses (the usual cause: an unquoted colon inside a value) is read line by
line instead, an over-long description is cut, a name that does not match its folder is used
under the folder's name — each with its problem, which `heron skills check` lists in full.

A project's folder is hostile until approved: `SKILL.md` is read only as a regular file inside
its folder, at most `SKILL_FILE_MAX_BYTES` (`heron.skills.files`), and its front matter by a
bounded YAML loader (`heron._support.front_matter`: no aliases, no tags, 16 levels at most); a
refusal is a problem with its line, and the lines are then read as they are written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from heron._support.folder_files import FileRefused, FileTooLarge, open_inside, read_at_most
from heron._support.front_matter import (
    lenient_yaml,
    load_front_matter,
    split_front_matter,
)
from heron.skills.files import MAX_ENTRIES, MAX_FILES, SkillTree, walk_skill

__all__ = [
    "COMPATIBILITY_MAX",
    "DESCRIPTION_MAX",
    "NAME_MAX",
    "SKILL_FILE",
    "Problem",
    "Skill",
    "SkillSource",
    "parse_allowed_tools",
    "parse_skill",
]

SKILL_FILE = "SKILL.md"
SKILL_FOLDER = "the skill's folder"
"""How messages name the folder a skill's files must stay in."""
NAME_MAX = 64
DESCRIPTION_MAX = 1024
COMPATIBILITY_MAX = 500
SkillSource = Literal["project", "user", "package"]
"""Where a skill was found: the project (gated by trust), the user's folders, a package."""

_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_KNOWN_KEYS = frozenset(
    {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
)
SKILL_FILE_MAX_BYTES = 256 * 1024
"""A `SKILL.md` larger than this is not read (the format asks for a few hundred lines; a
project's file is hostile until approved, and it is parsed to be shown)."""
_SCALARS = (str, int, float, bool)


@dataclass(frozen=True, kw_only=True, slots=True)
class Problem:
    """One thing wrong with a skill; `error`s break the format, `warning`s are advice."""

    path: Path
    message: str
    severity: Literal["error", "warning"] = "error"
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else str(self.path)
        return f"{where}: {self.severity}: {self.message}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Skill:
    """A usable skill: its catalogue entry (`name`, `description`), where it lies, and its
    instructions (`body`, the Markdown after the front matter)."""

    name: str
    description: str
    folder: Path
    source: SkillSource
    body: str = ""
    license: str | None = None
    compatibility: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    allowed_tools: tuple[str, ...] | None = None
    """The `allowed-tools` entries; None when the skill does not narrow what may run."""

    @property
    def skill_file(self) -> Path:
        return self.folder / SKILL_FILE

    def files(self) -> list[str]:
        """The skill's other files, relative to its folder: regular files inside it, hidden
        ones and links out of it left out, at most `heron.skills.files.MAX_FILES`."""
        return list(self.tree().files)

    def tree(self) -> SkillTree:
        """Everything a walk of the folder found, with what it left out and why."""
        return walk_skill(self.folder, skip=SKILL_FILE)


def parse_allowed_tools(value: Any) -> tuple[list[str], list[str]]:
    """`allowed-tools` as entries, and what is wrong with the value itself.

    The value is a YAML list, or one string of entries separated by spaces (or commas) where
    an entry may hold spaces inside parentheses: `read_file shell(python scripts/report.py*)`.
    """
    if value is None:
        return [], []
    if isinstance(value, list):
        # Never str() a nested value: YAML aliases make a small file a huge structure.
        listed = [v.strip() for v in value if isinstance(v, str) and v.strip()]
        bad = [_label(v) for v in value if not isinstance(v, str)]
        return listed, [f"allowed-tools: {b} is not a string" for b in bad]
    if not isinstance(value, str):
        return [], [f"allowed-tools: expected a list or a string, got {type(value).__name__}"]
    entries: list[str] = []
    current: list[str] = []
    depth = 0
    for char in value:
        if char in " \t\n," and depth == 0:
            if current:
                entries.append("".join(current))
                current = []
            continue
        depth += char == "("
        depth -= char == ")" and depth > 0
        current.append(char)
    if current:
        entries.append("".join(current))
    problems = ["allowed-tools: unbalanced parentheses"] if depth else []
    return entries, problems


def _yaml_problem(exc: yaml.YAMLError, skill_file: Path, offset: int) -> Problem:
    mark = getattr(exc, "problem_mark", None)
    line = mark.line + offset if mark is not None else None
    problem = getattr(exc, "problem", None) or str(exc)
    if "mapping values are not allowed" in problem:
        message = (
            "YAML: an unquoted colon inside a value (mapping values are not allowed here); "
            'quote the value ("...")'
        )
    else:
        message = f"YAML: {problem}"
    return Problem(path=skill_file, line=line, message=message + "; read line by line instead")


def _read_skill_file(folder: Path) -> str | int:
    """SKILL.md's text, or its size when it is over `SKILL_FILE_MAX_BYTES` (not read)."""
    try:
        with open_inside(folder, SKILL_FILE, place=SKILL_FOLDER) as (fh, size):
            data = read_at_most(fh, size, SKILL_FILE_MAX_BYTES)
    except FileTooLarge as exc:
        return exc.size
    return data.decode("utf-8")


def tree_problems(folder: Path, tree: SkillTree) -> list[Problem]:
    """What a walk of the folder left out, as warnings (a project skill that cannot be pinned
    whole is withheld by `heron.skills.trust`)."""
    found = [
        Problem(
            path=folder / rel,
            message=f"it links out of the skill's folder (to {target}): not listed, read or pinned",
            severity="warning",
        )
        for rel, target in tree.links_out
    ]
    found += [
        Problem(path=folder / rel, message=f"{what}: not listed", severity="warning")
        for rel, what in tree.odd
    ]
    found += [
        Problem(
            path=folder / rel,
            message=f"the folder cannot be listed ({why}): its files are not listed",
            severity="warning",
        )
        for rel, why in tree.unreadable
    ]
    if tree.truncated:
        found.append(
            Problem(
                path=folder,
                message=f"more than {MAX_FILES} files or {MAX_ENTRIES} entries: only the first "
                f"{len(tree.files)} files are listed",
                severity="warning",
            )
        )
    return found


def _label(value: Any) -> str:
    """A short name for a front-matter value: scalars as they are, containers by type only."""
    return repr(value)[:80] if isinstance(value, _SCALARS) else f"a {type(value).__name__}"


def _text(value: Any) -> str | None:
    """A text field: scalars as text; None for a missing value or a container (reported by
    `parse_skill`)."""
    if value is None or not isinstance(value, _SCALARS):
        return None
    return value if isinstance(value, str) else str(value)


def parse_skill(folder: Path, source: SkillSource) -> tuple[Skill | None, list[Problem]]:
    """Read the skill in `folder`: the skill (None when it cannot be used) and every problem."""
    skill_file = folder / SKILL_FILE
    problems: list[Problem] = []

    def problem(message: str, severity: Literal["error", "warning"] = "error") -> None:
        problems.append(Problem(path=skill_file, message=message, severity=severity))

    try:
        text = _read_skill_file(folder)
    except FileNotFoundError:
        return None, [Problem(path=folder, message=f"no {SKILL_FILE} in the skill's folder")]
    except FileRefused as exc:
        return None, [Problem(path=skill_file, message=f"{exc}: not read")]
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Problem(path=skill_file, message=f"cannot read it: {exc}")]
    if isinstance(text, int):
        problem(f"it is {text} bytes long (at most {SKILL_FILE_MAX_BYTES}): not read")
        return None, problems
    split = split_front_matter(text)
    if split is None:
        problem("no YAML front matter: the file must start with a '---' line and close it")
        return None, problems
    head, body, _ = split
    try:
        loaded = load_front_matter(head) if head.strip() else {}
    except yaml.YAMLError as exc:  # FrontMatterRefused too: a bound, with its line
        problems.append(_yaml_problem(exc, skill_file, 2))
        loaded = lenient_yaml(head)
    if not isinstance(loaded, dict):
        problem("the front matter is not a mapping of keys to values")
        return None, problems
    data: dict[str, Any] = {k if isinstance(k, str) else _label(k): v for k, v in loaded.items()}
    for key in sorted(set(data) - _KNOWN_KEYS):
        problem(f"unknown front-matter key {key[:80]!r}", "warning")
    for key in ("name", "description", "license", "compatibility"):
        if data.get(key) is not None and _text(data[key]) is None:
            problem(f"{key!r} must be text, not {_label(data[key])}")

    name = _text(data.get("name"))
    if not name:
        problem(f"'name' is missing; the folder's name {folder.name!r} is used")
    else:
        if len(name) > NAME_MAX:
            problem(f"'name' is {len(name)} characters long (at most {NAME_MAX})")
        if not _NAME.match(name):
            problem(
                f"'name' {name!r} must be lowercase letters, digits and single hyphens, "
                "not starting or ending with a hyphen"
            )
        if name != folder.name:
            problem(
                f"'name' {name!r} does not match its folder {folder.name!r}; the folder's is used"
            )

    description = (_text(data.get("description")) or "").strip()
    if not description:
        problem("'description' is missing or empty: the skill cannot be offered without one")
        return None, problems
    if len(description) > DESCRIPTION_MAX:
        problem(
            f"'description' is {len(description)} characters long (at most {DESCRIPTION_MAX}); "
            "it is cut"
        )
        description = description[: DESCRIPTION_MAX - 1].rstrip() + "…"

    compatibility = _text(data.get("compatibility"))
    if compatibility is not None and len(compatibility) > COMPATIBILITY_MAX:
        problem(
            f"'compatibility' is {len(compatibility)} characters long (at most "
            f"{COMPATIBILITY_MAX}); it is cut"
        )
        compatibility = compatibility[:COMPATIBILITY_MAX]

    metadata: dict[str, str] = {}
    raw_metadata = data.get("metadata")
    if isinstance(raw_metadata, dict):
        for key, value in raw_metadata.items():
            if not isinstance(key, _SCALARS):
                problem(f"metadata: a key that is {_label(key)} is ignored", "warning")
            elif isinstance(value, _SCALARS):
                metadata[str(key)] = str(value)
            else:
                problem(f"metadata.{key}: values are strings; this one is ignored", "warning")
    elif raw_metadata is not None:
        problem("'metadata' must be a mapping of strings; it is ignored", "warning")

    allowed: tuple[str, ...] | None = None
    if "allowed-tools" in data:
        entries, entry_problems = parse_allowed_tools(data["allowed-tools"])
        for message in entry_problems:
            problem(message)
        allowed = tuple(entries)

    license_ = _text(data.get("license"))
    if not body.strip():
        problem("the instructions after the front matter are empty", "warning")
    skill = Skill(
        name=folder.name,
        description=" ".join(description.split()),
        folder=folder,
        source=source,
        body=body.strip("\n"),
        license=license_,
        compatibility=compatibility,
        metadata=metadata,
        allowed_tools=allowed,
    )
    problems += tree_problems(folder, skill.tree())
    return skill, problems
