"""The `shell` tool: policy gate, approval marker, sandboxed run, output shaping, history."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from heron import Agent, ScriptedModel, ToolContext, ToolResult
from heron.messages import ToolResultMessage
from heron.safety.command_policy import CommandPolicy
from heron.sandbox import ProcessSandbox, ResourceLimits
from heron.tools.definition import Tool
from heron.toolsets.shell import AGENT_ENV, ShellHistory, shell_tool
from heron.toolsets.sqlite_shell_history import SqliteShellHistory
from heron.turn.approval import ApprovalAnswer, ApprovalRequest
from support.engine import Events, call, calls_turn


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("keep me\n")
    return ws


@pytest.fixture
def history(tmp_path: Path) -> Iterator[ShellHistory]:
    store = SqliteShellHistory.open(tmp_path / "state")
    yield store
    store.close()


def make_shell(
    workspace: Path, history: ShellHistory, policy: CommandPolicy | None = None, **kw: Any
) -> Tool:
    return shell_tool(
        # No process-count limit (no per-run cgroup); tests/unit/test_sandbox.py covers it.
        sandbox=ProcessSandbox(limits=ResourceLimits(kill_grace_s=0.3, max_processes=None)),
        policy=policy or CommandPolicy(workspace=workspace),
        workspace=workspace,
        history=history,
        **kw,
    )


async def run(shell: Tool, **arguments: Any) -> ToolResult:
    return await shell.execute(shell.validate(arguments), ToolContext(call_id="c1", turn_id="t1"))


async def test_a_low_risk_command_runs_and_reports_exit_code_and_output(
    workspace: Path, history: ShellHistory
) -> None:
    result = await run(make_shell(workspace, history), command="cat notes.txt; pwd")
    assert result.success
    assert result.output.startswith("exit code 0 in ")
    assert f"--- stdout ---\nkeep me\n{workspace}" in result.output
    assert result.data["exit_code"] == 0 and result.data["timed_out"] is False


async def test_the_environment_is_stated_and_echoed_and_no_flag_is_added(
    workspace: Path, history: ShellHistory
) -> None:
    shell = make_shell(workspace, history)
    for key, value in AGENT_ENV.items():
        assert f"{key}={value}" in shell.spec.description
    result = await run(shell, command='env | sort; echo "$0 takes $# arguments"')
    lines = result.output.splitlines()
    for key, value in AGENT_ENV.items():
        assert f"{key}={value}" in lines
        assert result.data["environment"][key] == value
    assert lines[-1].endswith("bash takes 0 arguments")  # `bash -c <command>`, nothing added
    assert result.data["command"] == 'env | sort; echo "$0 takes $# arguments"'


async def test_only_named_variables_pass_through_from_herons_environment(
    workspace: Path, history: ShellHistory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERON_TEST_TOKEN", "s3cret")
    monkeypatch.setenv("HERON_TEST_OTHER", "hidden")
    shell = make_shell(workspace, history, env_passthrough=["HERON_TEST_TOKEN"])
    result = await run(shell, command="echo ${HERON_TEST_TOKEN:-none} ${HERON_TEST_OTHER:-none}")
    assert "s3cret none" in result.output
    assert result.data["environment"]["passed_through"] == ["HERON_TEST_TOKEN"]
    assert "s3cret" not in str(result.data["environment"])


async def test_a_non_zero_exit_fails_the_call_and_keeps_the_output(
    workspace: Path, history: ShellHistory
) -> None:
    result = await run(make_shell(workspace, history), command="echo out; echo err >&2; exit 3")
    assert not result.success
    assert result.error is not None and result.error.startswith("exit code 3 in ")
    assert result.output == "--- stdout ---\nout\n--- stderr ---\nerr"


async def test_a_medium_risk_command_needs_the_runtime_approval_marker(
    workspace: Path, history: ShellHistory
) -> None:
    shell = make_shell(workspace, history)
    refused = await run(shell, command="rm notes.txt")
    assert not refused.success
    assert refused.error is not None and "needs approval" in refused.error
    assert "delete-in-workspace" in refused.error
    assert (workspace / "notes.txt").exists()
    approved = await run(shell, command="rm notes.txt", approved=True)
    assert approved.success
    assert not (workspace / "notes.txt").exists()


async def test_a_high_risk_command_is_refused_even_when_approved(
    workspace: Path, history: ShellHistory, tmp_path: Path
) -> None:
    target = tmp_path / "outside.txt"
    result = await run(
        make_shell(workspace, history), command=f"echo pwned > {target}", approved=True
    )
    assert not result.success
    assert result.error is not None and "refused by the command policy" in result.error
    assert "write-outside-workspace" in result.error and str(target) in result.error
    assert not target.exists()
    assert result.data == {"policy": result.data["policy"], "ran": False}


async def test_a_deployment_that_allows_high_risk_runs_it_once_approved_inside_the_sandbox(
    workspace: Path, history: ShellHistory, tmp_path: Path
) -> None:
    lenient = CommandPolicy(workspace=workspace, allow_high_risk=True)
    shell = make_shell(workspace, history, policy=lenient)
    target = tmp_path / "outside.txt"
    unapproved = await run(shell, command=f"echo ok > {target}")
    assert not unapproved.success and not target.exists()
    assert unapproved.data["ran"] is False
    approved = await run(shell, command=f"echo ok; echo ok > {target}", approved=True)
    # The policy let it run; the sandbox still holds the write outside the workspace.
    assert approved.data["policy"]["risk"] == "high" and approved.data["exit_code"] == 1
    assert "--- stdout ---\nok" in approved.output
    assert not target.exists()


async def test_oversize_output_keeps_head_and_tail_and_saves_the_full_text(
    workspace: Path, history: ShellHistory
) -> None:
    result = await run(make_shell(workspace, history), command="seq 1 5000")
    lines = result.output.splitlines()
    assert lines[1] == "--- stdout ---"
    assert lines[2:52] == [str(n) for n in range(1, 51)]
    assert lines[-50:] == [str(n) for n in range(4951, 5001)]
    marker = lines[52]
    assert marker.startswith("[… 4,900 lines") and "full output saved to" in marker
    saved = workspace / result.data["stdout"]["saved_to"]
    assert str(result.data["stdout"]["saved_to"]) in marker
    assert saved.read_text() == "".join(f"{n}\n" for n in range(1, 5001))
    assert saved.parent == workspace / ".heron" / "outputs"


async def test_a_single_very_long_line_is_cut_by_characters(
    workspace: Path, history: ShellHistory
) -> None:
    result = await run(
        make_shell(workspace, history), command="head -c 30000 /dev/zero | tr '\\0' x"
    )
    assert len(result.output) < 11_000
    assert "characters) omitted" in result.output
    saved = workspace / result.data["stdout"]["saved_to"]
    assert saved.read_text() == "x" * 30000


async def test_binary_output_is_saved_not_shown(workspace: Path, history: ShellHistory) -> None:
    result = await run(
        make_shell(workspace, history), command="printf 'PK\\003\\004\\000\\377\\376'"
    )
    assert result.success
    assert "[binary output: 7 bytes, not shown; saved to" in result.output
    saved = workspace / result.data["stdout"]["saved_to"]
    assert saved.read_bytes() == b"PK\x03\x04\x00\xff\xfe"
    assert result.data["stdout"]["binary"] is True


async def test_a_command_that_never_exits_times_out_and_is_killed(
    workspace: Path, history: ShellHistory
) -> None:
    result = await run(make_shell(workspace, history), command="sleep 300", timeout_s=0.3)
    assert not result.success
    assert result.error is not None and result.error.startswith("timed out after 0.3 s")
    assert result.data["timed_out"] is True


async def test_bad_arguments_fail_fast_and_run_nothing(
    workspace: Path, history: ShellHistory
) -> None:
    shell = make_shell(workspace, history, default_timeout_s=5, max_timeout_s=10)
    too_long = await run(shell, command="touch made.txt", timeout_s=11)
    empty = await run(shell, command="   ")
    assert not too_long.success and "at most 10" in (too_long.error or "")
    assert not empty.success and "empty" in (empty.error or "")
    assert not (workspace / "made.txt").exists()
    assert history.recent() == []


async def test_history_persists_commands_with_outcome_exit_code_and_duration(
    workspace: Path, history: ShellHistory, tmp_path: Path
) -> None:
    shell = make_shell(workspace, history)
    await run(shell, command="true")
    await run(shell, command="exit 4")
    await run(shell, command="rm notes.txt")
    await run(shell, command="sudo true")
    reopened = SqliteShellHistory.open(tmp_path / "state")
    try:
        entries = reopened.recent()
    finally:
        reopened.close()
    assert [(e.command, e.outcome, e.exit_code) for e in entries] == [
        ("sudo true", "refused", None),
        ("rm notes.txt", "needs_approval", None),
        ("exit 4", "ran", 4),
        ("true", "ran", 0),
    ]
    assert entries[2].cwd == str(workspace) and entries[2].duration_s is not None
    assert entries[0].risk == "high" and entries[0].at.tzinfo is not None


class ApproveOnly:
    """An operator who approves exactly the listed tools and denies everything else."""

    def __init__(self, *tools: str) -> None:
        self.tools = tools
        self.asked: list[str] = []

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.asked.append(request.summary)
        decision = "yes" if request.tool in self.tools else "no"
        return ApprovalAnswer(decision=decision, decided_by="operator:test")


async def test_through_the_agent_an_operator_approval_lets_a_medium_command_run(
    workspace: Path, history: ShellHistory, events: Events
) -> None:
    shell = make_shell(workspace, history)
    model = ScriptedModel(
        [
            calls_turn(call("shell", "s1", command="rm notes.txt", approved=True)),
            {"text": "done"},
        ]
    )
    approver = ApproveOnly("shell")
    agent = Agent(model=model, tools=[shell], approver=approver, workspace=workspace)
    result = await agent.run("clean up", sink=events)
    assert approver.asked == ["command: rm notes.txt, approved: false"]  # the model's was dropped
    [message] = [m for m in result.history if isinstance(m, ToolResultMessage)]
    assert message.content.startswith("exit code 0")
    assert not (workspace / "notes.txt").exists()


async def test_through_the_agent_a_denied_command_never_runs(
    workspace: Path, history: ShellHistory, events: Events
) -> None:
    shell = make_shell(workspace, history)
    model = ScriptedModel(
        [calls_turn(call("shell", "s1", command="rm notes.txt")), {"text": "done"}]
    )
    agent = Agent(model=model, tools=[shell], approver=ApproveOnly(), workspace=workspace)
    await agent.run("clean up", sink=events)
    assert (workspace / "notes.txt").exists()
    assert history.recent() == []  # denied before the tool was called


def test_the_description_states_limits_sandbox_and_risk_levels(
    workspace: Path, history: ShellHistory
) -> None:
    spec = make_shell(workspace, history).spec
    assert "approved" not in spec.parameters["properties"]
    assert spec.runtime_args == ("approved",)
    for phrase in ("Sandbox: process", "Low risk", "Medium risk", "High risk", ".heron/outputs"):
        assert phrase in spec.description


async def test_the_status_line_names_the_sandbox_and_the_network_the_command_had(
    workspace: Path, history: ShellHistory
) -> None:
    result = await run(make_shell(workspace, history), command="true")
    first = result.output.splitlines()[0]
    assert first.startswith("exit code 0 in ") and first.endswith("[sandbox process, network host]")
    assert result.data["sandbox"]["network"] == "host"


async def test_a_tool_set_can_give_its_commands_no_network(
    workspace: Path, history: ShellHistory
) -> None:
    sandbox = ProcessSandbox(limits=ResourceLimits(kill_grace_s=0.3, max_processes=None))
    if sandbox.facts is None or not sandbox.facts.network_namespace:
        pytest.skip("no network namespace for the process level on this host")
    shell = shell_tool(
        sandbox=sandbox,
        policy=CommandPolicy(workspace=workspace),
        workspace=workspace,
        history=history,
        network="none",
    )
    assert "network none (no network access)" in shell.spec.description
    assert not shell.spec.annotations.open_world
    result = await run(
        shell, command="cat /sys/class/net/*/operstate 2>/dev/null; ls /sys/class/net"
    )
    assert result.output.splitlines()[0].endswith("[sandbox process, network none]")
    assert result.output.splitlines()[-1] == "lo"  # its own namespace: loopback only, down
