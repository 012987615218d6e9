"""`allowed-tools`: what may run while a skill's instructions are being followed.

An entry is a heron tool name (`read_file`, `files__read_file`) or `shell(PREFIX*)`: a `shell`
call whose every simple command (parsed, never matched as a string, see
`heron.safety.command_policy.simple_commands`) starts with PREFIX; without the `*` it must be
exactly PREFIX. Words that name a file inside the skill's folder are compared relative to that
folder, however the call spells the path (`python .heron/skills/weekly-report/scripts/report.py`
matches `shell(python scripts/report.py*)`), and a `cd` into the skill's folder or the
workspace is always allowed.

Entries heron does not understand — another agent's syntax (`Bash(git:*)`), a tool this agent
does not have — fail closed: they allow nothing, and `heron skills check` reports them. The
skill tools and the search tools stay allowed, so the model can still read the skill's files.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from heron.safety.command_policy import simple_commands
from heron.skills.skill import Skill

__all__ = ["ALWAYS_ALLOWED", "Narrowing", "Rule", "parse_rule", "unknown_entries"]

ALWAYS_ALLOWED = frozenset({"load_skill", "read_skill_file", "tool_search", "discover_tools"})
"""Tools a narrowing never blocks: they only read skills or load tool schemas."""
SHELL_TOOL = "shell"
_SHELL_ENTRY = re.compile(r"^shell\((?P<pattern>.*)\)$", re.DOTALL)
_TOOL_NAME = re.compile(r"^[A-Za-z0-9][\w\-.]*$")


@dataclass(frozen=True, kw_only=True, slots=True)
class Rule:
    """One understood entry: a tool, and for `shell` the command pattern (None: any)."""

    tool: str
    command: str | None = None
    prefix: bool = False
    """The pattern ended with `*`: commands that start with `command` match."""


def parse_rule(entry: str, known_tools: Collection[str] | None = None) -> Rule | None:
    """The rule an entry means, or None when heron does not understand it (fail closed).

    With `known_tools`, a tool name must be one of them."""
    text = entry.strip()
    match = _SHELL_ENTRY.match(text)
    if match:
        pattern = " ".join(match.group("pattern").split())
        prefix = pattern.endswith("*")
        pattern = pattern.removesuffix("*").rstrip() if prefix else pattern
        if not pattern or "*" in pattern:
            return None
        if known_tools is not None and SHELL_TOOL not in known_tools:
            return None
        return Rule(tool=SHELL_TOOL, command=pattern, prefix=prefix)
    if not _TOOL_NAME.match(text):
        return None
    if known_tools is not None and text not in known_tools and text not in ALWAYS_ALLOWED:
        return None
    return Rule(tool=text)


def unknown_entries(entries: Sequence[str], known_tools: Collection[str] | None) -> list[str]:
    """The entries that would allow nothing (for `heron skills check`)."""
    return [e for e in entries if parse_rule(e, known_tools) is None]


class Narrowing:
    """The calls one loaded skill allows."""

    def __init__(
        self,
        skill: Skill,
        *,
        known_tools: Collection[str] | None = None,
        workspace: Path | None = None,
    ) -> None:
        self.skill = skill
        entries = skill.allowed_tools or ()
        self.rules = [r for r in (parse_rule(e, known_tools) for e in entries) if r is not None]
        self.ignored = unknown_entries(entries, known_tools)
        self._folder = skill.folder.resolve()
        self._workspace = (workspace or Path.cwd()).resolve()

    def describe(self) -> str:
        shown = [e for e in self.skill.allowed_tools or () if e not in self.ignored]
        return ", ".join(shown) or "(nothing but the skill tools)"

    def refusal(self, name: str, arguments: Mapping[str, Any]) -> str | None:
        """None when the call may run, else why not (for the model)."""
        if name in ALWAYS_ALLOWED:
            return None
        for rule in self.rules:
            if rule.tool != name:
                continue
            if rule.command is None:
                return None
            if name == SHELL_TOOL and self._command_allowed(rule, arguments.get("command")):
                return None
        return (
            f"while the skill '{self.skill.name}' is in use this turn, only these tools may "
            f"run: {self.describe()}; '{name}' with these arguments is not among them"
        )

    def _command_allowed(self, rule: Rule, command: Any) -> bool:
        if not isinstance(command, str):
            return False
        commands = simple_commands(command)
        if not commands:
            return False
        return all(self._matches(rule, argv) for argv in commands)

    def _matches(self, rule: Rule, argv: tuple[str, ...]) -> bool:
        assert rule.command is not None
        if argv[0] == "cd" and len(argv) == 2 and self._is_home(argv[1]):
            return True
        text = " ".join(self._relative(word) for word in argv)
        if rule.prefix:
            return text.startswith(rule.command)
        return text == rule.command

    def _is_home(self, word: str) -> bool:
        target = (self._workspace / word).resolve()
        return target in (self._folder, self._workspace)

    def _relative(self, word: str) -> str:
        """A word naming a path inside the skill's folder, relative to that folder."""
        if "/" not in word:
            return word
        try:
            path = (self._workspace / word).resolve()
        except (OSError, RuntimeError, ValueError):
            return word
        if path.is_relative_to(self._folder):
            return path.relative_to(self._folder).as_posix()
        return word
