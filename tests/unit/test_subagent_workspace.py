"""A child gets its parent's workspace read-only unless the spawn grants write access — at the
tools' own boundary: the file tools refuse with a structured error, bubblewrap mounts the
workspace read-only for the child's commands, and a sandbox level that cannot do that refuses
to run them. Real file tools, real bwrap, real sub-agent runs; only the model is scripted."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_shell_tool import history, workspace
from test_subagent_grant import Family, subs

from heron.agent import Agent
from heron.always_on.subagents.service import Subagents
from heron.models.scripted import FunctionModel
from heron.safety.command_policy import CommandPolicy
from heron.safety.workspace import Workspace
from heron.sandbox import BwrapSandbox, ProcessSandbox, ResourceLimits, Sandbox
from heron.tools.definition import ToolContext
from heron.toolsets.files import file_tools
from heron.toolsets.shell import ShellHistory, shell_tool
from heron.turn.approval import ApprovalAnswer, ApprovalManager, ApprovalPolicy, ApprovalRequest

FAST = ResourceLimits(kill_grace_s=0.3, max_processes=None)
__all__ = ["history", "subs", "workspace"]  # the fixtures shared with the shell and grant tests


def bwrap(workspace: Path) -> BwrapSandbox:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap (`bwrap`) is required for this test; install bubblewrap")
    return BwrapSandbox(workspace=workspace, limits=FAST)


class Yes:
    """The operator at the parent's front end: approves every call (a child's included)."""

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer | None:
        return ApprovalAnswer(decision="yes", decided_by="operator:test")


def parent(
    family: Family, subs: Subagents, workspace: Path, history: ShellHistory, sandbox: Sandbox
) -> Agent:
    shell = shell_tool(
        sandbox=sandbox,
        policy=CommandPolicy(workspace=workspace),
        workspace=workspace,
        history=history,
    )
    return Agent(
        model=FunctionModel(family),
        tools=[*file_tools(Workspace(workspace)), shell, *subs.tools("default")],
        approval=ApprovalManager(policy=ApprovalPolicy(), approver=Yes()),
        workspace=workspace,
    )


WRITES = [
    ("write_file", {"path": "notes.txt", "content": "changed\n"}),
    ("shell", {"command": "echo changed > notes.txt"}),
    ("shell", {"command": "cat notes.txt"}),
]


async def test_a_read_only_child_cannot_write_by_file_tool_or_by_a_bwrap_command(
    subs: Subagents, workspace: Path, history: ShellHistory
) -> None:
    family = Family({}, WRITES)
    agent = parent(family, subs, workspace, history, bwrap(workspace))
    assert (await agent.run("go")).ok
    written, echoed, shown = family.read
    assert written.is_error and "the workspace is read-only for this agent" in written.content
    assert echoed.is_error and "Read-only file system" in echoed.content
    assert not shown.is_error and "keep me" in shown.content  # reading still works
    assert (workspace / "notes.txt").read_text() == "keep me\n"
    assert {"write_file", "shell", "delete_path"} <= set(family.offered)


async def test_a_child_spawned_with_write_access_writes_by_both(
    subs: Subagents, workspace: Path, history: ShellHistory
) -> None:
    steps = [
        ("write_file", {"path": "made.txt", "content": "by the file tool\n"}),
        ("shell", {"command": "echo by the shell > notes.txt"}),
    ]
    family = Family({"write": True}, steps)
    agent = parent(family, subs, workspace, history, bwrap(workspace))
    assert (await agent.run("go")).ok
    assert not any(m.is_error for m in family.read), family.read
    assert (workspace / "made.txt").read_text() == "by the file tool\n"
    assert (workspace / "notes.txt").read_text() == "by the shell\n"


async def test_a_sandbox_that_cannot_mount_the_workspace_read_only_refuses_the_command(
    subs: Subagents, workspace: Path, history: ShellHistory
) -> None:
    family = Family({}, [("shell", {"command": "echo changed > notes.txt"})])
    process = ProcessSandbox(limits=FAST).with_network("none")
    agent = parent(family, subs, workspace, history, process)
    assert (await agent.run("go")).ok
    (refused,) = family.read
    assert refused.is_error and "cannot mount it read-only" in refused.content
    assert (workspace / "notes.txt").read_text() == "keep me\n"
    (entry,) = history.recent(limit=5)
    assert entry.outcome == "refused"


async def test_a_read_only_child_gets_no_shell_that_reaches_the_hosts_network(
    subs: Subagents, workspace: Path, history: ShellHistory
) -> None:
    # A command with the host's network can change the world outside the workspace.
    family = Family({}, [])
    host = bwrap(workspace).with_network("host")
    assert (await parent(family, subs, workspace, history, host).run("go")).ok
    assert "shell" not in family.offered and "write_file" in family.offered


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("write_file", {"path": "notes.txt", "content": "x"}),
        ("edit_file", {"path": "notes.txt", "old_string": "keep", "new_string": "lose"}),
        ("move_path", {"src": "notes.txt", "dst": "moved.txt"}),
        ("copy_path", {"src": "notes.txt", "dst": "copied.txt"}),
        ("delete_path", {"path": "notes.txt"}),
    ],
)
async def test_every_file_tool_that_writes_refuses_in_a_read_only_run(
    workspace: Path, name: str, arguments: dict[str, Any]
) -> None:
    (found,) = [t for t in file_tools(Workspace(workspace)) if t.spec.name == name]
    assert found.spec.annotations.workspace_only
    ctx = ToolContext(call_id="c1", turn_id="t1", workspace_read_only=True)
    result = await found.execute(found.validate(arguments), ctx)
    assert not result.success and result.data["error"] == "read_only_workspace"
    assert os.listdir(workspace) == ["notes.txt"]
    assert (workspace / "notes.txt").read_text() == "keep me\n"


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
async def test_run_python_sees_the_workspace_as_the_run_may_use_it(
    workspace: Path, read_only: bool
) -> None:
    from heron.toolsets.python_exec import run_python_tool

    tool = run_python_tool(sandbox=bwrap(workspace), workspace=workspace)
    code = "from pathlib import Path\nPath('notes.txt').write_text('changed')\nprint('wrote')"
    ctx = ToolContext(call_id="c1", turn_id="t1", workspace_read_only=read_only)
    result = await tool.execute(tool.validate({"code": code}), ctx)
    if read_only:
        assert not result.success and "Read-only file system" in result.output
        assert (workspace / "notes.txt").read_text() == "keep me\n"
    else:
        assert result.success, result.output
        assert (workspace / "notes.txt").read_text() == "changed"
