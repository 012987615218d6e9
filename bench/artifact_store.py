"""Artifact store on a 100 MB output: store, page reads at several depths, and grep.

Generates a log-like output of about 100 MB, stores it through `ArtifactSpill` (as the engine
would), then times `read_artifact` pages at the start, middle and end and `grep_artifact` for a
rare and a common pattern, through the tools themselves — once with the contents in files of a
temporary state directory, once in a real, durable PostgreSQL server (the shared store's
chunks; skipped when the server binaries are not installed).

    python bench/artifact_store.py
"""

from __future__ import annotations

import asyncio
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from heron._support.postgres import open_pool  # noqa: E402
from heron.artifacts.postgres_contents import PostgresArtifactContents  # noqa: E402
from heron.artifacts.postgres_store import PostgresArtifactCatalog  # noqa: E402
from heron.artifacts.sqlite_store import SqliteArtifactCatalog  # noqa: E402
from heron.artifacts.store import ArtifactSpill, ArtifactStore  # noqa: E402
from heron.artifacts.tools import artifact_tools  # noqa: E402
from heron.tools.definition import Tool, ToolContext  # noqa: E402
from support.postgres import PostgresServer, pg_bin  # noqa: E402

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


@contextmanager
def file_store() -> Iterator[ArtifactStore]:
    with tempfile.TemporaryDirectory() as tmp:
        yield ArtifactStore(SqliteArtifactCatalog(Path(tmp)), Path(tmp) / "artifacts")


@contextmanager
def postgres_store() -> Iterator[ArtifactStore]:
    bindir = pg_bin()
    assert bindir is not None
    server = PostgresServer(bindir, durable=True).start()
    try:
        url = server.empty_database()
        pool = open_pool(url, max_size=4, migrate=True)
        try:
            yield ArtifactStore(PostgresArtifactCatalog(pool), PostgresArtifactContents(pool))
        finally:
            pool.close()
    finally:
        server.destroy()


async def main() -> None:
    output = make_output()
    stores = [("files", file_store)]
    if pg_bin() is not None:
        stores.append(("postgresql", postgres_store))
    else:
        print("postgresql: server binaries not found (scripts/bootstrap-system.sh); skipped")
    for name, opened in stores:
        print(f"-- contents in {name}")
        with opened() as store:
            await measure(store, output)


async def measure(store: ArtifactStore, output: str) -> None:
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
