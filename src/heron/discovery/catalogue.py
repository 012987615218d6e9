"""Catalogue files: the batch CLI's input format, loaded into `ToolDoc`s.

The format is one JSON object mapping a server name to that server's `tools/list` result:
either the list of tools itself (`[{name, description, inputSchema}, …]`) or the whole result
object (`{"tools": [...]}`). Optional `title` is kept; other fields are ignored. Problems are
collected and raised together (`CatalogueError.problems`), so a user fixes a file in one go.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from heron._support.folder_files import FileTooLarge, open_regular, read_at_most
from heron._support.limits import InputLimits, InputRejected, parse_json
from heron.discovery.documents import ToolDoc
from heron.errors import HeronError

__all__ = ["CatalogueError", "dump_catalogue", "load_catalogue", "parse_catalogue"]

_MAX_FILE_BYTES = 64 * 1024 * 1024  # a catalogue of many thousand tools is a few MB


class CatalogueError(HeronError, ValueError):
    """A catalogue file that cannot be used; `problems` lists every problem found."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def parse_catalogue(data: Any, *, source: str = "catalogue") -> list[ToolDoc]:
    """`ToolDoc`s from the decoded JSON of a catalogue file."""
    if not isinstance(data, Mapping):
        raise CatalogueError([f"{source}: expected an object mapping server names to tool lists"])
    docs: list[ToolDoc] = []
    problems: list[str] = []
    for server, listing in data.items():
        tools = listing.get("tools") if isinstance(listing, Mapping) else listing
        if not isinstance(tools, list):
            problems.append(f"{source}: server {server!r}: expected a list of tools")
            continue
        seen: set[str] = set()
        for n, tool in enumerate(tools):
            where = f"{source}: server {server!r} tool #{n}"
            if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
                problems.append(f"{where}: a tool needs a string 'name'")
                continue
            name = tool["name"]
            if name in seen:
                problems.append(f"{where}: tool {name!r} is listed twice")
                continue
            seen.add(name)
            schema = tool.get("inputSchema", {})
            if not isinstance(schema, Mapping):
                problems.append(f"{where} ({name}): 'inputSchema' must be an object")
                continue
            title = tool.get("title")
            docs.append(
                ToolDoc(
                    server=str(server),
                    name=name,
                    description=str(tool.get("description") or ""),
                    title=title if isinstance(title, str) else None,
                    input_schema=dict(schema),
                )
            )
    if problems:
        raise CatalogueError(problems)
    return docs


def load_catalogue(path: Path) -> list[ToolDoc]:
    """`ToolDoc`s from a catalogue file."""
    try:
        with open_regular(path, follow=True) as (fh, size):
            raw = read_at_most(fh, size, _MAX_FILE_BYTES)
        data = parse_json(raw, limits=InputLimits(max_bytes=_MAX_FILE_BYTES))
    except InputRejected as exc:  # nesting, size, not JSON
        raise CatalogueError([exc.problem_at(str(path))]) from exc
    except FileTooLarge as exc:
        raise CatalogueError([f"{path}: larger than {_MAX_FILE_BYTES:,} bytes"]) from exc
    except OSError as exc:  # missing, or a FIFO or device (`FileRefused`)
        raise CatalogueError([f"{path}: {exc}"]) from exc
    return parse_catalogue(data, source=str(path))


def dump_catalogue(docs: list[ToolDoc]) -> dict[str, list[dict[str, Any]]]:
    """The catalogue-file form of `docs` (servers in first-seen order)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        out.setdefault(doc.server, []).append(doc.definition())
    return out
