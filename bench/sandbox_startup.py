"""Per-call start-up cost of the sandbox levels: `true` under `process` and under `bwrap`, with
where bwrap's time goes.

Runs `/bin/true` N times (default 50) through each variant, in blocks of ten calls taken in
turn (a change of machine load hits every row alike, and each block runs as a steady stream of
calls would: back-to-back cgroup migrations are cheaper than isolated ones), and prints the
median, p90 and minimum wall time per call:

- a bare `asyncio.create_subprocess_exec` (same pipes, no limits): the baseline;
- the `process` level, and the `bwrap` level **before** and **after** the change in this
  commit series. Before: bubblewrap was started with a `preexec_fn` (joining the pids cgroup,
  setting the limits), which makes Python `fork` heron — a cost that grows with heron's
  resident memory — and a run's pids cgroup was removed after a first 10 ms wait, though it is
  empty a fraction of a millisecond after the command exits. After: bubblewrap starts held
  (`vfork` through `/bin/sh` joining the cgroup; the limits set with `prlimit` before it may
  start the command: `heron.sandbox.held`), and the removal retries at 0.5 ms and backs
  off;
- the profile of a bwrap call: bubblewrap's own command line run bare (namespaces and mounts
  only), then through heron without the per-run pids cgroup (adds heron's spawn: a `fork` — not
  `vfork` — for the limits set between fork and exec, the new session, the output capture),
  then the full call (adds joining the pids cgroup: a cgroup migration, which waits for an RCU
  grace period, longer under load).

Then the bwrap level with spares (`heron.sandbox.spare`: each call's bubblewrap, cgroup and
limits built before the call, the command handed to a waiter in it): a call that finds its
spare ready (as a call an agent makes after a model turn does: the spare is built in between),
and calls back to back (the next spare is still starting when the next call comes, so every
other call runs cold, beside a spare's start). What an idle spare holds is printed below.

The level rows are then measured again with 300 MiB resident in this process, as a long-running
`heron serve` has. Last, the floor a warm sandbox (namespaces built once per workspace, each
command forked inside them) could reach: one bubblewrap whose shell runs `/bin/true` N times,
per command — no per-call cgroup, limits or message to a launcher counted. bwrap is skipped
with a note when it is not installed.

    python bench/sandbox_startup.py [N]
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import heron.sandbox.cgroups as cgroups
from heron.sandbox import BwrapSandbox, ProcessSandbox, ResourceLimits, Sandbox

ENV = {"PATH": "/usr/bin:/bin"}
Call = Callable[[], Awaitable[object]]


BLOCK = 10


async def measure(
    calls: dict[str, Call], runs: int, untimed: dict[str, Call] | None = None
) -> dict[str, list[float]]:
    """Wall time per call; `untimed[name]` is awaited before each of that variant's calls,
    untimed."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(0, runs, BLOCK):
        for name, call in calls.items():
            await call()  # warm-up: imports, page cache, this variant's steady state
            for _ in range(BLOCK):
                if untimed and name in untimed:
                    await untimed[name]()
                started = time.perf_counter()
                await call()
                samples[name].append((time.perf_counter() - started) * 1000)
    return samples


def idle_spare(sandbox: BwrapSandbox) -> str:
    """What the ready spare of `sandbox` holds: its processes, their RSS and PSS."""
    assert sandbox._spares is not None
    (spare,) = sandbox._spares._idle.values()
    group = spare._started.group
    pids = group.pids() if group is not None else [spare._started.pid]
    rss = pss = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("Rss", "Pss"):
                kib = int(value.split()[0])
                rss, pss = (rss + kib, pss) if name == "Rss" else (rss, pss + kib)
    return f"{len(pids)} processes, RSS {rss / 1024:.1f} MiB, PSS {pss / 1024:.1f} MiB"


def report(label: str, samples: list[float]) -> float:
    ordered = sorted(samples)
    p90 = ordered[max(int(len(ordered) * 0.9) - 1, 0)]
    median = statistics.median(samples)
    print(f"{label:<44} median {median:7.2f} ms   p90 {p90:7.2f} ms   min {ordered[0]:7.2f} ms")
    return median


BALLAST_MIB = 300


def as_before(sandbox: BwrapSandbox, workspace: Path) -> Call:
    """A run as before: started with a `preexec_fn`, the cgroup removal's first retry after
    10 ms."""
    sandbox._held = False

    async def before() -> object:
        shipped = cgroups._SWEEP_FIRST_S
        cgroups._SWEEP_FIRST_S = cgroups._SWEEP_STEP_S
        try:
            return await sandbox.run(["/bin/true"], cwd=workspace, env=ENV, timeout_s=30)
        finally:
            cgroups._SWEEP_FIRST_S = shipped

    return before


async def main(runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)

        async def command(*argv: str) -> None:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                env=ENV,
                cwd=workspace,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            await proc.communicate()

        def through(sandbox: Sandbox) -> Call:
            return lambda: sandbox.run(["/bin/true"], cwd=workspace, env=ENV, timeout_s=30)

        process = ProcessSandbox()
        levels: dict[str, Call] = {f"process ({process.pids_limit})": through(process)}
        profile: dict[str, Call] = {}
        untimed: dict[str, Call] = {}
        bwrap = spared = None
        if shutil.which("bwrap") is not None:
            bwrap = BwrapSandbox(workspace=workspace)
            unlimited = BwrapSandbox(workspace=workspace, limits=ResourceLimits(max_processes=None))
            argv = [*bwrap.bwrap_args(workspace), "--", "/bin/true"]
            levels |= {
                f"bwrap ({bwrap.pids_limit}) before": as_before(
                    BwrapSandbox(workspace=workspace), workspace
                ),
                f"bwrap ({bwrap.pids_limit}) after": through(bwrap),
            }
            spared = BwrapSandbox(workspace=workspace, spares=True)
            levels |= {
                f"bwrap ({bwrap.pids_limit}) spare, ready": through(spared),
                f"bwrap ({bwrap.pids_limit}) spare, back to back": through(spared),
            }
            untimed = {f"bwrap ({bwrap.pids_limit}) spare, ready": spared.prepare}
            profile = {
                "  profile: bwrap's command line, bare": lambda: command(*argv),
                "  profile: + heron's spawn, no pids cgroup": through(unlimited),
            }
        load = os.getloadavg()
        print(
            f"`true`, {runs} runs each, in blocks of {BLOCK} (wall time per call, including "
            f"process-tree cleanup); load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
            f"on {os.cpu_count()} CPUs"
        )
        calls = {"bare subprocess (baseline)": lambda: command("/bin/true"), **levels, **profile}
        samples = await measure(calls, runs, untimed)
        medians = {name: report(name, found) for name, found in samples.items()}
        ballast = bytearray(BALLAST_MIB * 2**20)
        ballast[::4096] = b"\1" * len(ballast[::4096])  # resident, not only reserved
        print(f"with {BALLAST_MIB} MiB resident in this process:")
        heavy = await measure(levels, runs, untimed)
        heavy_medians = {name: report(name, found) for name, found in heavy.items()}
        del ballast
        if bwrap is None or spared is None:
            print("bwrap                                        not installed; install bubblewrap")
            return
        await spared.prepare()
        print(f"{'an idle spare':<44} {idle_spare(spared)}")
        await spared.aclose()
        loop = f"i=0; while [ $i -lt {runs} ]; do /bin/true; i=$((i+1)); done"
        started = time.perf_counter()
        await command(*bwrap.bwrap_args(workspace), "--", "/bin/sh", "-c", loop)
        floor = (time.perf_counter() - started) * 1000 / runs
        print(f"{'warm floor: true forked in built namespaces':<44} mean   {floor:7.2f} ms")
        bare = medians["bare subprocess (baseline)"]
        raw = medians["  profile: bwrap's command line, bare"]
        spawn = medians["  profile: + heron's spawn, no pids cgroup"]
        before, after = (medians[f"bwrap ({bwrap.pids_limit}) {w}"] for w in ("before", "after"))
        ready, streamed = (
            medians[f"bwrap ({bwrap.pids_limit}) spare, {w}"] for w in ("ready", "back to back")
        )
        heavy_before, heavy_after, heavy_ready = (
            heavy_medians[f"bwrap ({bwrap.pids_limit}) {w}"]
            for w in ("before", "after", "spare, ready")
        )
        print(
            f"bwrap per call, median: {before:.1f} ms before, {after:.1f} ms after, "
            f"{ready:.1f} ms from a ready spare ({streamed:.1f} ms back to back); with "
            f"{BALLAST_MIB} MiB resident {heavy_before:.1f} / {heavy_after:.1f} / "
            f"{heavy_ready:.1f} ms (target <= 10 ms). Of the after: namespaces and mounts "
            f"{raw - bare:.1f} ms, heron's spawn {spawn - raw:.1f} ms, the pids cgroup "
            f"{after - spawn:.1f} ms, a bare process {bare:.1f} ms"
        )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50))
