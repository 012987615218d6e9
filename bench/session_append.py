"""Session persistence cost: append latency per turn, disk size per 1,000 turns, resume time.

One turn is what a tool-using turn writes through `SessionWriter`, one transaction per group
the engine appends: the prompt (120 chars), the assistant message with one tool call (80 chars
of text, small arguments), the tool result (1,000 chars) and the final answer (400 chars).
The clock runs around the four writes only. Real SQLite file in a temporary state directory,
WAL, `synchronous=NORMAL` (heron's settings; WAL checkpoints in heron's checkpoint thread).
Disk size is the database after a WAL checkpoint, divided by the turns written. On a shared
machine a turn may wait for a core: the turns the scheduler did not preempt (no involuntary
context switch of the writing thread, `getrusage`) are reported on their own as well, so a
tail of the writer's own (the fsync of a checkpoint in the commit) is told from the scheduler's.

Waking a parked session (`SessionWriter.wake`, what `heron serve` does) is timed on a
session of 10 entries and one of 100,000: it reads the head and the last tool round only, so
the two should cost the same. The wake followed by the first read of `history` (what the
woken session's first model call does: the engine sends the whole history) is printed beside
it, so what the model call still pays per entry is visible.

    python bench/session_append.py [--turns 3000]

Targets: append p99 ≤ 1 ms; resume of 3,000 turns ≤ 20 ms; wake at 100,000 entries = at 10.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

from heron.messages import AssistantMessage, ToolCallPart, ToolResultMessage, UserMessage
from heron.sessions.repair import repair_messages
from heron.sessions.sqlite_store import SqliteSessionStore
from heron.sessions.writer import SessionWriter

SESSION = "bench"


def turn_messages(
    i: int,
) -> tuple[UserMessage, AssistantMessage, ToolResultMessage, AssistantMessage]:
    call = ToolCallPart(id=f"c{i}", name="read_file", arguments={"path": f"src/module_{i}.py"})
    return (
        UserMessage(content=f"turn {i}: " + "please look at the module and explain it. " * 3),
        AssistantMessage(
            text="Let me read the file first, then I will explain what it does.", tool_calls=(call,)
        ),
        ToolResultMessage(call_id=call.id, name=call.name, content="x = 1\n" * 166),
        AssistantMessage(text="The module defines one constant. " * 12),
    )


def run(turns: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        store = SqliteSessionStore.open(state)
        writer = SessionWriter.open(store, SESSION)
        timings: list[float] = []
        preempted: list[bool] = []
        payload = 0
        for i in range(turns):
            messages = turn_messages(i)
            payload += sum(len(m.model_dump_json()) for m in messages)
            switches = _preemptions()
            started = time.perf_counter()
            for message in messages:  # one transaction per engine append, as in a real turn
                writer.add(message)
            timings.append((time.perf_counter() - started) * 1e6)
            preempted.append(_preemptions() != switches)
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = sum(p.stat().st_size for p in state.glob("heron.db*"))
        store.close()

        reopened = SqliteSessionStore.open(state)
        started = time.perf_counter()
        resumed = SessionWriter.open(reopened, SESSION)
        resume_ms = (time.perf_counter() - started) * 1000
        assert len(resumed.history) == 4 * turns
        split = resume_split(reopened)
        reopened.close()

    warm = turns // 10  # the first tenth warms caches and the file
    ordered = sorted(timings[warm:])
    p50 = statistics.median(ordered)
    p99 = ordered[int(len(ordered) * 0.99) - 1]
    own = sorted(t for t, p in zip(timings[warm:], preempted[warm:], strict=True) if not p)
    print(f"turns written                 {turns} (4 entries each, 4 transactions)")
    print(
        f"append latency per turn       p50 {p50:7.0f} µs   p99 {p99:7.0f} µs   "
        f"max {ordered[-1]:7.0f} µs"
    )
    if own:
        print(
            f"  not preempted ({len(own)} turns)   p50 {statistics.median(own):7.0f} µs   "
            f"p99 {own[int(len(own) * 0.99) - 1]:7.0f} µs   max {own[-1]:7.0f} µs"
        )
    print(f"per entry (p50)               {p50 / 4:7.0f} µs")
    print(
        f"disk per 1,000 turns          {size / turns * 1000 / 1e6:7.2f} MB "
        f"(message JSON alone: {payload / turns * 1000 / 1e6:.2f} MB)"
    )
    print(f"resume (load + repair check)  {resume_ms:7.1f} ms for {turns} turns")
    load, check, index = split
    print(
        f"  of it, 5 more (medians)     load {load:.1f} ms (SQL, JSON, messages), "
        f"provider-rule check {check:.1f} ms, writer and call index {index:.1f} ms"
    )
    print("targets: append p99 ≤ 1,000 µs; resume of 3,000 turns ≤ 20 ms")


def resume_split(store: SqliteSessionStore) -> tuple[float, float, float]:
    """Medians of 5 (ms) of what `SessionWriter.open` does, phase by phase: the store's read
    (`load_with_head`: SQL, JSON, messages), the provider-rule check (`repair_messages`) and
    the writer with its call index. The histories stay alive, as open sessions do."""
    samples: list[tuple[float, float, float]] = []
    alive = []
    for _ in range(5):
        started = time.perf_counter()
        history, head = store.load_with_head(SESSION)
        loaded = time.perf_counter()
        repair_messages(history)
        checked = time.perf_counter()
        alive.append(SessionWriter(store, SESSION, history, head))
        samples.append((loaded - started, checked - loaded, time.perf_counter() - checked))
    load, check, index = (statistics.median(s[i] for s in samples) * 1000 for i in range(3))
    return load, check, index


def _preemptions() -> int:
    """Involuntary context switches of this thread so far."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw


def wake_ms(store: SqliteSessionStore, name: str, *, read: bool = False) -> float:
    """Median of `SessionWriter.wake`; `read`: and then `history`, what the first model call
    of the woken session reads."""
    samples = []
    for _ in range(21 if not read else 5):
        started = time.perf_counter()
        writer = SessionWriter.wake(store, name)
        if read:
            assert writer.history
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def wake(entries: tuple[int, ...] = (10, 100_000)) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteSessionStore.open(Path(tmp))
        for n in entries:
            messages = [m for i in range(n // 4 + 1) for m in turn_messages(i)][:n]
            store.append(f"wake-{n}", messages)
        figures = {n: wake_ms(store, f"wake-{n}") for n in entries}
        read = {n: wake_ms(store, f"wake-{n}", read=True) for n in entries}
        store.close()
    for label, got in (("wake (head + last round)", figures), ("wake, then history read", read)):
        shown = "   ".join(f"{n:,} entries {ms:8.2f} ms" for n, ms in got.items())
        ratio = got[entries[-1]] / got[entries[0]]
        print(f"{label:<29} {shown}   ratio {ratio:.2f}")
    print("target: wake at 100,000 entries ≈ at 10 (the read is the model's whole context)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=3000)
    run(parser.parse_args().turns)
    wake()


if __name__ == "__main__":
    main()
