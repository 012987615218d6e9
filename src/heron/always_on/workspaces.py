"""Which workspace a session's files are in, across workers and restarts.

A session's tools write files into the workspace root of the worker that runs it. With a
shared store the session may move to another worker (its worker died, or was paused past its
lease); its files move with it only when the workspaces are one shared mount. So every
workspace root carries an id (`MARKER`, a file written once: the same id seen from two hosts
is one mount), and the store remembers, per session, the workspace it last ran in
(`WorkspaceBindings`). A parked session is pinned to its workspace: while a worker of that
workspace lives, the others leave its events to it (`held_elsewhere`). When a session does
wake in another workspace — its worker died, or a restart with another `--workspace` — the
model is told, as a `system.workspace_lost` event whose data says `workspace_lost`, instead of
finding its files silently gone. `heron
doctor` reads the same bindings to say whether this workspace is shared or pinned to its host
(`describe_workspace`).
"""

from __future__ import annotations

import builtins
import contextlib
import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from heron._support.clock import Clock, timestamp
from heron.always_on.bus.model import BusEvent, EventContent

__all__ = [
    "MARKER",
    "WorkspaceBinding",
    "WorkspaceBindings",
    "bind_session",
    "describe_workspace",
    "lost_event",
    "workspace_id",
]

MARKER = ".heron-workspace"
"""The file in a workspace root that holds its id."""


def workspace_id(root: Path) -> str:
    """The id of the workspace at `root`, from its marker; a new one is written (once, even
    when two workers start on one mount together: the first rename wins) when it has none."""
    marker = root / MARKER
    try:
        return marker.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        pass
    fd, staged = tempfile.mkstemp(dir=root, prefix=".heron-workspace-")
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(f"ws-{secrets.token_hex(8)}\n")
    try:
        os.link(staged, marker)  # refuses to replace a marker another worker just wrote
    except FileExistsError:
        pass
    finally:
        with contextlib.suppress(OSError):
            os.unlink(staged)
    return marker.read_text(encoding="ascii").strip()


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkspaceBinding:
    """Where one session's files are."""

    session: str
    workspace: str
    """The workspace's id (`workspace_id`)."""
    host: str
    path: str
    bound_at: float


class WorkspaceBindings(Protocol):
    """Each session's workspace, in the store the workers share. Synchronous; a back-end
    failure raises `heron.errors.StoreError`."""

    def bind(self, binding: WorkspaceBinding) -> WorkspaceBinding | None:
        """Record that the session now runs in `binding`'s workspace; returns the binding it
        replaces when that was another workspace (`None`: the same one, or a new session)."""
        ...

    def list(self) -> builtins.list[WorkspaceBinding]:
        """Every session's binding, by session name."""
        ...

    def held_elsewhere(self, session: str, workspace: str, *, now: float) -> bool:
        """Whether `session` last ran in a workspace other than `workspace` that a live worker
        still holds (a session of it has an unexpired lease at `now`): that worker should wake
        it, where its files are."""
        ...


def lost_event(previous: WorkspaceBinding, current: WorkspaceBinding, *, when: str) -> BusEvent:
    """What the model is told when its session wakes in another workspace (stored once per
    move: the idempotency key)."""
    text = (
        f"workspace_lost: this session now runs on {current.host} in {current.path}; the files "
        f"its tools wrote before are in another workspace ({previous.host}: {previous.path}) "
        "that this worker cannot reach. Do not assume they exist here: check, and recreate "
        "what you need."
    )
    return BusEvent(
        kind="system.workspace_lost",
        source="system",
        channel="system",
        session=current.session,
        timestamp=when,
        content=EventContent(
            text=text,
            data={
                "reason": "workspace_lost",
                "previous": {"host": previous.host, "path": previous.path},
                "current": {"host": current.host, "path": current.path},
            },
        ),
        idempotency_key=f"workspace.lost:{previous.workspace}:{current.workspace}:{previous.bound_at}",
    )


def bind_session(
    bindings: WorkspaceBindings,
    session: str,
    *,
    root: Path,
    workspace: str,
    host: str,
    clock: Clock,
) -> BusEvent | None:
    """Bind a waking session to the workspace at `root` (its `workspace_id`): the
    `workspace_lost` event to publish when it last ran in another one, else `None`."""
    here = WorkspaceBinding(
        session=session,
        workspace=workspace,
        host=host,
        path=str(root),
        bound_at=clock.time(),
    )
    previous = bindings.bind(here)
    return None if previous is None else lost_event(previous, here, when=timestamp(clock))


def describe_workspace(
    root: Path, bindings: builtins.list[WorkspaceBinding], *, host: str
) -> tuple[bool, str]:
    """For `heron doctor`: whether the workspace at `root` is one other hosts share (`True`),
    and a line saying so — or that it is pinned to this host, so a session that moves to
    another host is told `workspace_lost`."""
    ours = workspace_id(root)
    same = sorted({b.host for b in bindings if b.workspace == ours and b.host != host})
    other = sorted({b.host for b in bindings if b.workspace != ours and b.host != host})
    if same:
        return True, f"{root} ({ours}) is shared with {', '.join(same)}"
    if other:
        return False, (
            f"{root} ({ours}) is pinned to {host}: {', '.join(other)} use other workspaces, so a "
            "session that moves between hosts is told workspace_lost (share one mount to keep "
            "its files)"
        )
    return True, f"{root} ({ours}); no other host has run a session yet"
