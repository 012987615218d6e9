"""The state directories heron uses in this process, which no tool may reach.

A state directory holds the histories, the audit trail and the signing keys of receipts and
decisions. It can lie inside a workspace: the default (`~/.local/state/heron`) does when heron
runs in the home directory. Whatever opens one claims it here (`claim_state_dir`), and every
`Workspace` and sandbox of the process keeps tools out of the claimed directories inside its
root: the file tools refuse them, the sandboxes mount an empty read-only directory over them,
the command policy counts a write into one as a write outside the workspace.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

__all__ = ["claim_state_dir", "claimed_state_dirs", "state_dirs_inside"]

_claimed: tuple[str, ...] = ()
_lock = threading.Lock()


def claim_state_dir(state_dir: Path) -> Path:
    """Mark `state_dir` as heron's own for the rest of the process; returns it."""
    global _claimed
    real = os.path.realpath(state_dir)
    if real not in _claimed:
        with _lock:
            if real not in _claimed:
                _claimed = (*_claimed, real)
    return state_dir


def claimed_state_dirs() -> tuple[Path, ...]:
    """Every state directory claimed in this process (real paths)."""
    return tuple(map(Path, _claimed))


def state_dirs_inside(root: Path) -> tuple[Path, ...]:
    """The claimed state directories strictly inside the real path `root` (a workspace that
    lies inside a state directory, as `heron serve`'s job workspace does, hides nothing)."""
    prefix = str(root).rstrip("/") + "/"
    return tuple(Path(d) for d in _claimed if d.startswith(prefix))
