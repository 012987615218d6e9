"""Per-iteration overhead of heron's turn loop, with every lifecycle feature switched on.

One iteration = one scripted model turn with one call of an async `add(a, b)` tool and its
execution, with before/after hooks, auto-approval by allow-list, duplicate guard, loop
detection, HMAC receipts, an observer and in-memory history: the `heron-full` workload of
`bench/peers/workloads.py`, here in wall time (the peers' table has CPU time). Prints µs per
iteration at N = 20, 200, 400 beside a bare asyncio loop measured in the same run.

    python bench/loop_overhead.py
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time

from peers.workloads import SIZES, Runner, asyncio_setup, heron_setup

REPEATS = 7


def wall_us_per_turn(run: Runner, n: int) -> float:
    samples = []
    for _ in range(REPEATS):
        gc.collect()
        started = time.perf_counter()
        asyncio.run(run(n))
        samples.append((time.perf_counter() - started) / (n + 1) * 1e6)
    return statistics.median(samples)


def main() -> None:
    heron, _ = heron_setup(full=True)
    floor, _ = asyncio_setup()
    asyncio.run(heron(20))  # warm imports and caches
    print(f"{'N':>5} {'heron µs/iter':>14} {'asyncio µs/iter':>16} {'ratio':>7}")
    rows = {}
    for n in SIZES:
        h, p = wall_us_per_turn(heron, n), wall_us_per_turn(floor, n)
        rows[n] = h
        print(f"{n:>5} {h:>14.1f} {p:>16.1f} {h / p:>7.1f}")
    print(
        f"flatness: N=400 / N=20 = {rows[400] / rows[20]:.2f} (target ≤ 1.1); target ≤ 50 µs/iter"
    )


if __name__ == "__main__":
    main()
