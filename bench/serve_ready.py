"""`heron serve` start-up: spawn → accepting webhooks, and spawn → processing them.

Each sample is a fresh `heron serve` (scripted model, temporary state directory, one webhook
port), timed from the spawn to:

- **serve_accepting**: the server's line saying its webhook listener is up;
- **accepting**: the first webhook answered `202` (durably in the bus; target ≤ 500 ms) —
  after the line by however long the listener waits on the agent side's imports for the GIL;
- **processing**: that event's turn streamed its first text (the agent side is up and took it);
- **serve_started**: the server's own `serve_started` line (everything started).

Give `--src` one or more source trees (each a directory holding the `heron` package) to
compare them: the runs are interleaved, tree after tree, so a change in the machine's load
hits every tree alike. The load average is printed before and after.

    python bench/serve_ready.py [--runs 7] [--src A/src B/src]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from webhook_request import signed_webhook

SECRET = "bench-serve-ready-secret"


def _post(port: int) -> int | None:
    """The status of one signed webhook, or `None` while nothing listens."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(signed_webhook(port, "/webhook", "ready-1", SECRET))
            status = sock.makefile("rb").readline()
    except OSError:
        return None
    return int(status.split()[1]) if status else None


def sample(root: Path, src: str | None) -> dict[str, float]:
    """One spawn: ms to accepting, processing and `serve_started`."""
    (root / "script.yaml").write_text("turns:\n  - text: ok\n", encoding="utf-8")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "HERON_STATE_DIR": str(root / "state"),
        "XDG_CONFIG_HOME": str(root / "config"),
        "HERON_WEBHOOK_SECRET": SECRET,
    }
    if src is not None:
        env["PYTHONPATH"] = src
    marks: dict[str, float] = {}
    seen = threading.Condition()
    spawned = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "heron.cli.main", "serve",
            "--model", "scripted:script.yaml", "--webhook-port", str(port),
            "--subscribe", "webhook",
        ],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            now = time.perf_counter()
            try:
                kind = json.loads(raw).get("type")
            except ValueError:
                continue
            with seen:
                if kind in ("serve_accepting", "serve_started", "text_delta") and kind not in marks:
                    marks[kind] = now
                    seen.notify_all()

    threading.Thread(target=read, daemon=True).start()
    try:
        while True:
            if time.perf_counter() - spawned > 60:
                raise RuntimeError("heron serve did not accept a webhook within 60 s")
            status = _post(port)
            if status == 202:
                accepted = time.perf_counter()
                break
            if status is not None:
                raise RuntimeError(f"the first webhook was answered {status}")
            time.sleep(0.002)  # polling a port that is not listening yet: the measurement
        with seen:
            if not seen.wait_for(lambda: {"serve_started", "text_delta"} <= marks.keys(), 60):
                raise RuntimeError(f"heron serve did not process the event: {marks}")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    figures = {
        "accepting": (accepted - spawned) * 1000,
        "processing": (marks["text_delta"] - spawned) * 1000,
        "serve_started": (marks["serve_started"] - spawned) * 1000,
    }
    if "serve_accepting" in marks:  # a heron before listener-first has no such line
        figures["serve_accepting"] = (marks["serve_accepting"] - spawned) * 1000
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--src", nargs="+", help="source trees to compare (default: this one)")
    args = parser.parse_args()
    trees: list[str | None] = list(args.src) if args.src else [None]
    results: dict[str | None, list[dict[str, float]]] = {tree: [] for tree in trees}
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs + 1):
            for i, tree in enumerate(trees):
                root = Path(tmp) / f"{run}-{i}"
                root.mkdir()
                figures = sample(root, tree)
                if run:  # the first round warms the file cache and the bytecode
                    results[tree].append(figures)
    print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for i, tree in enumerate(trees):
        print(f"tree {i}: {tree or 'this checkout'}")
        for what in ("serve_accepting", "accepting", "processing", "serve_started"):
            values = sorted(r[what] for r in results[tree] if what in r)
            if not values:
                print(f"  {what:<15} -")
                continue
            target = "   target ≤ 500" if what == "accepting" else ""
            print(
                f"  {what:<15} median {statistics.median(values):6.0f} ms   "
                f"min {values[0]:6.0f}   max {values[-1]:6.0f}   ({len(values)} runs){target}"
            )


if __name__ == "__main__":
    main()
