"""Per-call start-up cost of the sandbox levels: `true` under `process` and under `bwrap`.

Runs `/bin/true` N times (default 50) through each sandbox and prints the median, p90 and
minimum wall time per call, beside a bare `asyncio.create_subprocess_exec` baseline (same
pipes, no limits) measured in the same run. bwrap is skipped with a note when it is not
installed. The process level pays for a `fork` (not `vfork`: limits are set in the child) and
a per-run cgroup; bwrap adds namespace and mount set-up.

    python bench/sandbox_startup.py [N]
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from heron.sandbox import BwrapSandbox, ProcessSandbox, Sandbox

ENV = {"PATH": "/usr/bin:/bin"}


async def measure(call: Callable[[], Awaitable[object]], runs: int) -> list[float]:
    await call()  # warm-up: imports, page cache, cgroup directory
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def report(label: str, samples: list[float]) -> None:
    ordered = sorted(samples)
    p90 = ordered[int(len(ordered) * 0.9) - 1]
    print(
        f"{label:<28} median {statistics.median(samples):7.2f} ms   "
        f"p90 {p90:7.2f} ms   min {ordered[0]:7.2f} ms"
    )


async def main(runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)

        async def bare() -> None:
            proc = await asyncio.create_subprocess_exec(
                "/bin/true",
                env=ENV,
                cwd=workspace,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            await proc.communicate()

        def through(sandbox: Sandbox) -> Callable[[], Awaitable[object]]:
            return lambda: sandbox.run(["/bin/true"], cwd=workspace, env=ENV, timeout_s=30)

        print(f"`true`, {runs} runs each (wall time per call, including process-tree cleanup)")
        report("bare subprocess (baseline)", await measure(bare, runs))
        process = ProcessSandbox()
        report(f"process ({process.pids_limit})", await measure(through(process), runs))
        if shutil.which("bwrap") is None:
            print("bwrap                        not installed; install bubblewrap to measure it")
            return
        bwrap = BwrapSandbox(workspace=workspace)
        report(f"bwrap ({bwrap.pids_limit})", await measure(through(bwrap), runs))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50))
