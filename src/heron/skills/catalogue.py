"""The skills an agent may use, and their catalogue section in the system prompt.

Progressive disclosure, level one: the system prompt carries each skill's `name` and
`description` only, under a token budget. When they do not all fit, the section lists as many
as fit (project skills first, then the user's, then packages'; by name within each) and says
how many it left out — the model can still find those through the search tool — and
`SkillSection.omitted` names them for the operator. Nothing is dropped silently.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from heron.models.tokens import EstimateCounter, TokenCounter
from heron.skills.skill import Skill

__all__ = ["SKILL_CATALOGUE_TOKENS", "SkillCatalogue", "SkillSection"]

SKILL_CATALOGUE_TOKENS = 800
"""Default budget of the skills section (the seed: "a few hundred tokens in all")."""
_ORDER = {"project": 0, "user": 1, "package": 2}


@dataclass(frozen=True, kw_only=True, slots=True)
class SkillSection:
    text: str
    """The section for the system prompt (empty without skills)."""
    listed: tuple[str, ...] = ()
    omitted: tuple[str, ...] = ()
    """Skills the budget left out of the section (still loadable and searchable)."""

    def report(self) -> str | None:
        """A line for the operator when skills were left out; None when all fit."""
        if not self.omitted:
            return None
        return (
            f"{len(self.omitted)} skill(s) did not fit the skills section of the system prompt "
            f"and are not listed there (the model can still find them by need): "
            + ", ".join(self.omitted)
        )


class SkillCatalogue:
    """Usable, trusted skills by name."""

    def __init__(self, skills: Sequence[Skill]) -> None:
        ordered = sorted(skills, key=lambda s: (_ORDER[s.source], s.name))
        self._skills = {s.name: s for s in ordered}

    def __iter__(self) -> Iterator[Skill]:
        return iter(self._skills.values())

    def __len__(self) -> int:
        return len(self._skills)

    def __contains__(self, name: object) -> bool:
        return name in self._skills

    def get(self, name: str) -> Skill | None:
        return self._skills.get(name.strip())

    def names(self) -> list[str]:
        return list(self._skills)

    def prompt_section(
        self,
        *,
        budget_tokens: int = SKILL_CATALOGUE_TOKENS,
        counter: TokenCounter | None = None,
        search_tool: str | None = None,
    ) -> SkillSection:
        """Level one of progressive disclosure: names and descriptions within the budget."""
        if not self._skills:
            return SkillSection(text="")
        count = (counter or EstimateCounter("anthropic")).count
        head = (
            "## Skills\n\n"
            "Skills are instructions for particular tasks, with scripts and reference files. When "
            "a task matches a skill's description, call `load_skill` with its name before you "
            "start and follow what it says; `read_skill_file` reads the files it points to, and "
            "its scripts run with your usual tools.\n\n<skills>\n"
        )
        tail = "\n</skills>"
        lines: list[str] = []
        skills = list(self._skills.values())
        for n, skill in enumerate(skills):
            line = f"- {skill.name}: {skill.description}"
            left = len(skills) - n - 1
            rest = [_rest(left, search_tool)] if left else []
            if count(head + "\n".join([*lines, line, *rest]) + tail) > budget_tokens:
                break
            lines.append(line)
        omitted = tuple(s.name for s in skills[len(lines) :])
        if omitted:
            lines.append(_rest(len(omitted), search_tool))
        return SkillSection(
            text=head + "\n".join(lines) + tail,
            listed=tuple(s.name for s in skills[: len(lines) - bool(omitted)]),
            omitted=omitted,
        )


def _rest(count: int, search_tool: str | None) -> str:
    how = f"`{search_tool}` finds them by need" if search_tool else "`load_skill` lists them all"
    return f"- … and {count} more skills not listed here: {how}."
