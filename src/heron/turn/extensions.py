"""Extension points of the lifecycle, each owned by one step:

- `CallCheck` (preparation): an independent check of the structured call — a sidecar
  classifier or a proposer–reviewer model — that may refuse the call or hand it to a human.
  It sees only `{tool, arguments}` and the tool's annotations, never the model's free text.
- `ResultCache` (execution): cached results for read-only tools, invalidated by writes.
- `OutputSpill` (result recording): large outputs stored whole elsewhere; the model sees a
  preview with a marker naming where the rest is.
- `ToolCatalogue` (preparation): tools that exist but are not loaded (deferred MCP). A call to
  an exact catalogue name the model never activated is resolved here instead of failing as
  unknown — the "never unreachable" rule — when policy allows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from heron.tools.definition import Tool, ToolSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckRequest:
    call_id: str
    tool: str
    arguments: dict[str, Any]
    spec: ToolSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckVerdict:
    decision: Literal["allow", "refuse", "escalate"]
    """`escalate` hands the decision to the human approval surface."""
    reason: str = ""


class CallCheck(Protocol):
    name: str

    def applies_to(self, spec: ToolSpec) -> bool:
        """Cheap filter: checks run only for the tools they care about."""
        ...

    async def check(self, request: CheckRequest) -> CheckVerdict: ...


class ResultCache(Protocol):
    def get(self, spec: ToolSpec, arguments: dict[str, Any]) -> str | None:
        """A fresh cached output for a read-only call, or None."""
        ...

    def put(self, spec: ToolSpec, arguments: dict[str, Any], output: str) -> None: ...

    def invalidate(self, spec: ToolSpec, arguments: dict[str, Any]) -> None:
        """Called after a successful non-read-only call: drop what it may have changed."""
        ...


class OutputSpill(Protocol):
    def spill(self, tool: str, call_id: str, output: str) -> str | None:
        """Store an oversize output; return the model-visible preview, or None to keep it."""
        ...


class ToolCatalogue(Protocol):
    def names(self) -> list[str]:
        """Every name the catalogue could resolve (for text-protocol parsing)."""
        ...

    def resolve(self, name: str) -> Tool | None:
        """The tool for an exact catalogue name, activated for the session, or None when it
        does not exist or policy denies it."""
        ...
