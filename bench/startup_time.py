"""Start-up time of the `heron` command: `heron --help`, and `heron chat` to its first prompt.

Each sample is a fresh process (`python -m heron.cli.main`, as the console script runs it),
in a temporary state directory. `heron chat` runs on a pseudo-terminal with a scripted model
and is timed until its prompt appears, then left with Ctrl-D. A bare `python -c pass` is
measured alongside as the floor.

    python bench/startup_time.py [--runs 10]

Target: `heron --help` <= 50 ms (reported, not enforced).
"""

from __future__ import annotations

import argparse
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERON = (sys.executable, "-m", "heron.cli.main")


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - started) * 1000


def chat_to_prompt(env: dict[str, str], cwd: Path) -> float:
    master, slave = os.openpty()
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*HERON, "chat", "--model", "scripted:script.yaml"],
        cwd=cwd,
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    seen = b""
    try:
        while b"you>" not in seen:
            ready, _, _ = select.select([master], [], [], 30)
            if not ready:
                raise RuntimeError(f"no prompt within 30 s: {seen[-500:]!r}")
            seen += os.read(master, 65536)
        elapsed = (time.perf_counter() - started) * 1000
        os.write(master, b"\x04")  # Ctrl-D: leave
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return elapsed


def report(label: str, samples: list[float], target: str = "") -> None:
    print(
        f"{label:32} median {statistics.median(samples):6.0f} ms   min {min(samples):6.0f} ms"
        f"   max {max(samples):6.0f} ms   ({len(samples)} runs){target}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "script.yaml").write_text("turns:\n  - text: hi\n", encoding="utf-8")
        env = {
            **os.environ,
            "HERON_STATE_DIR": str(root / "state"),
            "XDG_CONFIG_HOME": str(root / "config"),
            "TERM": "xterm",
            "PROMPT_TOOLKIT_NO_CPR": "1",
        }
        timed([*HERON, "--help"], env)  # warm the file cache and bytecode
        report("python -c pass", [timed([sys.executable, "-c", "pass"], env) for _ in range(runs)])
        helps = [timed([*HERON, "--help"], env) for _ in range(runs)]
        report("heron --help", helps, "   target ≤ 50 ms")
        report("heron chat (to first prompt)", [chat_to_prompt(env, root) for _ in range(runs)])


if __name__ == "__main__":
    main()
