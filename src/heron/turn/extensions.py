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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args

from heron.errors import ConfigurationError
from heron.tools.definition import Tool, ToolSpec

CheckDecision = Literal["allow", "refuse", "escalate"]
"""A call check's decision; `escalate` hands the decision to the human approval surface."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckRequest:
    """The structured call a `CallCheck` judges: tool, arguments and the tool's spec."""

    call_id: str
    tool: str
    arguments: dict[str, Any]
    spec: ToolSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckVerdict:
    """A call check's verdict and its short reason, which the operator sees (and the model
    too, on a refusal)."""

    decision: CheckDecision
    """`escalate` hands the decision to the human approval surface."""
    reason: str = ""

    def __post_init__(self) -> None:
        # Closed: a check that answers "deny" or "ok" has a bug; it must never read as allow.
        if self.decision not in get_args(CheckDecision):
            known = ", ".join(map(repr, get_args(CheckDecision)))
            raise ConfigurationError(f"unknown check decision {self.decision!r} (known: {known})")


class CallCheck(Protocol):
    """An independent check of a structured call, before approval (see the module docstring)."""

    name: str

    def applies_to(self, spec: ToolSpec) -> bool:
        """Cheap filter: checks run only for the tools they care about."""
        ...

    async def check(self, request: CheckRequest) -> CheckVerdict: ...


class ResultCache(Protocol):
    """Cached outputs of read-only tools; a successful write invalidates what it touches."""

    def get(self, spec: ToolSpec, arguments: dict[str, Any]) -> str | None:
        """A fresh cached output for a read-only call, or None."""
        ...

    def put(self, spec: ToolSpec, arguments: dict[str, Any], output: str) -> None: ...

    def invalidate(self, spec: ToolSpec, arguments: dict[str, Any]) -> None:
        """Called after a successful non-read-only call: drop what it may have changed."""
        ...


class OutputSpill(Protocol):
    """Stores oversize outputs whole; the model sees a preview and a marker instead."""

    def spill(self, tool: str, call_id: str, output: str) -> str | None:
        """Store an oversize output; return the model-visible preview, or None to keep it."""
        ...


class ToolCatalogue(Protocol):
    """Tools that exist but are not loaded (deferred MCP), resolvable by exact name."""

    def names(self) -> list[str]:
        """Every name the catalogue could resolve (for text-protocol parsing)."""
        ...

    def specs(self) -> Sequence[ToolSpec]:
        """The specs of every tool the catalogue could resolve, in a stable order (sent as
        deferred tools to adapters that have a deferred-loading mechanism)."""
        ...

    def resolve(self, name: str) -> Tool | None:
        """The tool for an exact catalogue name, activated for the session, or None when it
        does not exist or policy denies it."""
        ...
