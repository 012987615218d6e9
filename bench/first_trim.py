"""The first trim of a resumed session: every message of the history is counted once, unless
the counts were stored with it.

The history is `session_append`'s (3,000 turns of a prompt, a tool call, a 1,000-char tool
result and an answer), built in memory as a resumed session holds it. The first
`HistoryTrimmer.trim` with a 128k-token budget counts every message with the estimate counter
of each family; the second trim reuses the trimmer's per-message cache. Then the same history
stored with its counts (a first resume with a trimmer, `SessionWriter.count_with`, counts and
stores them), resumed from a fresh store three times: the open (read, decode, provider-rule
check), the stored counts handed to a new trimmer (`count_with`) and its first trim. Also timed: one
`EstimateCounter.count` of short texts (what each turn counts), median of many calls.

    python bench/first_trim.py [--turns 3000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from heron.models.context_window import HistoryTrimmer
from heron.models.tokens import PROFILES, EstimateCounter
from heron.sessions.sqlite_store import SqliteSessionStore
from heron.sessions.writer import SessionWriter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from session_append import turn_messages

SHORT = {
    "word": "hello",
    "prompt (120 chars)": "turn 7: " + "please look at the module and explain it. " * 3,
    "tool call arguments": '{"path":"src/module_7.py"}',
}


def first_trims(turns: int) -> None:
    history = [m for i in range(turns) for m in turn_messages(i)]
    chars = sum(len(getattr(m, "content", "") or getattr(m, "text", "")) for m in history)
    print(f"history: {turns} turns, {len(history)} messages, {chars / 1e6:.1f} M chars of text")
    for family in PROFILES:
        trimmer = HistoryTrimmer(EstimateCounter(family), budget_tokens=128_000)
        started = time.perf_counter()
        first = trimmer.trim(history)
        first_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        trimmer.trim(history)
        again_ms = (time.perf_counter() - started) * 1000
        print(
            f"{family:14} first trim {first_ms:7.0f} ms   second {again_ms:5.1f} ms   "
            f"(counted {first.counted_tokens} tokens)"
        )


def resumed_trims(turns: int, budget: int = 128_000) -> None:
    history = [m for i in range(turns) for m in turn_messages(i)]
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteSessionStore.open(Path(tmp))
        store.append("bench", history)
        # A first resume with a context window counts the history and stores the counts.
        writer = SessionWriter.open(store, "bench")
        writer.count_with(HistoryTrimmer(EstimateCounter("openai"), budget_tokens=budget))
        store.close()
        for _ in range(3):
            reopened = SqliteSessionStore.open(Path(tmp))
            started = time.perf_counter()
            resumed = SessionWriter.open(reopened, "bench")
            opened = time.perf_counter()
            trimmer = HistoryTrimmer(EstimateCounter("openai"), budget_tokens=budget)
            resumed.count_with(trimmer)
            handed = time.perf_counter()
            first = trimmer.trim(resumed.history)
            trimmed = time.perf_counter()
            reopened.close()
            print(
                f"resumed, counts stored   open {(opened - started) * 1000:5.0f} ms   "
                f"counts handed {(handed - opened) * 1000:5.1f} ms   "
                f"first trim {(trimmed - handed) * 1000:5.1f} ms   "
                f"(counted {first.counted_tokens} tokens)"
            )


def short_counts() -> None:
    counter = EstimateCounter("openai")
    for label, text in SHORT.items():
        samples = []
        for _ in range(21):
            started = time.perf_counter()
            for _ in range(2000):
                counter.count(text)
            samples.append((time.perf_counter() - started) / 2000 * 1e9)
        print(f"count({label}) {statistics.median(samples):7.0f} ns")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=3000)
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    first_trims(args.turns)
    resumed_trims(args.turns)
    short_counts()


if __name__ == "__main__":
    main()
