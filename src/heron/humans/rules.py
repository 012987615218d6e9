"""What an "always" answer covers, and when a stored rule applies to a new call.

A rule is one of three scopes (`heron.humans.store.RuleScope`): the tool in this session, the
tool in every session, or — for a tool that runs a shell command (its `command` argument) —
the commands that begin with a prefix of words, in this session. A command prefix is parsed
with shell quoting rules, never compared as a string, and covers only a *plain* command: one
simple command with no operators (`;`, `&&`, `|`, redirections, `&`), no substitutions (`$`,
backticks) and no subshells. `git push origin main` is covered by the prefix `git push`;
`git push; rm -rf ~` and `git push $(…)` are not covered by anything.

No rule ever covers a call its tool judged high risk, and no rule is made from one.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from heron.humans.store import AlwaysRule

__all__ = [
    "COMMAND_ARGUMENT",
    "command_of",
    "command_words",
    "parse_prefix",
    "rule_covers",
]

COMMAND_ARGUMENT = "command"
"""The argument holding the shell command of a command-running tool (`shell`, `start_job`)."""

_UNSAFE_CHARACTERS = frozenset("$`\n\r\x00")
_OPERATOR_CHARACTERS = frozenset(";&|<>()")


def command_of(arguments: Mapping[str, Any]) -> str | None:
    """The call's shell command, when it has one."""
    command = arguments.get(COMMAND_ARGUMENT)
    return command if isinstance(command, str) else None


def command_words(command: str) -> tuple[str, ...] | None:
    """The words of a plain command (see the module docstring), or `None` when the command
    is anything more than one simple command, or does not parse."""
    if any(c in _UNSAFE_CHARACTERS for c in command):
        return None
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|<>()")
    lexer.whitespace_split = True
    try:
        words = tuple(lexer)
    except ValueError:  # an unterminated quote
        return None
    if not words or any(w and set(w) <= _OPERATOR_CHARACTERS for w in words):
        return None
    return words


def parse_prefix(text: str) -> tuple[str, ...]:
    """The words of a command prefix an approver typed; `ValueError` unless it is a plain
    command of at least one word."""
    words = command_words(text)
    if not words:
        raise ValueError(f"not a plain command prefix: {text!r}")
    return words


def rule_covers(
    rule: AlwaysRule,
    *,
    session: str,
    tool: str,
    arguments: Mapping[str, Any],
    now: float,
    high_risk: bool = False,
) -> bool:
    """True when `rule` approves this call now. Never for a high-risk call."""
    if high_risk or not rule.live(now) or rule.tool != tool:
        return False
    if rule.session is not None and rule.session != session:
        return False
    if rule.command_prefix is None:
        return True
    command = command_of(arguments)
    words = None if command is None else command_words(command)
    if words is None:
        return False
    return words[: len(rule.command_prefix)] == rule.command_prefix
