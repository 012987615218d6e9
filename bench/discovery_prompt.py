"""Prompt tokens of a tool catalogue, three ways, at 120, 500 and 2,000+ tools:

- **direct**: every tool's schema in the request's tool list;
- **deferred, unbounded** (heron before phase 2): `tool_search` plus a catalogue section that
  lists every tool (`name - summary`, or names by server above 12,000 characters);
- **discover_tools**: the search tool plus the catalogue section bounded by
  `[discovery] catalogue_tokens` (2,000 tokens for section and meta-tools together).

    python bench/discovery_prompt.py [--data DIR]

The catalogue is the large one of `bench/discovery_catalogue.py` (MetaTool and ChatGPT-plugin
definitions, the reference MCP servers' real tools, mirrors to pass 2,000), in its order.
Tokens: heron's `anthropic` estimate (cl100k profile + 15 %) and, when `bpe-openai` is
installed, the exact o200k count.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from discovery_catalogue import large_catalogue
from discovery_common import DEFAULT_DATA, require
from heron.discovery import ToolDoc
from heron.mcp.assembly import DiscoveryOptions, assemble_tools
from heron.mcp.catalogue import McpCatalogue
from heron.mcp.config import McpConfig
from heron.mcp.tool_search import ToolSearchTool
from heron.models.tokens import EstimateCounter, TokenCounter, count_tools, exact_counter
from heron.tools.definition import ToolAnnotations, ToolContext, ToolResult, ToolSpec
from heron.tools.registry import ActivatedToolSet


class Listed:
    """A catalogue entry as a tool (never run)."""

    def __init__(self, doc: ToolDoc) -> None:
        self._spec = ToolSpec(
            name=doc.qualified,
            description=doc.description,
            parameters=dict(doc.input_schema) or {"type": "object"},
            annotations=ToolAnnotations(read_only=True),
            owner=f"mcp:{doc.server}",
        )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return dict(arguments)

    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult.fail("not run")


def sizes(tools: list[Listed], counter: TokenCounter) -> tuple[int, int, int]:
    direct = count_tools(counter, [t.spec for t in tools])
    catalogue = McpCatalogue(tools)
    legacy = ToolSearchTool(catalogue, ActivatedToolSet(), name="tool_search")
    unbounded = counter.count(catalogue.prompt_section()) + count_tools(counter, [legacy.spec])
    mcp = assemble_tools(
        McpConfig(exposure="deferred"),
        tools,
        autonomy="full",
        allowed_tools=None,
        excluded_tools=(),
        activated=ActivatedToolSet(),
        discovery=DiscoveryOptions(tool="discover_tools", embeddings=False),
    )
    bounded = counter.count(mcp.prompt_section) + count_tools(counter, [t.spec for t in mcp.tools])
    return direct, unbounded, bounded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    docs = large_catalogue(require(args.data))
    counters: list[TokenCounter] = [EstimateCounter("anthropic")]
    exact = exact_counter("o200k_base")
    if exact is not None:
        counters.append(exact)
    print("prompt tokens of the tool catalogue (section + search tool, or every schema)")
    print(f"{'tools':>6} {'counter':>20} {'direct':>9} {'deferred':>9} {'discover':>9}  saving")
    for count in (120, 500, len(docs)):
        tools = [Listed(d) for d in docs[:count]]
        for counter in counters:
            direct, unbounded, bounded = sizes(tools, counter)
            print(
                f"{count:>6} {counter.name:>20} {direct:>9,} {unbounded:>9,} {bounded:>9,}  "
                f"{100 * (1 - bounded / direct):.1f} % of direct"
            )


if __name__ == "__main__":
    main()
