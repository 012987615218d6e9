"""Sandboxes for commands heron does not trust: the `Sandbox` protocol and its two levels.

`process` (rlimits, process-count limit, timeouts that kill the whole tree) and `bwrap`
(bubblewrap namespaces on top: read-only system, writable workspace only, private /tmp, own PID
tree, no network). A virtualenv is not a sandbox; a microVM back end plugs in through the
`Sandbox` protocol. See `heron.sandbox.base` for the contract.
"""

from __future__ import annotations

from pathlib import Path

from heron.sandbox.base import (
    ResourceLimits,
    RunResult,
    Sandbox,
    SandboxError,
    SandboxLevel,
    SandboxUnavailable,
)
from heron.sandbox.bwrap import BwrapSandbox
from heron.sandbox.process import PidsLimit, ProcessSandbox

__all__ = [
    "BwrapSandbox",
    "PidsLimit",
    "ProcessSandbox",
    "ResourceLimits",
    "RunResult",
    "Sandbox",
    "SandboxError",
    "SandboxLevel",
    "SandboxUnavailable",
    "make_sandbox",
]


def make_sandbox(
    level: SandboxLevel,
    *,
    workspace: Path,
    limits: ResourceLimits | None = None,
    network: bool | None = None,
) -> Sandbox:
    """Build the sandbox an agent's configuration asks for.

    `network=None` takes the level's default: the host network for `process`, none for
    `bwrap`. Asking `process` for `network=False` raises `SandboxUnavailable`: a plain process
    cannot be cut off the network, and heron does not pretend it can.
    """
    if level == "bwrap":
        return BwrapSandbox(workspace=workspace, limits=limits, network=bool(network))
    if network is False:
        raise SandboxUnavailable(
            "the `process` sandbox level cannot block the network; use the `bwrap` level"
        )
    return ProcessSandbox(limits=limits)
