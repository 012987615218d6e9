"""`run_python`: scripts in the sandbox that call the agent's tools through the lifecycle."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import pytest

from heron import Agent, ScriptedModel, ToolContext, ToolResult, tool
from heron.messages import ToolResultMessage
from heron.sandbox import BwrapSandbox, ProcessSandbox, ResourceLimits, Sandbox
from heron.tools.definition import Tool
from heron.toolsets.python_exec import run_python_tool
from heron.turn.approval import ApprovalAnswer, ApprovalRequest
from heron.turn.events import ToolCallEvent, ToolResultEvent
from support.engine import Events, call, calls_turn

# No process-count limit (no per-run cgroup); tests/unit/test_sandbox.py covers that limit.
FAST = ResourceLimits(kill_grace_s=0.3, max_processes=None)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "notes").mkdir(parents=True)
    for n in range(3):
        (ws / "notes" / f"n{n}.md").write_text(f"note {n}\n" + "filler line\n" * 40)
    return ws


def note_tools(workspace: Path) -> list[Tool]:
    @tool(read_only=True)
    def read_note(name: str) -> str:
        """Read one note.

        Args:
            name: The note's file name.
        """
        return (workspace / "notes" / name).read_text()

    @tool(destructive=True, requires_approval=True)
    def wipe_notes() -> str:
        """Delete every note."""
        for path in (workspace / "notes").iterdir():
            path.unlink()
        return "wiped"

    return [read_note, wipe_notes]


def make_tool(sandbox: Sandbox, workspace: Path, **kw: Any) -> Tool:
    return run_python_tool(
        sandbox=sandbox, workspace=workspace, tool_names=["read_note", "wipe_notes"], **kw
    )


async def run_direct(tool_: Tool, **arguments: Any) -> ToolResult:
    return await tool_.execute(tool_.validate(arguments), ToolContext(call_id="p1", turn_id="t1"))


class ApproveOnly:
    """Approves exactly the listed tools; denies the rest."""

    def __init__(self, *tools: str) -> None:
        self.tools = tools

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        decision = "yes" if request.tool in self.tools else "no"
        return ApprovalAnswer(decision=decision, decided_by="operator:test")


SCRIPT = """
lengths = {}
for name in ["n0.md", "n1.md", "n2.md"]:
    text = read_note(name=name)
    lengths[name] = len(text.splitlines())
print("lines per note:", lengths)
try:
    tools.wipe_notes()
except ToolError as refusal:
    print("wipe refused:", refusal)
"""


async def test_a_script_calls_an_allowed_tool_and_gets_a_forbidden_ones_refusal(
    workspace: Path, events: Events
) -> None:
    runner = make_tool(ProcessSandbox(limits=FAST), workspace)
    model = ScriptedModel([calls_turn(call("run_python", "p1", code=SCRIPT)), {"text": "done"}])
    agent = Agent(
        model=model,
        tools=[runner, *note_tools(workspace)],
        approver=ApproveOnly("run_python"),
        workspace=workspace,
    )
    result = await agent.run("summarise my notes", sink=events)
    [message] = [m for m in result.history if isinstance(m, ToolResultMessage)]
    assert "lines per note: {'n0.md': 41, 'n1.md': 41, 'n2.md': 41}" in message.content
    assert "wipe refused: Denied by the operator: 'wipe_notes' was not run." in message.content
    assert "filler line" not in message.content  # intermediate data stayed in the script
    assert len(list((workspace / "notes").iterdir())) == 3
    nested = [e.name for e in events.all if isinstance(e, ToolCallEvent) and e.id != "p1"]
    assert nested == ["read_note", "read_note", "read_note", "wipe_notes"]
    events.assert_one_pair_per_call()


async def test_an_unhandled_refusal_fails_the_script_with_a_traceback_of_its_own_lines(
    workspace: Path, events: Events
) -> None:
    runner = make_tool(ProcessSandbox(limits=FAST), workspace)
    code = "print('before')\nwipe_notes()\nprint('after')"
    model = ScriptedModel([calls_turn(call("run_python", "p1", code=code)), {"text": "ok"}])
    agent = Agent(
        model=model,
        tools=[runner, *note_tools(workspace)],
        allowed_tools=["run_python", "read_note"],
        autonomy="full",
        workspace=workspace,
    )
    await agent.run("go", sink=events)
    [outcome] = [e for e in events.all if isinstance(e, ToolResultEvent) and e.id == "p1"]
    assert not outcome.success
    assert "before" in outcome.output and "after" not in outcome.output
    assert 'File "<run_python>", line 2, in <module>' in outcome.output
    assert "ToolError: Unknown tool: 'wipe_notes'" in outcome.output
    assert '"<string>"' not in outcome.output  # heron's bootstrap frames are hidden


async def test_outside_a_turn_plain_python_runs_and_tool_calls_are_refused(
    workspace: Path,
) -> None:
    runner = make_tool(ProcessSandbox(limits=FAST), workspace)
    result = await run_direct(runner, code="print(sum(range(10)))")
    assert result.success and result.output.endswith("--- stdout ---\n45")
    refused = await run_direct(
        runner, code="try:\n    read_note(name='n0.md')\nexcept ToolError as e:\n    print(e)"
    )
    assert "tool calls need a running agent turn" in refused.output


async def test_run_python_cannot_call_itself(workspace: Path, events: Events) -> None:
    runner = make_tool(ProcessSandbox(limits=FAST), workspace)
    code = "try:\n    tools.run_python(code='1')\nexcept ToolError as e:\n    print(e)"
    model = ScriptedModel([calls_turn(call("run_python", "p1", code=code)), {"text": "ok"}])
    agent = Agent(model=model, tools=[runner], autonomy="full", workspace=workspace)
    result = await agent.run("go", sink=events)
    [message] = [m for m in result.history if isinstance(m, ToolResultMessage)]
    assert "run_python cannot call itself" in message.content


async def test_a_script_that_never_ends_times_out(workspace: Path) -> None:
    runner = make_tool(ProcessSandbox(limits=FAST), workspace)
    result = await run_direct(runner, code="print('started')\nwhile True:\n    pass", timeout_s=0.5)
    assert not result.success
    assert result.error is not None and result.error.startswith("timed out after 0.5 s")
    assert "started" in result.output  # unbuffered output survives the kill


async def test_oversize_and_binary_output_are_handled_like_shell(workspace: Path) -> None:
    runner = make_tool(ProcessSandbox(limits=FAST), workspace)
    big = await run_direct(runner, code="for i in range(3000):\n    print(i)")
    assert "[… 2,900 lines" in big.output
    saved = workspace / big.data["stdout"]["saved_to"]
    assert saved.read_text() == "".join(f"{i}\n" for i in range(3000))
    binary = await run_direct(runner, code="import sys\nsys.stdout.buffer.write(bytes(range(256)))")
    assert "[binary output: 256 bytes" in binary.output
    assert (workspace / binary.data["stdout"]["saved_to"]).read_bytes() == bytes(range(256))


async def test_numpy_is_usable_when_installed(workspace: Path) -> None:
    if importlib.util.find_spec("numpy") is None:
        pytest.skip("numpy is not installed")
    runner = make_tool(ProcessSandbox(limits=FAST), workspace)
    assert "numpy" in runner.spec.description
    result = await run_direct(runner, code="import numpy as np\nprint(np.arange(5).sum())")
    assert result.success and result.output.endswith("\n10")


async def test_tool_calls_work_from_inside_the_bwrap_sandbox(
    workspace: Path, events: Events
) -> None:
    if shutil.which("bwrap") is None:
        pytest.fail(
            "bubblewrap (`bwrap`) is required for this test; install the bubblewrap package"
        )
    runner = make_tool(BwrapSandbox(workspace=workspace, limits=FAST), workspace)
    code = (
        "import os\nprint(read_note(name='n1.md').splitlines()[0])\n"
        "print(len([p for p in os.listdir('/proc') if p.isdigit()]) < 10)"
    )
    model = ScriptedModel([calls_turn(call("run_python", "p1", code=code)), {"text": "ok"}])
    agent = Agent(
        model=model, tools=[runner, *note_tools(workspace)], autonomy="full", workspace=workspace
    )
    result = await agent.run("go", sink=events)
    [message] = [m for m in result.history if isinstance(m, ToolResultMessage)]
    assert message.content.endswith("--- stdout ---\nnote 1\nTrue"), message.content


async def test_the_description_and_the_status_line_state_the_sandbox_and_network(
    workspace: Path,
) -> None:
    runner = make_tool(ProcessSandbox(limits=FAST), workspace)
    assert "sandbox: process, network host" in runner.spec.description
    result = await run_direct(runner, code="print('hi')")
    assert result.output.splitlines()[0].endswith("[sandbox process, network host]")
