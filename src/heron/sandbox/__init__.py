"""Sandboxes for commands heron does not trust: the `Sandbox` protocol and its two levels.

`process` (limits, timeouts that kill the whole tree, and the kernel's own confinement: a
mount namespace, a dedicated unprivileged user, Landlock) and `bwrap` (bubblewrap namespaces:
read-only system, writable workspace only, private /tmp, own PID tree, no network by
default). `heron.sandbox.containment` reports what a sandbox contains and how;
`heron.sandbox.escape` is the catalogue of escape attempts that checks the report. A
virtualenv is not a sandbox; a microVM back end plugs in through the `Sandbox` protocol. See
`heron.sandbox.base` for the contract.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from heron._support.lazy import lazy_getattr
from heron.sandbox.base import (
    NETWORK_MODES,
    NetworkMode,
    ResourceLimits,
    RunResult,
    Sandbox,
    SandboxError,
    SandboxLevel,
    SandboxUnavailable,
)

if TYPE_CHECKING:
    from heron.sandbox.bwrap import BwrapSandbox
    from heron.sandbox.process import PidsLimit, ProcessSandbox

# The back ends are imported on first use: the configuration imports `heron.sandbox.base`,
# and `heron serve` reads its configuration before it listens (docs/performance.md).
_EXPORTS = {
    "BwrapSandbox": "heron.sandbox.bwrap",
    "PidsLimit": "heron.sandbox.process",
    "ProcessSandbox": "heron.sandbox.process",
}
__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())

__all__ = [
    "NETWORK_MODES",
    "BwrapSandbox",
    "NetworkMode",
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
    network: NetworkMode | bool | None = None,
    spares: bool = False,
) -> Sandbox:
    """Build the sandbox an agent's configuration asks for.

    `network` is a `NetworkMode`, or the deployment's on/off switch for network access: `None`
    and `True` take the level's default (`host` for `process`, `none` for `bwrap`: a
    namespace sandbox gets the network only when a tool set asks for it explicitly); `False`
    asks for `none`, which `process` refuses with `SandboxUnavailable` (a deployment without
    network runs its commands at the `bwrap` level; an explicit `"none"` gives a `process`
    sandbox its own network namespace where the kernel allows it). heron never pretends to
    isolate what it cannot. `spares`: a `bwrap` sandbox builds each call's sandbox ahead
    (`heron.sandbox.spare`; the caller `aclose()`s it); the `process` level has nothing to
    build ahead.
    """
    from heron.sandbox.bwrap import BwrapSandbox
    from heron.sandbox.process import ProcessSandbox

    if level == "bwrap":
        mode: NetworkMode = "none" if network in (None, True, False) else network  # type: ignore[assignment]
        return BwrapSandbox(workspace=workspace, limits=limits, network=mode, spares=spares)
    if network is False:
        raise SandboxUnavailable(
            "the `process` sandbox level cannot block the network for a deployment without "
            "network; use the `bwrap` level"
        )
    mode = "host" if network in (None, True) else network  # type: ignore[assignment]
    return ProcessSandbox(workspace=workspace, limits=limits, network=mode)
