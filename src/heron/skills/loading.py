"""Skills for one agent: found, read leniently, gated by trust, and checked strictly.

`load_skills` is what an agent starts with: the usable skills it may offer (`SkillSet.catalogue`),
the project skills withheld until an operator approves them (`withheld`), and what the operator
should hear (`notices`: withheld skills, broken package entry points, problems that made a
skill unusable). `check_skills` is `heron skills check`: every problem of every skill found,
usable or not, including `allowed-tools` entries that would allow nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from heron.skills.allowed import unknown_entries
from heron.skills.catalogue import SkillCatalogue
from heron.skills.finder import EntryPoints, SkillScan, _entry_points, find_skills, skill_roots
from heron.skills.skill import Problem, Skill
from heron.skills.trust import SkillTrust, TrustVerdict, pin_problems, unpinnable_problems

__all__ = ["SkillSet", "check_skills", "load_skills", "scan_skills"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SkillSet:
    catalogue: SkillCatalogue
    """The skills the agent may use."""
    withheld: tuple[tuple[Skill, TrustVerdict], ...] = ()
    """Project skills not offered: never approved, or changed since approval."""
    problems: tuple[Problem, ...] = ()
    notices: tuple[str, ...] = field(default=())
    """Lines for the operator (standard error in the CLI)."""


def scan_skills(
    project_dir: Path | None,
    *,
    user_dir: Path | None = None,
    extra_dirs: Sequence[Path] = (),
    packages: bool = True,
    entry_points: EntryPoints = _entry_points,
) -> tuple[SkillScan, list[str]]:
    """Every skill found (before trust), and the package entry points that failed."""
    roots, failed = skill_roots(
        project_dir,
        user_dir=user_dir,
        extra_dirs=extra_dirs,
        packages=packages,
        entry_points=entry_points,
    )
    return find_skills(roots), failed


def load_skills(
    project_dir: Path | None,
    *,
    trust: SkillTrust | None,
    user_dir: Path | None = None,
    extra_dirs: Sequence[Path] = (),
    packages: bool = True,
    entry_points: EntryPoints = _entry_points,
) -> SkillSet:
    """The agent's skills. Without `trust` no project skill is offered (fail closed)."""
    scan, failed = scan_skills(
        project_dir,
        user_dir=user_dir,
        extra_dirs=extra_dirs,
        packages=packages,
        entry_points=entry_points,
    )
    usable: list[Skill] = []
    withheld: list[tuple[Skill, TrustVerdict]] = []
    for skill in scan.skills:
        verdict = trust.verdict(skill) if trust is not None else _untrusted(skill)
        if verdict.ok:
            usable.append(skill)
        else:
            withheld.append((skill, verdict))
    notices = [f"skills: {line}" for line in failed]
    problems = list(scan.problems)
    for skill, verdict in withheld:
        if verdict.status == "unpinnable":
            notices.append(
                f"project skill {skill.name!r} cannot be pinned and is not offered: "
                f"{'; '.join(verdict.problems)}"
            )
            problems += unpinnable_problems(skill, verdict.problems)
        elif verdict.status == "changed":
            notices.append(
                f"project skill {skill.name!r} changed since it was approved and is not "
                f"offered: see `heron skills show {skill.name}`, then `heron skills approve "
                f"{skill.name}`"
            )
        else:
            notices.append(
                f"project skill {skill.name!r} ({skill.folder}) is not approved and is not "
                f"offered: read it with `heron skills show {skill.name}`, then `heron skills "
                f"approve {skill.name}`"
            )
    unusable = [p for p in problems if p.severity == "error"]
    if unusable:
        notices.append(
            f"skills: {len(unusable)} problem(s) found while loading; `heron skills check` "
            "lists them"
        )
    return SkillSet(
        catalogue=SkillCatalogue(usable),
        withheld=tuple(withheld),
        problems=tuple(problems),
        notices=tuple(notices),
    )


def _untrusted(skill: Skill) -> TrustVerdict:
    if skill.source != "project":
        return TrustVerdict(status="trusted")
    return TrustVerdict(status="unapproved")


def check_skills(scan: SkillScan, *, known_tools: Collection[str] | None = None) -> list[Problem]:
    """Every problem: the scan's, project skills that cannot be pinned whole (withheld), and
    `allowed-tools` entries heron does not understand or that name tools this agent does not
    have (they allow nothing)."""
    problems = list(scan.problems)
    for skill in scan.skills:
        problems += pin_problems(skill)
        for entry in unknown_entries(skill.allowed_tools or (), known_tools):
            problems.append(
                Problem(
                    path=skill.skill_file,
                    message=(
                        f"allowed-tools entry {entry!r} is not a tool of this agent nor "
                        "shell(PREFIX*): it allows nothing (fails closed)"
                    ),
                )
            )
    return problems
