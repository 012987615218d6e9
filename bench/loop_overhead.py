"""Per-iteration overhead of heron's turn loop, with every lifecycle feature switched on.

One iteration = one scripted model turn with one call of an async `add(a, b)` tool and its
execution, with before/after hooks, auto-approval by allow-list, duplicate guard, loop
detection, HMAC receipts, an observer and in-memory history: the `heron-full` workload of
`bench/peers/workloads.py`, in wall and CPU time. Prints µs per iteration at N = 20, 200, 400
beside a bare asyncio loop measured in the same run.

    python bench/loop_overhead.py
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time

from peers.workloads import SIZES, Runner, asyncio_setup, heron_setup

REPEATS = 7


def us_per_turn(run: Runner, n: int) -> tuple[float, float]:
    """Median wall and CPU µs per iteration; on a loaded machine only the CPU time is the
    engine's (the wall time also holds the other processes' turns on the cores)."""
    walls, cpus = [], []
    for _ in range(REPEATS):
        gc.collect()
        started, cpu = time.perf_counter(), time.process_time()
        asyncio.run(run(n))
        walls.append((time.perf_counter() - started) / (n + 1) * 1e6)
        cpus.append((time.process_time() - cpu) / (n + 1) * 1e6)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    heron, _ = heron_setup(full=True)
    floor, _ = asyncio_setup()
    asyncio.run(heron(20))  # warm imports and caches
    print(f"{'N':>5} {'heron wall / CPU µs/iter':>25} {'asyncio wall / CPU':>19} {'CPU ratio':>10}")
    rows = {}
    for n in SIZES:
        (hw, hc), (pw, pc) = us_per_turn(heron, n), us_per_turn(floor, n)
        rows[n] = hc
        print(f"{n:>5} {hw:>14.1f} / {hc:>8.1f} {pw:>9.1f} / {pc:>7.1f} {hc / pc:>10.1f}")
    print(
        f"CPU µs/iter N=200 {rows[200]:.0f} (target ≤ 50); "
        f"flatness N=400 / N=20 = {rows[400] / rows[20]:.2f} (target ≤ 1.1)"
    )


if __name__ == "__main__":
    main()
