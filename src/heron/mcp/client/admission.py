"""Admission: may a started MCP server be used, and is it pinned now?

The decision is pure: the manager gathers the facts — the server's pin, the identity it
resolves to, the definitions it lists and the scan findings — and acts on the verdict. A server
is used when it matches its pin; pinned on first use when the approval mode allows it and
nothing in its descriptions looks like prompt injection; refused otherwise, with a reason that
names what changed and the command that clears the refusal. A running server whose
definitions change is refused from then on (`drift`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from heron.mcp.client.errors import ServerRefused
from heron.mcp.config import ApprovalMode, McpServerConfig
from heron.mcp.trust import (
    Finding,
    PinCheck,
    ServerIdentity,
    ServerPin,
    ToolDefinition,
    compare_pin,
    definitions_digest,
    launch_identity,
    scan_definitions,
)

__all__ = [
    "Admission",
    "admit",
    "drift",
    "live_identity",
    "pinned_listing",
    "server_findings",
]

Verdict = Literal["use", "pin", "refuse"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Admission:
    """The verdict on one server, with what it was based on."""

    server: str
    verdict: Verdict
    """`use`: it matches its pin; `pin`: use it and pin it now (first use); `refuse`: do not."""
    check: PinCheck
    """The comparison of the live server with its pin."""
    findings: tuple[Finding, ...] = ()
    reason: str = ""
    """Why it is refused, ending with the command that clears the refusal (empty otherwise)."""

    def refusal(self) -> ServerRefused:
        """The exception for a refused server."""
        assert self.verdict == "refuse"
        return ServerRefused(self.server, self.reason, check=self.check, findings=self.findings)


def live_identity(config: McpServerConfig, server_version: str) -> ServerIdentity:
    """The identity of a started server: its launch identity plus the version it reports."""
    base = launch_identity(config)
    return ServerIdentity(
        launch=base.launch, package_version=base.package_version, server_version=server_version
    )


def pinned_listing(
    pin: ServerPin | None, config: McpServerConfig
) -> tuple[ToolDefinition, ...] | None:
    """The definitions a pinned server can be listed by without starting it: those of its pin,
    when it is still launched the same way (same command and package version). None otherwise."""
    if pin is None:
        return None
    base = launch_identity(config)
    if (pin.identity.launch, pin.identity.package_version) != (
        base.launch,
        base.package_version,
    ):
        return None
    return pin.definitions


def server_findings(
    server: str,
    definitions: Sequence[ToolDefinition],
    others: Iterable[ToolDefinition] = (),
    *,
    builtin_names: Collection[str] = (),
) -> tuple[Finding, ...]:
    """The scan findings about `server`'s definitions, scanned together with `others` (the
    definitions of the other running servers) so that naming their tools, or shadowing them,
    counts against this one."""
    return tuple(
        f
        for f in scan_definitions([*definitions, *others], builtin_names=builtin_names)
        if f.server == server
    )


def admit(
    server: str,
    *,
    pin: ServerPin | None,
    identity: ServerIdentity,
    definitions: Sequence[ToolDefinition],
    findings: Sequence[Finding],
    approval: ApprovalMode,
) -> Admission:
    """Decide whether a freshly started server is used, pinned now or refused."""
    check = compare_pin(pin, identity, definitions)
    found = tuple(findings)

    def refuse(reason: str) -> Admission:
        return Admission(
            server=server, verdict="refuse", check=check, findings=found, reason=reason
        )

    approve = f"heron mcp approve {server}"
    if check.status == "match":
        return Admission(server=server, verdict="use", check=check, findings=found)
    if check.status == "changed":
        return refuse(
            f"it changed since it was approved ({'; '.join(check.changes)}). "
            f"Review the diff and re-approve with `{approve}`"
        )
    if approval == "explicit":
        return refuse(f"it has not been approved yet; run `{approve}`")
    high = [f for f in found if f.severity == "high"]
    if high:
        return refuse(
            "its tool descriptions look like prompt injection ("
            + "; ".join(f"{f.tool}: {f.message}" for f in high)
            + f"); inspect it and approve explicitly with `{approve}`"
        )
    return Admission(server=server, verdict="pin", check=check, findings=found)


def drift(
    server: str, *, admitted: Sequence[ToolDefinition], live: Sequence[ToolDefinition]
) -> Admission:
    """Re-check a running server: refused when its definitions differ from those it was
    admitted with (the diff is against that listing, not the stored pin)."""
    admitted_digest = definitions_digest(admitted)
    if definitions_digest(live) == admitted_digest:
        return Admission(server=server, verdict="use", check=PinCheck(status="match"))
    # The same process on both sides: only the definitions can differ.
    identity = ServerIdentity(launch=f"running {server}")
    as_admitted = ServerPin(
        server=server,
        identity=identity,
        digest=admitted_digest,
        definitions=tuple(admitted),
        approved_at=0.0,
    )
    check = compare_pin(as_admitted, identity, live)
    return Admission(
        server=server,
        verdict="refuse",
        check=check,
        reason=(
            f"its tool definitions changed while it was running ({'; '.join(check.changes)}); "
            f"re-approve with `heron mcp approve {server}`"
        ),
    )
