"""The shell with no operator: the parsed command's risk tier decides, the sandbox's containment
report sets what counts as low, and both audit trails record the tier of every shell call."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from heron import Agent, ScriptedModel
from heron.audit.executions import ExecutionAuditTrail
from heron.audit.sqlite_store import SqliteApprovalAudit, SqliteExecutionStore
from heron.messages import ToolResultMessage
from heron.safety.command_policy import CommandPolicy
from heron.sandbox import ProcessSandbox, ResourceLimits
from heron.sandbox.containment import containment_report
from heron.tools.definition import CallApproval, Tool
from heron.toolsets.shell import ShellHistory, UnattendedRisk, shell_tool
from heron.toolsets.sqlite_shell_history import SqliteShellHistory
from heron.turn.approval import (
    ApprovalAnswer,
    ApprovalManager,
    ApprovalPolicy,
    ApprovalRequest,
    MemoryAuditStore,
)
from heron.turn.approval_audit import AuditRecord
from support.engine import Events, call, calls_turn

LIMITS = ResourceLimits(kill_grace_s=0.3, max_processes=None)


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
    workspace: Path,
    history: ShellHistory,
    *,
    risk: UnattendedRisk = "low",
    confine: bool = True,
    policy: CommandPolicy | None = None,
) -> Tool:
    # `confine=False` is the documented limits-only process sandbox (`[tools.builtin] confine
    # = false`): its report contains nothing but the limits.
    return shell_tool(
        sandbox=ProcessSandbox(workspace=workspace, limits=LIMITS, confine=confine),
        policy=policy or CommandPolicy(workspace=workspace),
        workspace=workspace,
        history=history,
        unattended_risk=risk,
    )


async def run_unattended(
    shell: Tool,
    workspace: Path,
    *commands: str,
    auto_approve: tuple[str, ...] = (),
    audit: Any = None,
    observer: Any = None,
) -> tuple[list[str], list[AuditRecord], Events]:
    """One turn with no operator (`NoApprover`) that asks for `commands`; the results' texts
    and the approval trail."""
    trail = audit if audit is not None else MemoryAuditStore()
    manager = ApprovalManager(policy=ApprovalPolicy(auto_approve=auto_approve), audit=trail)
    calls = [call("shell", f"s{i}", command=c) for i, c in enumerate(commands)]
    model = ScriptedModel([calls_turn(*calls), {"text": "done"}])
    events = Events()
    agent = Agent(
        model=model, tools=[shell], approval=manager, workspace=workspace, observer=observer
    )
    result = await agent.run("tidy up", sink=events)
    texts = [m.content for m in result.history if isinstance(m, ToolResultMessage)]
    return texts, trail.list(), events


def test_the_shell_judges_each_call_by_its_parsed_command(
    workspace: Path, history: ShellHistory
) -> None:
    judge = make_shell(workspace, history).approval_for  # type: ignore[attr-defined]
    assert judge({"command": "ls -la"}) == CallApproval(risk="low", unattended=True)
    assert judge({"command": "rm -f notes.txt"}) == CallApproval(risk="medium", unattended=False)
    assert judge({"command": "rm -rf /"}) == CallApproval(risk="high", unattended=False)
    medium = make_shell(workspace, history, risk="medium").approval_for  # type: ignore[attr-defined]
    assert medium({"command": "rm -f notes.txt"}).unattended
    assert not medium({"command": "rm -rf /"}).unattended


async def test_with_no_operator_a_low_risk_command_runs_and_is_audited_as_low(
    workspace: Path, history: ShellHistory
) -> None:
    texts, audit, events = await run_unattended(make_shell(workspace, history), workspace, "ls")
    assert texts[0].startswith("exit code 0") and "notes.txt" in texts[0]
    [row] = audit
    assert (row.decision, row.decided_by, row.risk) == ("auto", "unattended:low", "low")
    [pending] = events.of("tool_call")
    assert pending.risk == "low" and pending.injected == ("approved",)


async def test_with_no_operator_a_medium_risk_command_is_denied_by_policy(
    workspace: Path, history: ShellHistory
) -> None:
    texts, audit, _ = await run_unattended(
        make_shell(workspace, history), workspace, "rm -f notes.txt"
    )
    assert texts == [
        "Not run: this medium-risk call of 'shell' needs approval and no operator decision was "
        "available, so heron denied it by policy. This was not the user's decision."
    ]
    assert (workspace / "notes.txt").exists()
    [row] = audit
    assert (row.decision, row.decided_by, row.risk) == ("unavailable", "policy", "medium")


async def test_auto_approve_no_longer_runs_a_medium_risk_command_with_no_operator(
    workspace: Path, history: ShellHistory
) -> None:
    texts, audit, _ = await run_unattended(
        make_shell(workspace, history), workspace, "rm -f notes.txt", auto_approve=("shell",)
    )
    assert texts[0].startswith("Not run: this medium-risk call")
    assert (workspace / "notes.txt").exists() and audit[0].risk == "medium"


async def test_unattended_risk_medium_lets_a_medium_risk_command_run(
    workspace: Path, history: ShellHistory
) -> None:
    shell = make_shell(workspace, history, risk="medium")
    texts, audit, _ = await run_unattended(shell, workspace, "rm -f notes.txt")
    assert texts[0].startswith("exit code 0")
    assert not (workspace / "notes.txt").exists()
    assert (audit[0].decided_by, audit[0].risk) == ("unattended:medium", "medium")


@pytest.mark.parametrize(
    "command",
    ["rm -rf /", "cp notes.txt /etc/heron-escaped", "echo x > ../outside.txt"],
)
@pytest.mark.parametrize("risk", ["low", "medium"])
async def test_a_high_risk_command_never_runs_unattended(
    workspace: Path, history: ShellHistory, command: str, risk: UnattendedRisk
) -> None:
    # Even where the deployment allows high risk with an operator's yes, and auto_approve
    # names the shell.
    policy = CommandPolicy(workspace=workspace, allow_high_risk=True)
    shell = make_shell(workspace, history, risk=risk, policy=policy)
    texts, audit, _ = await run_unattended(shell, workspace, command, auto_approve=("shell",))
    assert texts[0].startswith("Not run: this high-risk call of 'shell' needs approval")
    assert not (workspace.parent / "outside.txt").exists()
    assert not Path("/etc/heron-escaped").exists()  # noqa: ASYNC240
    assert (audit[0].decision, audit[0].risk) == ("unavailable", "high")
    assert history.recent() == []  # the tool was never called


async def test_a_sandbox_that_does_not_contain_heron_makes_low_count_as_medium(
    workspace: Path, history: ShellHistory
) -> None:
    sandbox = ProcessSandbox(workspace=workspace, limits=LIMITS, confine=False)
    assert not containment_report(sandbox).allows_unattended_low_risk()
    texts, audit, events = await run_unattended(
        make_shell(workspace, history, confine=False), workspace, "ls"
    )
    assert texts[0].startswith("Not run: this medium-risk call of 'shell'")
    [row] = audit
    assert row.risk == "medium" and row.reason is not None
    assert "low risk counts as medium here" in row.reason
    [request] = events.of("approval_request")
    assert request.risk == "medium" and "does not contain" in request.reason

    texts, audit, _ = await run_unattended(
        make_shell(workspace, history, confine=False, risk="medium"), workspace, "ls"
    )
    assert texts[0].startswith("exit code 0") and audit[0].decided_by == "unattended:medium"


class Operator:
    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.asked: list[ApprovalRequest] = []

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.asked.append(request)
        return ApprovalAnswer(decision=self.answer, decided_by="operator:test")  # type: ignore[arg-type]


async def test_with_an_operator_a_high_risk_command_is_asked_even_under_full_autonomy(
    workspace: Path, history: ShellHistory
) -> None:
    operator = Operator("no")
    manager = ApprovalManager(policy=ApprovalPolicy(autonomy="full"), approver=operator)
    model = ScriptedModel(
        [calls_turn(call("shell", "s1", command="rm -rf ../x")), {"text": "done"}]
    )
    agent = Agent(model=model, tools=[make_shell(workspace, history)], approval=manager)
    await agent.run("go")
    [request] = operator.asked
    assert request.risk == "high"
    assert manager.audit.list()[0].risk == "high"


async def test_every_shell_call_has_its_tier_in_both_durable_audit_trails(
    workspace: Path, history: ShellHistory, tmp_path: Path
) -> None:
    conn = sqlite3.connect(tmp_path / "audit.db")
    try:
        executions = SqliteExecutionStore(conn)
        trail = ExecutionAuditTrail(executions)
        shell = make_shell(workspace, history)
        _, audit, _ = await run_unattended(
            shell,
            workspace,
            "ls",
            "rm -f notes.txt",
            "rm -rf /",
            audit=SqliteApprovalAudit(conn),
            observer=trail,
        )
        assert [r.risk for r in audit] == ["low", "medium", "high"]
        [ran] = executions.query()
        assert (ran.tool, ran.risk, ran.status) == ("shell", "low", "ok")
        stored = conn.execute("SELECT risk FROM approval_audit ORDER BY id").fetchall()
        assert stored == [("low",), ("medium",), ("high",)]
    finally:
        conn.close()


def test_an_older_audit_database_gains_the_risk_columns(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "old.db")
    conn.execute(
        "CREATE TABLE approval_audit (id INTEGER PRIMARY KEY AUTOINCREMENT, timestamp TEXT NOT "
        "NULL, tool TEXT NOT NULL, arguments_summary TEXT NOT NULL, decision TEXT NOT NULL, "
        "decided_by TEXT NOT NULL, request_id TEXT NOT NULL, turn_id TEXT, session_id TEXT, "
        "reason TEXT)"
    )
    conn.execute(
        "INSERT INTO approval_audit (timestamp, tool, arguments_summary, decision, decided_by, "
        "request_id) VALUES ('2026-01-01T00:00:00.000Z', 'shell', 'command: ls', 'yes', "
        "'operator:cli', 'apr-1')"
    )
    conn.commit()
    audit = SqliteApprovalAudit(conn)
    SqliteExecutionStore(conn)
    [old] = audit.list()
    assert old.tool == "shell" and old.risk is None
    conn.close()
