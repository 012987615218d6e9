"""`WorkspaceBindings`: each session's workspace, bound once per workspace; a bind into another
workspace hands back the one it replaces (what the model is told it lost), whichever store
object (worker) binds."""

from __future__ import annotations

from heron.always_on.workspaces import WorkspaceBinding
from support.stores import StoreBackend


def binding(session: str, workspace: str, host: str, at: float) -> WorkspaceBinding:
    return WorkspaceBinding(
        session=session, workspace=workspace, host=host, path=f"/srv/{host}", bound_at=at
    )


def test_a_move_to_another_workspace_returns_the_one_it_replaces(backend: StoreBackend) -> None:
    first, second = backend.workspace_bindings(), backend.workspace_bindings()
    assert first.bind(binding("ops", "ws-a", "a", 1.0)) is None  # new: nothing lost
    assert second.bind(binding("ops", "ws-a", "b", 2.0)) is None  # one shared mount
    assert second.bind(binding("ops", "ws-b", "b", 3.0)) == binding("ops", "ws-a", "a", 1.0)
    assert first.bind(binding("ops", "ws-b", "a", 4.0)) is None
    assert first.bind(binding("ci", "ws-a", "a", 5.0)) is None
    assert second.list() == [binding("ci", "ws-a", "a", 5.0), binding("ops", "ws-b", "b", 3.0)]
