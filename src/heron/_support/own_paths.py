"""heron's own paths in this process: what no tool may reach, and what no tool may change alone.

- **State directories** hold the histories, the audit trail and the signing keys of receipts
  and decisions. One can lie inside a workspace: the default (`~/.local/state/heron`) does when
  heron runs in the home directory. Whatever opens one claims it (`claim_state_dir`), and every
  `Workspace` and sandbox of the process keeps tools out of the claimed directories inside its
  root: the file tools refuse them, the sandboxes mount an empty read-only directory over them,
  the command policy counts a write into one as a write outside the workspace.
- **Configuration files** decide what the agent may do when heron next starts: the user and
  project configuration files heron reads (whether they exist yet or not) and the tool modules
  it imports. Writing one is a high-risk call (`config_files_touched`): an operator decides,
  whatever the autonomy, and with no operator it does not run.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

__all__ = [
    "claim_config_file",
    "claim_state_dir",
    "claimed_state_dirs",
    "config_files_touched",
    "state_dirs_inside",
]


class _Claimed:
    """Real paths claimed in this process; readers take `paths` without the lock (the tuple is
    replaced whole)."""

    def __init__(self) -> None:
        self.paths: tuple[str, ...] = ()
        self._lock = threading.Lock()

    def add(self, path: Path) -> None:
        real = os.path.realpath(path)
        if real not in self.paths:
            with self._lock:
                if real not in self.paths:
                    self.paths = (*self.paths, real)


_state = _Claimed()
_config = _Claimed()


def claim_state_dir(state_dir: Path) -> Path:
    """Mark `state_dir` as heron's own for the rest of the process; returns it."""
    _state.add(state_dir)
    return state_dir


def claim_config_file(path: Path) -> None:
    """Mark `path` as a file heron reads its configuration or tools from."""
    _config.add(path)


def claimed_state_dirs() -> tuple[Path, ...]:
    """Every state directory claimed in this process (real paths)."""
    return tuple(map(Path, _state.paths))


def state_dirs_inside(root: Path) -> tuple[Path, ...]:
    """The claimed state directories strictly inside the real path `root` (a workspace that
    lies inside a state directory, as `heron serve`'s job workspace does, hides nothing)."""
    prefix = str(root).rstrip("/") + "/"
    return tuple(Path(d) for d in _state.paths if d.startswith(prefix))


def config_files_touched(path: Path) -> tuple[Path, ...]:
    """The claimed configuration files that `path` is, or holds (a folder)."""
    real = os.path.realpath(path)
    prefix = real.rstrip("/") + "/"
    return tuple(Path(c) for c in _config.paths if c == real or c.startswith(prefix))
