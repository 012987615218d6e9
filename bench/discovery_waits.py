"""The query embedding's latency with onnxruntime's workers spinning or sleeping between the
graph's parallel sections, alternated run by run on the same queries.

    HF_HUB_OFFLINE=1 python bench/discovery_waits.py [--rounds 6] [--queries 60]

Each round runs every setting in a fresh process (one session each, so a spinning session
never shares the CPU with the sleeping one) over the same test-split queries; a setting's
p50 is over all its rounds' samples. The load average is printed after every round: on a
shared machine it moves within seconds, and alternating short runs is what keeps the
comparison fair. `E5OnnxEmbedder` sleeps (docs/discovery.md).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from discovery_common import DEFAULT_DATA, queries, require

SETTINGS = {
    "spinning (onnxruntime's default), 2 threads": ("2", "1"),
    "sleeping (heron's default), 2 threads": ("2", "0"),
    "1 thread": ("1", "0"),
}


def child(threads: int, spinning: str, data: Path, start: int, count: int) -> None:
    from heron.discovery.e5_onnx import E5OnnxEmbedder, encoder_model

    embedder = E5OnnxEmbedder(threads=threads)
    options = embedder._session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    if spinning == "1":  # the same graph in a session left at onnxruntime's default
        ort = importlib.import_module("onnxruntime")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        embedder._session = ort.InferenceSession(
            encoder_model(embedder._weights), options, providers=["CPUExecutionProvider"]
        )
    _, test = queries(data)
    sample = [q.text for q in test[:: max(1, len(test) // 300)]][:300]
    texts = (sample[start:] + sample[:start])[:count]
    embedder.embed_queries(texts[:3])  # the session's first runs allocate
    times = []
    for text in texts:
        t0 = time.perf_counter()
        embedder.embed_queries([text])
        times.append((time.perf_counter() - t0) * 1000)
    print(json.dumps(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    data = require(args.data)
    if args.child:
        threads, spinning, start, count = args.child
        child(int(threads), spinning, data, int(start), int(count))
        return
    samples: dict[str, list[float]] = {name: [] for name in SETTINGS}
    print(f"load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    for n in range(args.rounds):
        start = n * 37 % 300
        for name, (threads, spinning) in SETTINGS.items():
            command = [sys.executable, __file__, "--data", str(data), "--child", threads]
            out = subprocess.run(
                [*command, spinning, str(start), str(args.queries)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            samples[name].extend(json.loads(out.splitlines()[-1]))
        print(f"   round {n + 1}: load {os.getloadavg()[0]:.2f}")
    for name, times in samples.items():
        ordered = sorted(times)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        print(f"   {name:46} p50 {statistics.median(times):6.2f} ms  p99 {p99:6.2f} ms")


if __name__ == "__main__":
    main()
