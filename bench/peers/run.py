"""heron beside pydantic-ai, the OpenAI Agents SDK and LangGraph, in one run, with ratios.

Creates (once) a separate virtual environment with the pinned peers of `requirements.txt`
(default `.cache/bench-peers`, or `$HERON_BENCH_PEERS_VENV`), prints their versions, then runs
`workloads.py` once per framework, each in a fresh process, and prints one table:

- CPU µs per turn at N = 20, 200, 400 scripted turns of one async `add(a, b)` call each, and
  the flatness N=400 / N=20;
- the wall time of one model turn with 50 parallel calls of a 50 ms tool, against 50 ms;
- RSS after import + agent construction.

`heron-full` has every lifecycle feature on (hooks, approval by policy, duplicate guard, loop
detection, receipts, observer); `heron` and the peers run with their defaults (`heron` with
`autonomy="full"`, so that its call runs rather than being denied for want of an operator);
`asyncio` is a bare loop, the floor. Everything is in memory: the durable append is its own row in
`bench/session_append.py`.

    python bench/peers/run.py [--skip-peers]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PINS = HERE / "requirements.txt"
HERON_ROWS = ("heron-full", "heron", "asyncio")
PEER_ROWS = ("pydantic-ai", "openai-agents", "langgraph")
PEER_DISTRIBUTIONS = ("pydantic-ai-slim", "openai-agents", "langgraph")
RUN_TIMEOUT_S = 900

TARGET_TURN_US = 50.0
TARGET_FLATNESS = 1.1
TARGET_FANOUT = 1.05
TARGET_RSS_MIB = 40.0


def peers_python() -> Path:
    """The peers' interpreter, in a virtual environment made (or refreshed) from the pins."""
    venv = Path(os.environ.get("HERON_BENCH_PEERS_VENV") or ROOT / ".cache" / "bench-peers")
    python = venv / "bin" / "python"
    stamp = venv / "heron-pins.txt"
    pins = PINS.read_text(encoding="utf-8")
    if python.exists() and stamp.exists() and stamp.read_text(encoding="utf-8") == pins:
        return python
    print(f"creating the peers' environment in {venv} (pip, once)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "-r", str(PINS)], check=True)
    stamp.write_text(pins, encoding="utf-8")
    return python


def versions(python: Path) -> dict[str, str]:
    script = (
        "import json, sys; from importlib.metadata import version; "
        "print(json.dumps({d: version(d) for d in sys.argv[1:]}))"
    )
    out = subprocess.run(
        [str(python), "-c", script, *PEER_DISTRIBUTIONS],
        check=True,
        capture_output=True,
        text=True,
    )
    return dict(json.loads(out.stdout))


def measure(python: Path | str, framework: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(
        [str(python), str(HERE / "workloads.py"), framework],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        timeout=RUN_TIMEOUT_S,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def table(rows: dict[str, dict[str, Any]]) -> None:
    full = rows["heron-full"]["turn_us"]
    peers = [rows[p]["turn_us"]["200"] for p in PEER_ROWS if p in rows]
    print(
        f"{'framework':<14}{'µs/turn N=20':>13}{'N=200':>9}{'N=400':>9}{'400/20':>8}"
        f"{'× heron-full':>13}{'fan-out ms':>11}{'× 50 ms':>8}{'RSS MiB':>9}"
    )
    for name, row in rows.items():
        turns = row["turn_us"]
        print(
            f"{name:<14}{turns['20']:>13.0f}{turns['200']:>9.0f}{turns['400']:>9.0f}"
            f"{turns['400'] / turns['20']:>8.2f}{turns['200'] / full['200']:>13.1f}"
            f"{row['fanout_ms']:>11.1f}{row['fanout_ms'] / 50:>8.2f}{row['rss_mib']:>9.1f}"
        )
    print()
    heron = rows["heron"]
    print("figure                                   measured   target")
    print(f"engine µs/turn, every feature on (N=200) {full['200']:>8.0f}   ≤ {TARGET_TURN_US:.0f}")
    print(
        f"flatness N=400 / N=20 (every feature on) {full['400'] / full['20']:>8.2f}"
        f"   ≤ {TARGET_FLATNESS}"
    )
    if peers:
        print(f"fastest peer / heron-full (N=200)        {min(peers) / full['200']:>8.1f}×   ≥ 40×")
    print(
        f"fan-out 50 × 50 ms (whole run)           {heron['fanout_ms'] / 50:>8.2f}×"
        f"   ≤ {TARGET_FANOUT}×"
    )
    print(
        f"import + agent construction RSS (MiB)    {heron['rss_mib']:>8.1f}"
        f"   ≤ {TARGET_RSS_MIB:.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-peers", action="store_true", help="heron and asyncio rows only")
    skip = parser.parse_args().skip_peers
    python = None if skip else peers_python()
    if python is not None:
        pinned = ", ".join(f"{d} {v}" for d, v in versions(python).items())
        print(f"peers: {pinned}; python {sys.version.split()[0]}")
    print(f"load average before: {load()}", flush=True)
    rows = {name: measure(sys.executable, name) for name in HERON_ROWS}
    if python is not None:
        for name in PEER_ROWS:
            print(f"  measuring {name} …", flush=True)
            rows[name] = measure(python, name)
    print(f"load average after:  {load()}\n")
    table(rows)


if __name__ == "__main__":
    main()
