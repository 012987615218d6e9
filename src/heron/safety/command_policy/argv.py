"""The simple commands of a bash command line, as the argument vectors bash would run.

Used to match a command against an allow-list entry such as a skill's `shell(python
scripts/report.py*)`: every simple command of the line — in pipelines, lists, subshells, command
and process substitutions — must match, so `python scripts/report.py; rm -rf ~` does not pass
for its first half. A line that does not parse, or a word bash computes at run time (`$VAR`,
`$(...)` as an argument), yields None: an allow-list cannot vouch for what it cannot see.
"""

from __future__ import annotations

import functools

import tree_sitter_bash
from tree_sitter import Language, Parser

from heron.safety.command_policy._bash import _command_words, _commands_in

__all__ = ["simple_commands"]


@functools.cache
def _language() -> Language:
    return Language(tree_sitter_bash.language())


def simple_commands(command: str) -> list[tuple[str, ...]] | None:
    """The argv of each simple command in `command`, in source order; None when the line does
    not parse or any word is computed at run time."""
    if "\x00" in command:
        return None
    tree = Parser(_language()).parse(command.encode("utf-8"))
    if tree.root_node.has_error:
        return None
    found: list[tuple[int, tuple[str, ...]]] = []
    for node in _commands_in(tree.root_node, substitutions=True):
        words = _command_words(node)
        values = [w.value for w in words]
        if not values or any(v is None for v in values):
            return None
        found.append((node.start_byte, tuple(v for v in values if v is not None)))
    return [argv for _, argv in sorted(found)]
