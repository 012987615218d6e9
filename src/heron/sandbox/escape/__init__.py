"""The escape suite: concrete attempts to get out of a sandbox, checked against its report.

Each `Attempt` is a real command (bash, or heron's own Python as `run_python` runs it) that
tries one way out, and a check on what happened, on the host side where it matters (a file
that must not appear outside the workspace, a connection that must not reach a listener, a
process that must not survive the call). `run_suite()` runs every attempt in a sandbox and
compares each outcome with `heron.sandbox.containment`: every attempt on an aspect the report
calls contained must be held, and every aspect it calls not contained must be shown by at
least one attempt that gets through (`unproven()`), so the report can neither overclaim nor go
stale. An attempt that cannot run on the host is skipped with what the host lacks (the attempts
on files outside the workspace need a directory the process level shows as it is: not so for a
checkout under `/tmp` as root), and an aspect with a skipped attempt is not judged unproven.
`tests/unit/test_sandbox_escape.py` asserts
every outcome; `bench/sandbox_escape.py` prints the table.

The attempts do no harm when they succeed: signals are `kill -0`, ptrace uses `PTRACE_SEIZE`
(which does not stop heron), writes go to a directory the rig owns, and the fork bomb only runs
where the process count is contained.
"""

from __future__ import annotations

from collections.abc import Sequence

from heron.sandbox.base import Sandbox
from heron.sandbox.containment import ContainmentReport
from heron.sandbox.escape.attempt import Attempt, Outcome, run_attempt, run_attempts, unproven
from heron.sandbox.escape.catalogue import ATTEMPTS
from heron.sandbox.escape.rig import SUITE_LIMITS, EscapeRig, suite_sandbox, visible_outside

__all__ = [
    "ATTEMPTS",
    "SUITE_LIMITS",
    "Attempt",
    "EscapeRig",
    "Outcome",
    "run_attempt",
    "run_suite",
    "suite_sandbox",
    "unproven",
    "visible_outside",
]


async def run_suite(
    sandbox: Sandbox,
    rig: EscapeRig,
    report: ContainmentReport,
    *,
    attempts: Sequence[Attempt] | None = None,
    concurrency: int = 4,
) -> list[Outcome]:
    """Every attempt of the catalogue (or `attempts`) in `sandbox`: the light ones
    `concurrency` at a time, then the exclusive ones alone, outcomes in catalogue order."""
    chosen = ATTEMPTS if attempts is None else attempts
    return await run_attempts(sandbox, rig, report, chosen, concurrency=concurrency)
