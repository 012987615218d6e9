"""The escape suite's table: every attempt × sandbox level → contained, or escaped, and how.

Runs `heron.sandbox.escape.ATTEMPTS` (plus `run_python` writing outside the workspace through
the real tool) in the `process` and `bwrap` sandboxes as this machine builds them (`bwrap`
also with spare sandboxes, `heron.sandbox.spare`: calls that find a spare ready run in it), and
prints one row per attempt: the outcome, whether it matches the level's containment report (the
report `heron doctor` prints: an attempt on a contained aspect must be held, and each aspect
reported as not contained must be shown by an attempt that gets through), and the evidence.
Then the containment report of each level and the start-up cost per call (`/bin/true`, N runs,
default 30; before the confinement work the figures were about 7 ms for `process` and 38 ms
for `bwrap`). Exits 1 when an outcome contradicts its report.

    python bench/sandbox_escape.py [N]
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from heron import ToolContext
from heron.sandbox import BwrapSandbox, ProcessSandbox, ResourceLimits, Sandbox
from heron.sandbox.containment import ContainmentReport, containment_report
from heron.sandbox.escape import (
    ATTEMPTS,
    EscapeRig,
    Outcome,
    run_suite,
    suite_sandbox,
    unproven,
    visible_outside,
)
from heron.toolsets.python_exec import run_python_tool

REPO = Path(__file__).resolve().parents[1]


async def startup_ms(sandbox: Sandbox, workspace: Path, runs: int) -> list[float]:
    env = {"PATH": "/usr/bin:/bin"}
    await sandbox.run(["/bin/true"], cwd=workspace, env=env, timeout_s=30)  # warm-up
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        await sandbox.run(["/bin/true"], cwd=workspace, env=env, timeout_s=30)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def run_python_outside(sandbox: Sandbox, workspace: Path, target: Path) -> str:
    runner = run_python_tool(sandbox=sandbox, workspace=workspace)
    code = f"open({str(target)!r}, 'w').write('x')"
    result = await runner.execute(
        runner.validate({"code": code}), ToolContext(call_id="bench", turn_id="bench")
    )
    if await asyncio.to_thread(_take, target):
        return "ESCAPED (report wrong)"
    last = (result.output or "").strip().splitlines()
    return f"contained  {last[-1][:70] if last else result.error}"


def _take(path: Path) -> bool:
    """Whether `path` exists; removes it."""
    found = path.exists()
    path.unlink(missing_ok=True)
    return found


async def main(runs: int) -> int:
    levels = ["process"] + (["bwrap", "bwrap+spares"] if shutil.which("bwrap") else [])
    with tempfile.TemporaryDirectory(prefix="heron-escape-") as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        base = visible_outside(
            ProcessSandbox(workspace=workspace), workspace, [Path.cwd(), REPO, Path.home()]
        )
        outside = (base or Path(tmp)) / f".heron-escape-{secrets.token_hex(4)}"
        sandboxes = {
            level: suite_sandbox(
                level.split("+")[0], workspace=workspace, spares=level.endswith("+spares")
            )
            for level in levels
        }
        reports: dict[str, ContainmentReport] = {}
        outcomes: dict[str, list[Outcome]] = {}
        took: dict[str, float] = {}
        exposed = [
            p
            for s in sandboxes.values()
            for p in (s.exposed if isinstance(s, ProcessSandbox) else s.ro_binds)
        ]
        try:
            async with EscapeRig.start(
                workspace=workspace,
                outside=outside,
                exposed=exposed,
                outside_visible=base is not None,
            ) as rig:
                for level, sandbox in sandboxes.items():
                    reports[level] = containment_report(sandbox)
                    started = time.monotonic()
                    outcomes[level] = await run_suite(sandbox, rig, reports[level])
                    took[level] = time.monotonic() - started
                extra = {
                    level: await run_python_outside(
                        sandbox, workspace, outside / "open" / "run-python"
                    )
                    for level, sandbox in sandboxes.items()
                }
        finally:
            shutil.rmtree(outside, ignore_errors=True)
        wrong = 0
        spared = sandboxes.get("bwrap+spares")
        print(f"escape attempts: {len(ATTEMPTS) + 1} per level, uid {os.geteuid()}")
        header = f"{'attempt':<28} {'aspect':<20} " + " ".join(f"{lv:<44}" for lv in levels)
        print(header)
        print("-" * len(header))
        for index, attempt in enumerate(ATTEMPTS):
            cells = []
            for level in levels:
                outcome = outcomes[level][index]
                wrong += not outcome.as_reported
                detail = "" if outcome.skipped else f"  {outcome.evidence[:70]}"
                cells.append(f"{outcome.cell()}{detail}"[:44].ljust(44))
            print(f"{attempt.name:<28} {attempt.aspect:<20} " + " ".join(cells))
        print(
            f"{'run_python_tool_outside':<28} {'files_outside_write':<20} "
            + " ".join(extra[level][:44].ljust(44) for level in levels)
        )
        wrong += sum("ESCAPED" in extra[level] for level in levels)
        for level in levels:
            print(f"\n{reports[level].render()}")
            print(f"  suite wall time: {took[level]:.2f} s")
            for aspect in unproven(outcomes[level]):
                wrong += 1
                print(f"  reported as not contained, but no attempt got through: {aspect}")
        print("\nstart-up cost per call (`/bin/true`, wall time including cleanup)")
        plain = ProcessSandbox(limits=ResourceLimits(), confine=False)
        rows: list[tuple[str, Sandbox]] = [("process, limits only (old level)", plain)]
        rows += [(f"{level} ({sandboxes[level].pids_limit})", sandboxes[level]) for level in levels]
        if "bwrap" in levels:
            rows.append(("bwrap, network host", BwrapSandbox(workspace=workspace, network="host")))
        for label, sandbox in rows:
            samples = sorted(await startup_ms(sandbox, workspace, runs))
            p90 = samples[int(len(samples) * 0.9) - 1]
            print(
                f"  {label:<36} median {statistics.median(samples):7.2f} ms   "
                f"p90 {p90:7.2f} ms   min {samples[0]:7.2f} ms"
            )
        if isinstance(spared, BwrapSandbox) and spared._spares is not None:
            print(f"  (bwrap+spares: {spared._spares.served} calls ran in a spare)")
            await spared.aclose()
        if wrong:
            print(f"\n{wrong} outcome(s) contradict the containment report")
        return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)))
