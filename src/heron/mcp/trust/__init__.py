"""Trust in MCP servers: pins, description scanning, shadowing and capability labels.

A server's tool descriptions are untrusted input: they go straight into the model's context.
heron therefore

- **pins** each server at its first approval (`pins`, kept by a `TrustStore`; SQLite in
  `sqlite_store`): how it is launched and which package version that resolves to, the version
  the server reports, and the sha256 of its canonical tool definitions. A later start whose
  version or definitions differ is refused until an operator re-approves it, and the refusal
  carries a readable diff;
- **scans** descriptions for injected instructions and **detects shadowing** between servers
  (`scan`);
- **labels capabilities** (reads private data, ingests untrusted content, sends data out) and
  flags the *lethal trifecta* when one tool set has all three (`capabilities`).

What admits a server at start-up from these pieces is `heron.mcp.client.admission`.
"""

from __future__ import annotations

from heron.mcp.trust.capabilities import (
    TrifectaReport,
    capability_labels,
    lethal_trifecta,
    spec_capability_labels,
)
from heron.mcp.trust.pins import (
    PinCheck,
    ServerIdentity,
    ServerPin,
    ToolDefinition,
    TrustStore,
    compare_pin,
    definitions_digest,
    diff_definitions,
    launch_identity,
    new_pin,
)
from heron.mcp.trust.scan import (
    Finding,
    FindingKind,
    Severity,
    detect_shadowing,
    scan_definition,
    scan_definitions,
)
from heron.mcp.trust.sqlite_store import SqliteTrustStore

__all__ = [
    "Finding",
    "FindingKind",
    "PinCheck",
    "ServerIdentity",
    "ServerPin",
    "Severity",
    "SqliteTrustStore",
    "ToolDefinition",
    "TrifectaReport",
    "TrustStore",
    "capability_labels",
    "compare_pin",
    "definitions_digest",
    "detect_shadowing",
    "diff_definitions",
    "launch_identity",
    "lethal_trifecta",
    "new_pin",
    "scan_definition",
    "scan_definitions",
    "spec_capability_labels",
]
