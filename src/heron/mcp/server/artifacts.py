"""Large outputs as MCP resources, read page by page through `resources/read`.

A call whose output is too large is spilled to heron's artifact store (`heron.artifacts`): the
call's result shows a preview with a marker, plus a `resource_link` to
`heron-artifact://<id>`. The client reads the whole output without a tool call, page by page:
`heron-artifact://<id>` is lines 1–200, `heron-artifact://<id>?offset=201&limit=200` the next
page; each page's `_meta` says which lines it holds, how many there are, and the next page's URI.
`resources/list` lists the artifacts this server spilled (newest first), and the URI template
`heron-artifact://{id}{?offset,limit}` describes the rest.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import mcp_types as types
from mcp.shared.exceptions import MCPError

from heron.artifacts.store import ArtifactError, ArtifactStore
from heron.turn.extensions import OutputSpill

__all__ = ["SCHEME", "ArtifactResources", "TrackingSpill", "artifact_uri"]

SCHEME = "heron-artifact"
PAGE_LINES = 200
MAX_PAGE_LINES = 2000
_LISTED = 200
_ID_IN_PREVIEW = re.compile(r"\bartifact (art_[0-9a-f]{16})\b")


def artifact_uri(artifact_id: str, *, offset: int = 1, limit: int = PAGE_LINES) -> str:
    if offset == 1 and limit == PAGE_LINES:
        return f"{SCHEME}://{artifact_id}"
    return f"{SCHEME}://{artifact_id}?offset={offset}&limit={limit}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Spilled:
    artifact_id: str
    tool: str
    call_id: str


class TrackingSpill:
    """The engine's `OutputSpill`, remembering which artifacts this server's calls produced."""

    def __init__(self, inner: OutputSpill) -> None:
        self.inner = inner
        self.spilled: OrderedDict[str, Spilled] = OrderedDict()
        self._by_call: dict[str, str] = {}

    def spill(self, tool: str, call_id: str, output: str) -> str | None:
        preview = self.inner.spill(tool, call_id, output)
        if preview is not None and (found := _ID_IN_PREVIEW.search(preview)):
            artifact_id = found.group(1)
            self.spilled[artifact_id] = Spilled(artifact_id=artifact_id, tool=tool, call_id=call_id)
            self.spilled.move_to_end(artifact_id)
            self._by_call[call_id] = artifact_id
            while len(self.spilled) > _LISTED:
                old = self.spilled.popitem(last=False)[1]
                self._by_call.pop(old.call_id, None)
        return preview

    def artifact_of(self, call_id: str) -> str | None:
        """The artifact a call's output was spilled to, if it was."""
        return self._by_call.get(call_id)


class ArtifactResources:
    """`resources/list`, `resources/templates/list` and `resources/read` over artifacts."""

    def __init__(self, store: ArtifactStore, spill: TrackingSpill) -> None:
        self.store = store
        self.spill = spill

    def link(self, artifact_id: str) -> types.ResourceLink | None:
        try:
            info = self.store.info(artifact_id)
        except ArtifactError:
            return None
        return types.ResourceLink(
            uri=artifact_uri(artifact_id),
            name=artifact_id,
            title=f"full output of {info.tool}",
            description=f"{info.lines:,} lines; read page by page with resources/read",
            mime_type="text/plain",
            size=info.size,
        )

    def list(self) -> types.ListResourcesResult:
        found: list[types.Resource] = []
        for spilled in reversed(self.spill.spilled.values()):
            link = self.link(spilled.artifact_id)
            if link is not None:
                found.append(
                    types.Resource(
                        uri=link.uri,
                        name=link.name,
                        title=link.title,
                        description=link.description,
                        mime_type=link.mime_type,
                        size=link.size,
                    )
                )
        return types.ListResourcesResult(resources=found)

    @staticmethod
    def templates() -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=f"{SCHEME}://{{id}}{{?offset,limit}}",
                    name="artifact",
                    title="a stored tool output, by lines",
                    description=(
                        f"Lines offset… (1-based) of an artifact, at most limit lines "
                        f"(default {PAGE_LINES}, at most {MAX_PAGE_LINES})."
                    ),
                    mime_type="text/plain",
                )
            ]
        )

    def read(self, uri: str) -> types.ReadResourceResult:
        artifact_id, offset, limit = _parse(uri)
        try:
            page = self.store.read(artifact_id, offset=offset, limit=limit)
        except ArtifactError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        except ValueError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        info = page.info
        lines = page.lines
        meta: dict[str, Any] = {"heron/total_lines": info.lines, "heron/size": info.size}
        if lines:
            meta["heron/lines"] = f"{lines[0].number}-{lines[-1].number}"
            if lines[-1].number < info.lines:
                meta["heron/next"] = artifact_uri(
                    artifact_id, offset=lines[-1].number + 1, limit=limit
                )
            cut = [line.number for line in lines if line.cut]
            if cut:
                meta["heron/cut_lines"] = cut
        text = "\n".join(line.text for line in lines)
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(uri=uri, mime_type="text/plain", text=text, _meta=meta)
            ]
        )


def _parse(uri: str) -> tuple[str, int, int]:
    parts = urlsplit(uri)
    if parts.scheme != SCHEME or not parts.netloc:
        raise MCPError(code=types.INVALID_PARAMS, message=f"unknown resource {uri!r}")
    query = parse_qs(parts.query)
    try:
        offset = int(query.get("offset", ["1"])[0])
        limit = int(query.get("limit", [str(PAGE_LINES)])[0])
    except ValueError:
        raise MCPError(
            code=types.INVALID_PARAMS, message="offset and limit must be integers"
        ) from None
    if offset < 1 or not 1 <= limit <= MAX_PAGE_LINES:
        raise MCPError(
            code=types.INVALID_PARAMS,
            message=f"offset starts at 1 and limit is 1…{MAX_PAGE_LINES}",
        )
    return parts.netloc, offset, limit
