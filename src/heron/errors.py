"""heron's error family: one root, and one branch for the developer's mistakes.

- `HeronError` is the root of every exception heron raises; `except heron.HeronError` catches
  them all. Each subclass keeps the standard-library base callers already catch (a
  `ToolArgumentsError` is still a `ValueError`, a `ModelError` still a `RuntimeError`).
- `StoreError` is a durable store (`heron.sessions.store`, the bus, jobs, timers, the audits, …)
  that could not read or write; the back end's own error is its `__cause__`.
- `ConfigurationError` is a mistake of the developer — a tool definition, a configuration
  file, an MCP server entry, a provider setting, a built-in tool set. It is raised at start-up
  and carries every problem found (`problems`), so one run shows them all.

The outcomes of a run are not exceptions: a denied, failed, timed-out or interrupted tool call
is a result the model sees, and a turn that ends early says why in its `TurnOutcome`.

This module is layer 0: it imports nothing of heron.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["ConfigurationError", "HeronError", "StoreError"]


class HeronError(Exception):
    """The root of every exception heron raises."""


class StoreError(HeronError, RuntimeError):
    """A durable store failed to read or write (the back end's error is the `__cause__`).

    Every store implementation raises it, whatever its back end, so a caller that must survive
    a storage failure (the execution audit, the job poller, the artifact spill) catches one
    type.
    """


class ConfigurationError(HeronError):
    """A developer mistake found at start-up (definition, configuration); lists every problem.

    `ConfigurationError("x: bad")` carries one problem. `ConfigurationError("heron.toml",
    problems=[...])` lists them under a heading, one per line; without a heading, one problem is
    the whole message and several are counted and listed.
    """

    problems: tuple[str, ...]
    """Every problem found, each a complete sentence-like line."""

    def __init__(self, message: str = "", *, problems: Iterable[str] = ()) -> None:
        listed = tuple(problems)
        self.problems = listed or ((message,) if message else ())
        super().__init__(_render(message, listed))


def _render(message: str, problems: tuple[str, ...]) -> str:
    if not problems:
        return message
    listing = "\n- ".join(problems)
    if message:
        return f"{message}:\n- {listing}"
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} problems:\n- {listing}"
