"""One escape attempt, what it did (`Outcome`), and how it is run and judged."""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from heron.sandbox.base import RunResult, Sandbox
from heron.sandbox.containment import Aspect, ContainmentReport
from heron.sandbox.escape.rig import EscapeRig, user_tasks

Check = Callable[[EscapeRig, RunResult], str | None]
"""Evidence of an escape, or None when the attempt was held."""

__all__ = ["Attempt", "Outcome", "run_attempt", "run_attempts", "unproven"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Attempt:
    """One way out: a command, and how to tell whether it got out."""

    name: str
    aspect: Aspect
    description: str
    script: Callable[[EscapeRig], str]
    """The bash script (or Python code when `python`) to run in the workspace."""
    escaped: Check
    """Evidence of the escape, or None when the attempt was held."""
    python: bool = False
    """Run `script` with heron's own interpreter (`python -I -c`), as `run_python` does."""
    exclusive: bool = False
    """Run alone (heavy or timing-sensitive)."""
    timeout_s: float = 8.0
    needs: Callable[[EscapeRig], str | None] = lambda rig: None
    """Why the attempt cannot run on this host (None: it can)."""
    tools: tuple[str, ...] = ()
    """Programs the script needs; a missing one skips the attempt (with the reason)."""
    harmful_when_not_contained: bool = False
    """Not run where the report says the aspect is not contained (it would hurt the host)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    """What one attempt did in one sandbox, and what the report said it would."""

    attempt: Attempt
    level: str
    escaped: bool
    evidence: str
    expected_escape: bool
    """The report calls the attempt's aspect not contained."""
    how: str
    """The report's line for the aspect."""
    skipped: str | None = None

    @property
    def as_reported(self) -> bool:
        """False only when the attempt got out through an aspect the report calls contained.
        (An aspect reported as not contained is proven by `unproven()`: at least one of its
        attempts must get through; the others may be held.)"""
        return self.skipped is not None or self.expected_escape or not self.escaped

    def cell(self) -> str:
        """The table cell: contained / escaped, and whether that is what the report says."""
        if self.skipped:
            return f"skipped: {self.skipped}"
        if self.escaped:
            return "escaped (documented)" if self.expected_escape else "ESCAPED (report wrong)"
        return "held (aspect not contained)" if self.expected_escape else "contained"


def unproven(outcomes: Sequence[Outcome]) -> list[str]:
    """Aspects the report calls not contained although none of their attempts got through.
    An aspect with an attempt that could not run here is left out: that attempt may be the one
    that would get through (on a host where nothing outside the workspace is visible, say)."""
    shown: dict[str, bool] = {}
    untried: set[str] = set()
    for outcome in outcomes:
        aspect = outcome.attempt.aspect
        if outcome.expected_escape and outcome.skipped is not None:
            untried.add(aspect)
        elif outcome.expected_escape:
            shown[aspect] = shown.get(aspect, False) or outcome.escaped
    return [aspect for aspect, got in shown.items() if not got and aspect not in untried]


async def run_attempt(
    attempt: Attempt, sandbox: Sandbox, rig: EscapeRig, report: ContainmentReport
) -> Outcome:
    """Run one attempt in `sandbox` and judge it against `report`."""
    item = report.item(attempt.aspect)
    expected = not item.contained

    def outcome(escaped: bool, evidence: str, skipped: str | None = None) -> Outcome:
        return Outcome(
            attempt=attempt,
            level=sandbox.level,
            escaped=escaped,
            evidence=evidence,
            expected_escape=expected,
            how=item.how,
            skipped=skipped,
        )

    why_not = attempt.needs(rig)
    missing = [t for t in attempt.tools if shutil.which(t, path=rig.env["PATH"]) is None]
    if why_not is None and missing:
        why_not = f"{', '.join(missing)} not installed on this host"
    if why_not is None and attempt.harmful_when_not_contained and expected:
        why_not = "the report says this is not contained, and trying would harm the host"
    if why_not is not None:
        return outcome(False, "", why_not)
    script = attempt.script(rig)
    argv = [sys.executable, "-I", "-c", script] if attempt.python else ["/bin/bash", "-c", script]
    result = await sandbox.run(argv, cwd=rig.workspace, env=rig.env, timeout_s=attempt.timeout_s)
    await asyncio.sleep(0.01)  # let the listeners record what reached them
    evidence = await asyncio.to_thread(attempt.escaped, rig, result)
    if evidence is not None:
        return outcome(True, evidence)
    if (
        result.exit_code in (126, 127)
        or b"execvp" in result.stderr
        or result.stderr.startswith(b"bwrap: ")
    ):
        # The program did not start: that proves nothing either way.
        raise AssertionError(
            f"{attempt.name} could not run in the {sandbox.level} sandbox "
            f"(tasks of this user: {user_tasks()}): "
            + result.stderr.decode(errors="replace").strip()[-300:]
        )
    shown = (result.stderr or result.stdout).decode(errors="replace").strip()
    return outcome(False, shown.splitlines()[-1][:160] if shown else f"exit {result.exit_code}")


async def run_attempts(
    sandbox: Sandbox,
    rig: EscapeRig,
    report: ContainmentReport,
    attempts: Sequence[Attempt],
    *,
    concurrency: int = 4,
) -> list[Outcome]:
    """`attempts` in `sandbox`: the light ones `concurrency` at a time, then the exclusive
    ones alone. Outcomes come back in the order given."""
    chosen = list(attempts)
    rig.received.clear()  # what reached the listeners belongs to this sandbox's attempts
    gate = asyncio.Semaphore(concurrency)

    async def one(attempt: Attempt) -> Outcome:
        async with gate:
            return await run_attempt(attempt, sandbox, rig, report)

    light = [a for a in chosen if not a.exclusive]
    done = dict(zip([a.name for a in light], await asyncio.gather(*map(one, light)), strict=True))
    for attempt in chosen:
        if attempt.exclusive:
            done[attempt.name] = await run_attempt(attempt, sandbox, rig, report)
    return [done[a.name] for a in chosen]
