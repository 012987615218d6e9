"""Project skills are gated by trust: a cloned repository cannot add instructions to the agent
without an operator's approval, and a change after approval is shown and needs approval again.

The approach is MCP's pins (`heron.mcp.trust`): a skill is pinned by its folder and the
canonical content of every file in it (`SKILL.md`, scripts, references, assets — each file is
one "definition": its path and its text, or the sha256 of a binary or large file), kept in the
same `TrustStore` under the key `skill:<folder>`. `compare_pin` says whether the live folder
matches; the verdict shows what changed as a unified diff of the files' text.

Only project skills are gated (`.heron/skills`, `.agents/skills`). The user's folders and
installed packages are the user's own choice and are trusted as they are.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from heron._support.folder_files import open_inside
from heron.errors import HeronError
from heron.mcp.trust.pins import (
    PinCheck,
    ServerIdentity,
    ServerPin,
    ToolDefinition,
    TrustStore,
    compare_pin,
)
from heron.skills.files import MAX_ENTRIES, MAX_FILES
from heron.skills.skill import SKILL_FILE, SKILL_FOLDER, Problem, Skill

__all__ = [
    "SKILL_PIN_PREFIX",
    "SkillPinError",
    "SkillTrust",
    "TrustVerdict",
    "file_diff",
    "pin_problems",
    "skill_definitions",
    "skill_key",
    "unpinnable_problems",
]

SKILL_PIN_PREFIX = "skill:"
"""Pins of skills live in the trust store under `skill:<resolved folder>` (no MCP server name
can contain a colon, so the two never meet)."""
_TEXT_LIMIT = 64 * 1024


class SkillPinError(HeronError, OSError):
    """A project skill that cannot be pinned whole (a file or folder unreadable, too many
    files): it is withheld and cannot be approved. `problems` says why, one line each."""

    def __init__(self, name: str, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__(
            f"skill {name!r} cannot be pinned, so it cannot be approved: " + "; ".join(problems)
        )


def skill_key(skill: Skill) -> str:
    return f"{SKILL_PIN_PREFIX}{skill.folder.resolve()}"


def _content(folder: Path, rel: str) -> str:
    """The file's text when it is small UTF-8, else its digest (read in chunks: a skill's
    asset may be large, and a project's files are hostile until approved). Only a regular
    file inside the folder is opened (`open_inside`)."""
    with open_inside(folder, rel, place=SKILL_FOLDER) as (fh, _):
        head = fh.read(_TEXT_LIMIT + 1)
        if len(head) <= _TEXT_LIMIT:
            try:
                return head.decode("utf-8")
            except UnicodeDecodeError:
                pass
        digest, size = hashlib.sha256(head), len(head)
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return f"sha256:{digest.hexdigest()} ({size} bytes)"


def skill_definitions(skill: Skill) -> list[ToolDefinition]:
    """Every file of the skill as a pinned "definition": path, and text or digest. A link out
    of the folder is pinned as the link (where it points), never by what it points to.

    Raises `SkillPinError` when a file or folder cannot be read, or the skill has more files
    than are listed: a pin that misses a file would let it change unseen (fail closed)."""
    key = skill_key(skill)
    tree = skill.tree()
    reasons = [f"{rel}/: the folder cannot be read ({why})" for rel, why in tree.unreadable]
    if tree.truncated:
        reasons.append(
            f"more than {MAX_FILES} files or {MAX_ENTRIES} entries: not every file can be pinned"
        )
    definitions = []
    for rel in [SKILL_FILE, *tree.files]:
        try:
            text = _content(skill.folder, rel)
        except OSError as exc:
            reasons.append(f"{rel}: cannot be read ({exc.strerror or exc})")
            continue
        definitions.append(ToolDefinition(server=key, name=rel, description=text))
    for rel, target in tree.links_out:
        text = f"a link out of the skill's folder, to {target}: not read"
        definitions.append(ToolDefinition(server=key, name=rel, description=text))
    if reasons:
        raise SkillPinError(skill.name, reasons)
    return definitions


def pin_problems(skill: Skill) -> list[Problem]:
    """Why a project skill cannot be pinned (empty when it can; other skills are not pinned)."""
    if skill.source != "project":
        return []
    try:
        skill_definitions(skill)
    except SkillPinError as exc:
        return unpinnable_problems(skill, exc.problems)
    return []


def unpinnable_problems(skill: Skill, reasons: Sequence[str]) -> list[Problem]:
    return [
        Problem(
            path=skill.folder, message=f"the skill cannot be pinned, so it is not offered: {why}"
        )
        for why in reasons
    ]


def _identity(skill: Skill) -> ServerIdentity:
    return ServerIdentity(launch=f"skill {skill.folder.resolve()}")


@dataclass(frozen=True, kw_only=True, slots=True)
class TrustVerdict:
    """Whether a skill may be offered, and what an operator needs to know."""

    status: Literal["trusted", "approved", "unapproved", "changed", "unpinnable"]
    """`trusted`: not a project skill; `approved`: pinned and unchanged; `unapproved`: never
    approved; `changed`: different from what was approved (`changes`, `diff`);
    `unpinnable`: its files cannot all be read for the pin (`problems`), so it is withheld
    whatever was approved before."""
    check: PinCheck | None = None
    changes: tuple[str, ...] = ()
    """One line per file added, removed or changed since the approval."""
    diff: str = ""
    """A unified diff of the files' text, approved → live."""
    problems: tuple[str, ...] = ()
    """Why an `unpinnable` skill cannot be pinned."""

    @property
    def ok(self) -> bool:
        return self.status in ("trusted", "approved")


def file_diff(
    old: Sequence[ToolDefinition], new: Sequence[ToolDefinition]
) -> tuple[tuple[str, ...], str]:
    """What changed between two pinned states of a skill: one line per file, and the diff."""
    before = {d.name: d.description for d in old}
    after = {d.name: d.description for d in new}
    changes: list[str] = []
    lines: list[str] = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a == b:
            continue
        if a is None:
            changes.append(f"file added: {name}")
        elif b is None:
            changes.append(f"file removed: {name}")
        else:
            changes.append(f"file changed: {name}")
        lines.extend(
            difflib.unified_diff(
                (a or "").splitlines(),
                (b or "").splitlines(),
                fromfile=f"approved/{name}" if a is not None else "/dev/null",
                tofile=f"live/{name}" if b is not None else "/dev/null",
                lineterm="",
            )
        )
    return tuple(changes), "\n".join(lines)


class SkillTrust:
    """Pins of project skills in a `TrustStore` (the one MCP servers use)."""

    def __init__(self, store: TrustStore) -> None:
        self.store = store

    def verdict(self, skill: Skill) -> TrustVerdict:
        if skill.source != "project":
            return TrustVerdict(status="trusted")
        pin = self.store.get(skill_key(skill))
        try:
            live = skill_definitions(skill)
        except SkillPinError as exc:
            return TrustVerdict(status="unpinnable", problems=exc.problems)
        check = compare_pin(pin, _identity(skill), live)
        if check.status == "match":
            return TrustVerdict(status="approved", check=check)
        if pin is None:
            return TrustVerdict(status="unapproved", check=check)
        changes, diff = file_diff(pin.definitions, live)
        return TrustVerdict(status="changed", check=check, changes=changes, diff=diff)

    def approve(self, skill: Skill) -> ServerPin:
        """Pin the skill as it is now; `SkillPinError` when it cannot be pinned whole."""
        return self.store.approve(skill_key(skill), _identity(skill), skill_definitions(skill))

    def revoke(self, skill: Skill) -> bool:
        return self.store.revoke(skill_key(skill))
