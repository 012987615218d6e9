"""Artifact store on a 100 MB output: store, page reads at several depths, and grep.

Generates a log-like output of about 100 MB in a temporary state directory, stores it through
`ArtifactSpill` (as the engine would), then times `read_artifact` pages at the start, middle
and end and `grep_artifact` for a rare and a common pattern, through the tools themselves.

    python bench/artifact_store.py
"""

from __future__ import annotations

import asyncio
import re
import statistics
import tempfile
import time
from pathlib import Path

from heron.artifacts.sqlite_store import SqliteArtifactCatalog
from heron.artifacts.store import ArtifactSpill, ArtifactStore
from heron.artifacts.tools import artifact_tools
from heron.tools.definition import Tool, ToolContext

TARGET_BYTES = 100 * 1024 * 1024
RUNS = 5


def make_output() -> str:
    lines: list[str] = []
    size = number = 0
    while size < TARGET_BYTES:
        level = "ERROR" if number % 50_000 == 7 else "INFO"
        line = (
            f"2024-03-15T14:{number // 60 % 60:02d}:{number % 60:02d}Z {level} "
            f"worker-{number % 17} handled request id={number} status=200 bytes={number * 7 % 9973}"
        )
        lines.append(line)
        size += len(line) + 1
        number += 1
    return "\n".join(lines) + "\n"


async def timed(tool: Tool, arguments: dict[str, object]) -> tuple[float, str]:
    ctx = ToolContext(call_id="bench", turn_id="bench")
    walls: list[float] = []
    head = ""
    for _ in range(RUNS):
        start = time.perf_counter()
        result = await tool.execute(tool.validate(arguments), ctx)
        walls.append(time.perf_counter() - start)
        assert result.success, result.error
        head = result.output.splitlines()[0]
    return statistics.median(walls), head


async def main() -> None:
    output = make_output()
    with tempfile.TemporaryDirectory() as tmp:
        store = ArtifactStore(SqliteArtifactCatalog(Path(tmp)), Path(tmp) / "artifacts")
        start = time.perf_counter()
        preview = ArtifactSpill(store).spill("shell", "c1", output)
        stored = time.perf_counter() - start
        assert preview is not None
        found = re.search(r"art_[0-9a-f]{16}", preview)
        assert found is not None
        art = found.group(0)
        info = store.info(art)
        print(
            f"stored {info.size / 1e6:.1f} MB, {info.lines:,} lines in {stored * 1000:.0f} ms "
            "(spill: hash, line index, write)"
        )
        read, grep = artifact_tools(store)
        for label, offset in [("start", 1), ("middle", info.lines // 2), ("end", info.lines - 199)]:
            wall, head = await timed(read, {"id": art, "offset": offset, "limit": 200})
            shown = head.split(" — ")[-1]
            print(f"read_artifact 200 lines at the {label:<6}: {wall * 1000:7.2f} ms  ({shown})")
        for label, pattern in [("rare", r"ERROR"), ("common", r"id=\d*77 ")]:
            wall, head = await timed(grep, {"id": art, "pattern": pattern})
            count = head.split(" in ")[0]
            print(f"grep_artifact {label:<6} {wall * 1000:7.1f} ms  ({count})")


if __name__ == "__main__":
    asyncio.run(main())
