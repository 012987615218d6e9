"""Deferred MCP exposure: prompt size, `tool_search` latency and recall@5.

    python bench/mcp_tool_search.py [--data DIR]

Data: the MetaTool / ToolE labelled queries (MIT licence), by default from
`../shared/data/metatool` or `$HERON_METATOOL_DIR`.

1. **Prompt size** of a catalogue of >= 500 tools, sent directly (every tool's name,
   description and JSON Schema) vs deferred (`tool_search` + the compact catalogue section).
   Tokens are estimated as characters / 4. The catalogue is the 199 MetaTool tools, the 390
   ChatGPT-plugin descriptions of `plugin_info.json` and, when installed, the real tool
   definitions of the reference MCP servers. The plugin-style tools get a minimal one-parameter
   schema, so the direct size (and the saving) is an underestimate.
2. **Latency** of one `tool_search` call (search, activation, rendering) over that catalogue.
3. **Recall@5** on the single-tool MetaTool queries over the 199 labelled tools. The queries are
   split once by sha256 of the query text (even: tune, odd: test); the ranker's knobs and its
   related-words lexicon were chosen on the tune part only, and the test part is reported.
   The baseline is plain BM25 over name and description with the same tokeniser.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import hashlib
import json
import os
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from heron.mcp.catalogue import McpCatalogue
from heron.mcp.tool_search import SearchParams, ToolSearchIndex, ToolSearchTool
from heron.mcp.trust import ToolDefinition
from heron.tools.definition import ToolContext, ToolResult, ToolSpec
from heron.tools.registry import ActivatedToolSet

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("HERON_METATOOL_DIR", ROOT.parent / "shared/data/metatool"))
BASELINE = SearchParams(
    k1=1.5,
    b=0.75,
    name_weight=1,
    ngram_weight=0.0,
    expansion_weight=0.0,
    drop_request_words=False,
    min_score=0.0,
)


class CatalogueTool:
    """A tool that only needs a spec (the benchmark never executes it)."""

    def __init__(self, definition: ToolDefinition) -> None:
        self.definition = definition
        self._spec = ToolSpec(
            name=definition.prefixed,
            description=definition.description,
            parameters=definition.input_schema,
            owner=f"mcp:{definition.server}",
        )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return dict(arguments)

    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult.ok()


def _schema(description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"query": {"type": "string", "description": description}},
        "required": ["query"],
    }


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in name)


def metatool_tools(data: Path) -> list[ToolDefinition]:
    descriptions = json.loads((data / "plugin_des.json").read_text())
    return [
        ToolDefinition(
            server="metatool",
            name=_safe(name),
            description=text,
            input_schema=_schema(f"What to ask {name}."),
        )
        for name, text in descriptions.items()
    ]


def plugin_tools(data: Path) -> list[ToolDefinition]:
    plugins = json.loads((data / "plugin_info.json").read_text())
    seen: set[str] = set()
    out = []
    for plugin in plugins:
        name = _safe(plugin["name_for_model"])
        if name in seen:
            continue
        seen.add(name)
        out.append(
            ToolDefinition(
                server="plugins",
                name=name,
                title=plugin.get("name_for_human"),
                description=plugin["description_for_model"],
                input_schema=_schema(plugin.get("description_for_human", "")),
            )
        )
    return out


async def reference_server_tools() -> list[ToolDefinition]:
    """Real definitions of the reference MCP servers, when they are installed."""
    from heron.mcp.client import McpClientManager
    from heron.mcp.config import McpServerConfig

    bin_dir = ROOT / ".cache/npm/node_modules/.bin"
    servers = {}
    if (bin_dir / "mcp-server-everything").exists():
        everything = bin_dir / "mcp-server-everything"
        servers["everything"] = McpServerConfig(command=str(everything), args=["stdio"])
        filesystem = bin_dir / "mcp-server-filesystem"
        servers["filesystem"] = McpServerConfig(command=str(filesystem), args=[str(ROOT)])
    time_bin = Path(sys.executable).parent / "mcp-server-time"
    if time_bin.exists():
        servers["time"] = McpServerConfig(command=str(time_bin))
    out: list[ToolDefinition] = []
    async with McpClientManager(servers) as manager:
        for name in manager.servers:
            out.extend(await manager.definitions(name))
    return out


def tokens(chars: int) -> int:
    """The usual rough estimate: four characters per token."""
    return chars // 4


def prompt_size(tools: Sequence[CatalogueTool]) -> None:
    catalogue = McpCatalogue(tools)
    search = ToolSearchTool(catalogue, ActivatedToolSet())
    direct = sum(len(json.dumps(t.spec.to_wire(), ensure_ascii=False)) for t in tools)
    deferred = len(json.dumps(search.spec.to_wire(), ensure_ascii=False)) + len(
        catalogue.prompt_section()
    )
    print(f"catalogue: {len(tools)} tools")
    print(f"  direct   : {direct:>8} chars  ~{tokens(direct):>7} tokens")
    print(f"  deferred : {deferred:>8} chars  ~{tokens(deferred):>7} tokens")
    print(f"  saving   : {100 * (1 - deferred / direct):.1f} %  (tokens = chars / 4)")


def split(rows: list[dict[str, str]]) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    def part(query: str) -> int:
        return int(hashlib.sha256(query.encode()).hexdigest(), 16) % 2

    return [r for r in rows if part(r["Query"]) == 0], [r for r in rows if part(r["Query"]) == 1]


def recall_at_5(index: ToolSearchIndex, rows: Sequence[dict[str, str]]) -> float:
    hits = 0
    for row in rows:
        found = [h.entry.tool_name for h in index.search(row["Query"], 5)]
        hits += _safe(row["Tool"]) in found
    return hits / len(rows)


def latency(tools: Sequence[CatalogueTool], queries: Sequence[str]) -> None:
    catalogue = McpCatalogue(tools)
    started = time.perf_counter()
    search = ToolSearchTool(catalogue, ActivatedToolSet())
    build_ms = (time.perf_counter() - started) * 1000
    samples = []
    for query in queries:
        search.activated = ActivatedToolSet()
        t0 = time.perf_counter()
        search.search(query, 5)
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    p50 = statistics.median(samples)
    p95 = samples[int(len(samples) * 0.95)]
    print(f"tool_search over {len(tools)} tools, {len(samples)} queries:")
    print(f"  index build {build_ms:.0f} ms; per call p50 {p50:.2f} ms, p95 {p95:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    data: Path = args.data
    if not (data / "data/all_clean_data.csv").exists():
        sys.exit(f"MetaTool data not found in {data} (use --data)")

    labelled = metatool_tools(data)
    reference = asyncio.run(reference_server_tools())
    every = [*labelled, *plugin_tools(data), *reference]
    tools = [CatalogueTool(d) for d in every]
    print(f"({len(reference)} real MCP tool definitions from the reference servers included)")
    prompt_size(tools)

    with (data / "data/all_clean_data.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    tune, test = split(rows)
    latency(tools, [r["Query"] for r in test[:2000]])

    entries = McpCatalogue([CatalogueTool(d) for d in labelled]).entries
    tuned = ToolSearchIndex(entries)
    baseline = ToolSearchIndex(entries, BASELINE)
    print(f"recall@5, MetaTool single-tool queries, {len(entries)} tools")
    print(f"  split by sha256(query) % 2: tune {len(tune)}, test {len(test)}")
    for label, index in (("baseline BM25", baseline), ("heron ranker ", tuned)):
        print(
            f"  {label} : tune {recall_at_5(index, tune):.3f}  test {recall_at_5(index, test):.3f}"
        )
    empty = sum(not tuned.search(r["Query"], 5) for r in test)
    print(f"  'nothing found' answers on test queries: {empty} ({100 * empty / len(test):.1f} %)")


if __name__ == "__main__":
    main()
