"""Catalogues for the discovery benchmarks: the reference MCP servers' real definitions, and a
large catalogue (2,000+ tools) built from them and the MetaTool data.

    python bench/discovery_catalogue.py reference [--npm DIR ...]   # regenerate the JSON once
    python bench/discovery_catalogue.py build --out FILE [--data DIR]

`reference` starts the reference MCP servers over stdio, lists their tools with the official
`mcp` SDK client and writes `bench/discovery_data/reference_mcp_tools.json` (catalogue-file
format: server → `tools/list` result). The servers are MIT-licensed (their READMEs say so);
the file records their versions under `bench/discovery_data/README.md`.

`build` writes the large catalogue: every distinct MetaTool tool (`plugin_des.json`, each its
own one-tool server, as a plugin is), the ChatGPT plugins of `plugin_info.json` not already
there, the 47 merged tools of `big_tool_des.json`, and the reference servers' real tools;
then, to reach 2,000+ tools, mirrored copies of those servers (`<server>_m1`, …) whose
descriptions carry a mirror tag, so each copy is a distinct text to embed. The mirrors are
synthetic: they measure scale (latency, memory, build time, prompt tokens), never recall.
It reads the MetaTool data from ../shared/data (see discovery_common.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from discovery_common import DEFAULT_DATA, ROOT, require, safe
from heron.discovery import ToolDoc, dump_catalogue, load_catalogue

DATA_DIR = Path(__file__).resolve().parent / "discovery_data"
REFERENCE = DATA_DIR / "reference_mcp_tools.json"
MIRRORS = ("eu", "us", "apac", "latam", "africa")


def _plugin_schema(text: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"query": {"type": "string", "description": text}},
        "required": ["query"],
    }


def metatool_docs(data: Path) -> list[ToolDoc]:
    """The 199 labelled MetaTool tools, each its own server (a plugin is one service)."""
    descriptions = json.loads((data / "plugin_des.json").read_text())
    return [
        ToolDoc(
            server=safe(name),
            name=safe(name),
            description=text,
            input_schema=_plugin_schema(f"What to ask {name}."),
        )
        for name, text in descriptions.items()
    ]


def plugin_docs(data: Path, taken: set[str]) -> list[ToolDoc]:
    out = []
    for plugin in json.loads((data / "plugin_info.json").read_text()):
        name = safe(plugin["name_for_model"])
        if name in taken:
            continue
        taken.add(name)
        out.append(
            ToolDoc(
                server=name,
                name=name,
                title=plugin.get("name_for_human"),
                description=plugin["description_for_model"],
                input_schema=_plugin_schema(plugin.get("description_for_human", "")),
            )
        )
    for name, text in json.loads((data / "big_tool_des.json").read_text()).items():
        key = safe(name)
        if key in taken:
            continue
        taken.add(key)
        out.append(
            ToolDoc(server=key, name=key, description=text, input_schema=_plugin_schema(text))
        )
    return out


def distinct_catalogue(data: Path) -> list[ToolDoc]:
    """Every distinct real definition: MetaTool, plugins, and the reference MCP servers."""
    labelled = metatool_docs(data)
    taken = {d.name for d in labelled}
    return [*labelled, *plugin_docs(data, taken), *load_catalogue(REFERENCE)]


def large_catalogue(data: Path, *, at_least: int = 2000) -> list[ToolDoc]:
    """The distinct catalogue plus tagged mirrors of it until there are `at_least` tools."""
    base = distinct_catalogue(data)
    out = list(base)
    for n, region in enumerate(MIRRORS, start=1):
        if len(out) >= at_least:
            break
        out.extend(
            ToolDoc(
                server=f"{d.server}_m{n}",
                name=d.name,
                title=d.title,
                description=f"{d.description} (mirror {n}, {region} region)",
                input_schema=d.input_schema,
            )
            for d in base
        )
    return out


async def _list_tools(command: str, args: list[str]) -> list[dict[str, Any]]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=command, args=args, env=dict(os.environ))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = await session.list_tools()
    tools = []
    for tool in listed.tools:
        wire = tool.model_dump(by_alias=True, exclude_none=True, mode="json")
        entry: dict[str, Any] = {
            "name": wire["name"],
            "description": wire.get("description", ""),
            "inputSchema": wire.get("inputSchema", {"type": "object"}),
        }
        if wire.get("title"):
            entry["title"] = wire["title"]
        tools.append(entry)
    return tools


def _servers(npm_dirs: list[Path]) -> dict[str, tuple[str, list[str]]]:
    found: dict[str, tuple[str, list[str]]] = {}
    for base in npm_dirs:
        bins = base / "node_modules/.bin"
        for server in ("everything", "filesystem", "memory", "sequential-thinking"):
            exe = bins / f"mcp-server-{server}"
            if server not in found and exe.exists():
                args = ["stdio"] if server == "everything" else []
                if server == "filesystem":
                    args = [str(ROOT)]
                found[server] = (str(exe), args)
    time_bin = Path(sys.executable).parent / "mcp-server-time"
    if time_bin.exists():
        found["time"] = (str(time_bin), ["--local-timezone", "UTC"])
    return found


def write_reference(npm_dirs: list[Path]) -> None:
    servers = _servers(npm_dirs)
    if not servers:
        sys.exit("no reference MCP server found (install them with npm, or pass --npm DIR)")
    catalogue: dict[str, list[dict[str, Any]]] = {}
    for name, (command, args) in sorted(servers.items()):
        catalogue[name] = asyncio.run(_list_tools(command, args))
        print(f"{name}: {len(catalogue[name])} tools")
    DATA_DIR.mkdir(exist_ok=True)
    REFERENCE.write_text(json.dumps(catalogue, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {REFERENCE}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ref = sub.add_parser("reference")
    ref.add_argument("--npm", type=Path, action="append", default=[ROOT / ".cache/npm"])
    build = sub.add_parser("build")
    build.add_argument("--data", type=Path, default=DEFAULT_DATA)
    build.add_argument("--out", type=Path, required=True)
    build.add_argument("--at-least", type=int, default=2000)
    args = parser.parse_args()
    if args.command == "reference":
        write_reference(args.npm)
        return
    docs = large_catalogue(require(args.data), at_least=args.at_least)
    args.out.write_text(json.dumps(dump_catalogue(docs), ensure_ascii=False) + "\n")
    print(f"wrote {len(docs)} tools on {len({d.server for d in docs})} servers to {args.out}")


if __name__ == "__main__":
    main()
