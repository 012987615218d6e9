"""Preparation: hooks, availability, delivery defaults, approval marker, approval gate, guards."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from heron import (
    Agent,
    ApprovalManager,
    ApprovalPolicy,
    ApprovalRequest,
    BackChannelApprover,
    Cancel,
    HookCall,
    Rewrite,
    RuntimeKnobs,
    ScriptedModel,
    ToolHook,
    tool,
)
from heron._support.state import open_db
from heron.audit.sqlite_store import SqliteApprovalAudit
from heron.messages import ToolResultMessage
from heron.turn.approval import parse_terminal_answer
from support.engine import Events, call, calls_turn


class Counter:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []


def make_shell(counter: Counter) -> Any:
    @tool(name="shell", runtime_args=["approved"])
    def shell(command: str, approved: bool = False) -> str:
        """Run a command (test double that records its calls).

        Args:
            command: The command line.
            approved: Set by the runtime.
        """
        counter.calls.append({"command": command, "approved": approved})
        return f"ran {command}"

    return shell


def auto_answer(decision: str, *, replacement: str | None = None) -> BackChannelApprover:
    """A back-channel whose operator answers every request as soon as it arrives."""
    channel: BackChannelApprover

    def on_request(request: ApprovalRequest) -> None:
        asyncio.get_running_loop().call_soon(
            lambda: channel.answer(request.request_id, decision, replacement=replacement)  # type: ignore[arg-type]
        )

    channel = BackChannelApprover("web", on_request=on_request)
    return channel


def contents(history: list[Any]) -> dict[str, str]:
    return {m.call_id: m.content for m in history if isinstance(m, ToolResultMessage)}


# -- approval ----------------------------------------------------------------------------------


async def test_non_interactive_run_denies_by_policy_without_blaming_the_user(
    events: Events,
) -> None:
    counter = Counter()
    agent = Agent(
        model=ScriptedModel([calls_turn(call("shell", command="ls")), {"text": "ok"}]),
        tools=[make_shell(counter)],
    )
    result = await agent.run("go", sink=events)
    text = contents(result.history)["c_shell"]
    assert "no operator decision was available" in text
    assert "not the user's decision" in text
    assert "Denied by the operator" not in text
    for word in ("auto_approve", "autonomy", "full"):
        assert word not in text
    assert counter.calls == []
    assert events.results()["c_shell"].status == "denied"
    (decision,) = events.of("approval_decision")
    assert (decision.decision, decision.decided_by) == ("unavailable", "policy")
    events.assert_one_pair_per_call()


async def test_operator_denial_is_reported_as_the_operators_decision(events: Events) -> None:
    counter = Counter()
    agent = Agent(
        model=ScriptedModel([calls_turn(call("shell", command="rm x")), {"text": "ok"}]),
        tools=[make_shell(counter)],
        approver=auto_answer("no"),
    )
    result = await agent.run("go", sink=events)
    assert contents(result.history)["c_shell"] == "Denied by the operator: 'shell' was not run."
    assert counter.calls == []


async def test_approved_call_gets_the_runtime_marker_and_model_cannot_self_approve(
    events: Events,
) -> None:
    counter = Counter()
    turns = [
        calls_turn(call("shell", command="make", approved=True)),
        {"text": "ok"},
    ]
    agent = Agent(
        model=ScriptedModel(turns), tools=[make_shell(counter)], approver=auto_answer("yes")
    )
    await agent.run("go", sink=events)
    assert counter.calls == [{"command": "make", "approved": True}]
    (request,) = events.of("approval_request")
    assert request.tool == "shell" and "make" in request.summary
    (card,) = events.of("tool_call")
    assert card.arguments == {"command": "make", "approved": True}
    assert card.injected == ("approved",)


async def test_model_supplied_approval_marker_is_discarded_when_nobody_approved(
    events: Events,
) -> None:
    counter = Counter()
    agent = Agent(
        model=ScriptedModel(
            [calls_turn(call("shell", command="ls", approved=True)), {"text": "ok"}]
        ),
        tools=[make_shell(counter)],
        # A policy under which no approval decision is made at all for this tool.
        approval=ApprovalManager(policy=ApprovalPolicy(autonomy="read-only")),
    )
    await agent.run("go", sink=events)
    assert counter.calls == [{"command": "ls", "approved": False}]
    (card,) = events.of("tool_call")
    assert card.arguments["approved"] is False and card.injected == ()


async def test_always_answer_adds_tool_to_session_allowlist(events: Events) -> None:
    counter = Counter()
    approver = auto_answer("always")
    turns = [
        calls_turn(call("shell", "c1", command="a")),
        calls_turn(call("shell", "c2", command="b")),
        {"text": "ok"},
    ]
    agent = Agent(model=ScriptedModel(turns), tools=[make_shell(counter)], approver=approver)
    await agent.run("go", sink=events)
    assert len(events.of("approval_request")) == 1
    assert [c["command"] for c in counter.calls] == ["a", "b"]
    assert agent.approval.session_allowlist == {"shell"}
    assert agent.approval.auto_approvals["shell"] == 1


async def test_always_ask_overrides_the_session_allowlist_and_auto_approve() -> None:
    counter = Counter()
    manager = ApprovalManager(
        policy=ApprovalPolicy(always_ask=["shell"], auto_approve=["shell"]),
        session_allowlist={"shell"},
    )
    shell = make_shell(counter)
    assert manager.requirement(shell.spec) == "prompt"


def test_requirement_follows_autonomy_and_annotations() -> None:
    @tool(read_only=True)
    def look() -> str:
        """Looks."""
        return ""

    @tool(read_only=True, requires_approval=True)
    def peek_secret() -> str:
        """Reads something sensitive."""
        return ""

    shell = make_shell(Counter())
    supervised = ApprovalManager()
    assert supervised.requirement(look.spec) == "approved"
    assert supervised.requirement(peek_secret.spec) == "prompt"
    assert supervised.requirement(shell.spec) == "prompt"
    assert ApprovalManager(policy=ApprovalPolicy(autonomy="full")).requirement(shell.spec) == (
        "approved"
    )
    auto = ApprovalManager(policy=ApprovalPolicy(auto_approve=["shell"]))
    assert auto.requirement(shell.spec) == "approved"
    # always_ask wins even under full autonomy; a requires-approval annotation is honoured under
    # read-only autonomy and is not bypassed by a "*" auto-approve.
    strict_full = ApprovalManager(policy=ApprovalPolicy(autonomy="full", always_ask=["shell"]))
    assert strict_full.requirement(shell.spec) == "prompt"
    read_only = ApprovalManager(policy=ApprovalPolicy(autonomy="read-only"))
    assert read_only.requirement(peek_secret.spec) == "prompt"
    assert read_only.requirement(look.spec) == "not_required"
    star = ApprovalManager(policy=ApprovalPolicy(auto_approve=["*"]))
    assert star.requirement(peek_secret.spec) == "prompt"
    assert star.requirement(shell.spec) == "approved"


async def test_deny_with_edit_becomes_sanitised_synthetic_result(events: Events) -> None:
    counter = Counter()
    agent = Agent(
        model=ScriptedModel([calls_turn(call("shell", command="deploy")), {"text": "ok"}]),
        tools=[make_shell(counter)],
        approver=auto_answer("replace", replacement="ok\x07line\nnext\ttab\x1b[31m"),
    )
    result = await agent.run("go", sink=events)
    assert contents(result.history)["c_shell"] == "okline\nnext\ttab[31m"
    card = events.results()["c_shell"]
    assert (card.status, card.success, card.receipt) == ("replaced", True, None)
    assert counter.calls == []


async def test_approval_timeout_denies_as_no_operator_answer(events: Events) -> None:
    counter = Counter()
    silent_channel = BackChannelApprover("web")
    agent = Agent(
        model=ScriptedModel([calls_turn(call("shell", command="x")), {"text": "ok"}]),
        tools=[make_shell(counter)],
        approval=ApprovalManager(policy=ApprovalPolicy(timeout_s=0.01), approver=silent_channel),
    )
    result = await agent.run("go", sink=events)
    assert "no operator answered within 0.01 s" in contents(result.history)["c_shell"]
    assert silent_channel.pending == []
    assert counter.calls == []


async def test_every_decision_is_audited_in_sqlite_with_redacted_summary(
    events: Events, tmp_path: Path
) -> None:
    counter = Counter()
    audit = SqliteApprovalAudit(open_db(tmp_path))
    turns = [
        calls_turn(call("shell", "c1", command="curl -H 'token=abcdefgh12345678' x")),
        {"text": "ok"},
    ]
    agent = Agent(
        model=ScriptedModel(turns),
        tools=[make_shell(counter)],
        approval=ApprovalManager(approver=auto_answer("yes"), audit=audit),
    )
    await agent.run("go", sink=events)
    rows = (
        sqlite3.connect(tmp_path / "heron.db")
        .execute("SELECT tool, decision, decided_by, arguments_summary FROM approval_audit")
        .fetchall()
    )
    assert len(rows) == 1
    tool_name, decision, decided_by, summary = rows[0]
    assert (tool_name, decision, decided_by) == ("shell", "yes", "backchannel:web:operator")
    assert "abcdefgh12345678" not in summary


async def test_automatic_approvals_are_counted_and_recorded_only_when_configured(
    events: Events,
) -> None:
    counter = Counter()
    manager = ApprovalManager(policy=ApprovalPolicy(autonomy="full", record_auto_approvals=True))
    agent = Agent(
        model=ScriptedModel([calls_turn(call("shell", command="ls")), {"text": "ok"}]),
        tools=[make_shell(counter)],
        approval=manager,
    )
    await agent.run("go", sink=events)
    assert manager.auto_approvals["shell"] == 1
    (record,) = manager.audit.list()  # type: ignore[attr-defined]
    assert (record.decision, record.decided_by) == ("auto", "autonomy:full")
    quiet = ApprovalManager(policy=ApprovalPolicy(autonomy="full"))
    agent2 = Agent(
        model=ScriptedModel([calls_turn(call("shell", command="ls")), {"text": "ok"}]),
        tools=[make_shell(counter)],
        approval=quiet,
    )
    await agent2.run("go")
    assert quiet.auto_approvals["shell"] == 1
    assert quiet.audit.list() == []  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("line", "answer"),
    [
        ("y", "yes"),
        ("YES\n", "yes"),
        (" always ", "always"),
        ("A\r\n", "always"),
        ("", "no"),
        ("\n", "no"),
        ("maybe", "no"),
        ("[Y]", "no"),
    ],
)
def test_terminal_answers_parse_conservatively(line: str, answer: str) -> None:
    assert parse_terminal_answer(line) == answer


# -- guards ------------------------------------------------------------------------------------


async def test_repeated_prompt_required_shell_in_one_response_is_asked_once(
    events: Events,
) -> None:
    counter = Counter()
    agent = Agent(
        model=ScriptedModel(
            [
                calls_turn(call("shell", "c1", command="ls"), call("shell", "c2", command="ls")),
                {"text": "ok"},
            ]
        ),
        tools=[make_shell(counter)],
        approver=auto_answer("yes"),
        knobs=RuntimeKnobs(dedup_exempt=frozenset({"shell"})),
    )
    result = await agent.run("go", sink=events)
    assert len(events.of("approval_request")) == 1
    assert len(counter.calls) == 1
    assert events.results()["c2"].status == "duplicate"
    assert result.ok


async def test_refused_shell_call_repeated_in_a_later_round_aborts_before_reprompting(
    events: Events,
) -> None:
    counter = Counter()
    agent = Agent(
        model=ScriptedModel(
            [
                calls_turn(call("shell", "c1", command="rm -r build")),
                calls_turn(
                    call("shell", "c2", command="rm -r build"), call("shell", "c3", command="pwd")
                ),
                {"text": "never reached"},
            ]
        ),
        tools=[make_shell(counter)],
        approver=auto_answer("no"),
    )
    result = await agent.run("go", sink=events)
    assert result.outcome.status == "error" and result.outcome.reason == "aborted"
    assert "already refused approval" in (result.outcome.error or "")
    assert len(events.of("approval_request")) == 1
    assert counter.calls == []
    by_id = events.results()
    assert by_id["c2"].status == "denied"
    assert (by_id["c3"].status, by_id["c3"].phase) == ("interrupted", "not_started")
    events.assert_one_pair_per_call()
    # History is still valid: the aborted round is answered call by call.
    assert [m.call_id for m in result.history if isinstance(m, ToolResultMessage)] == [
        "c1",
        "c2",
        "c3",
    ]


async def test_approved_shell_call_repeated_later_is_asked_again_not_aborted(
    events: Events,
) -> None:
    counter = Counter()
    agent = Agent(
        model=ScriptedModel(
            [
                calls_turn(call("shell", "c1", command="make test")),
                calls_turn(call("shell", "c2", command="make test")),
                {"text": "tests pass now"},
            ]
        ),
        tools=[make_shell(counter)],
        approver=auto_answer("yes"),
    )
    result = await agent.run("go", sink=events)
    assert result.ok
    assert len(events.of("approval_request")) == 2
    assert len(counter.calls) == 2


async def test_duplicate_prompt_required_calls_are_dropped_before_anyone_is_asked(
    events: Events,
) -> None:
    @tool(requires_approval=True)
    def deploy(target: str) -> str:
        """Deploy.

        Args:
            target: Where.
        """
        return f"deployed {target}"

    agent = Agent(
        model=ScriptedModel(
            [
                calls_turn(call("deploy", "c1", target="x"), call("deploy", "c2", target="x")),
                {"text": "ok"},
            ]
        ),
        tools=[deploy],
        approver=auto_answer("yes"),
    )
    await agent.run("go", sink=events)
    assert len(events.of("approval_request")) == 1
    assert events.results()["c2"].status == "duplicate"


async def test_cancel_while_waiting_for_approval_interrupts_without_running(
    events: Events,
) -> None:
    from heron import CancelScope

    counter = Counter()
    scope = CancelScope()
    asked = asyncio.Event()
    channel = BackChannelApprover("web", on_request=lambda r: asked.set())
    agent = Agent(
        model=ScriptedModel(
            [calls_turn(call("shell", "c1", command="ls"), call("shell", "c2", command="pwd"))]
        ),
        tools=[make_shell(counter)],
        approver=channel,
    )
    task = asyncio.create_task(agent.run("go", sink=events, cancel=scope))
    await asyncio.wait_for(asked.wait(), 5)
    scope.cancel("operator pressed Ctrl-C")
    result = await asyncio.wait_for(task, 5)
    assert result.outcome.status == "cancelled"
    assert counter.calls == [] and channel.pending == []
    by_id = events.results()
    assert [(by_id[c].status, by_id[c].phase) for c in ("c1", "c2")] == [
        ("interrupted", "not_started"),
        ("interrupted", "not_started"),
    ]
    assert "waited for approval" in by_id["c1"].output
    events.assert_one_pair_per_call()


async def test_identical_calls_in_one_response_run_once_with_canonical_arguments(
    events: Events,
) -> None:
    ran: list[dict[str, Any]] = []

    @tool(read_only=True)
    def lookup(a: int, b: int) -> str:
        """Look up.

        Args:
            a: First.
            b: Second.
        """
        ran.append({"a": a, "b": b})
        return "found"

    turns = [
        {
            "tool_calls": [
                {"id": "c1", "name": "lookup", "arguments": {"a": 1, "b": 2}},
                {"id": "c2", "name": "lookup", "arguments": {"b": 2, "a": 1}},
                {"id": "c3", "name": "lookup", "arguments": {"a": 1, "b": 3}},
            ]
        },
        {"text": "ok"},
    ]
    agent = Agent(model=ScriptedModel(turns), tools=[lookup])
    result = await agent.run("go", sink=events)
    assert ran == [{"a": 1, "b": 2}, {"a": 1, "b": 3}]
    assert "Skipped duplicate call" in contents(result.history)["c2"]
    assert events.results()["c2"].status == "duplicate"


@pytest.mark.parametrize("name", ["spawn_subagent", "lookup_exempt"])
async def test_reentrant_and_exempt_tools_are_never_deduplicated(name: str) -> None:
    ran: list[str] = []

    @tool(name=name, read_only=True)
    def same(task: str) -> str:
        """Run.

        Args:
            task: The task.
        """
        ran.append(task)
        return "ok"

    turns = [calls_turn(call(name, "c1", task="t"), call(name, "c2", task="t")), {"text": "ok"}]
    agent = Agent(
        model=ScriptedModel(turns),
        tools=[same],
        knobs=RuntimeKnobs(dedup_exempt=frozenset({"lookup_exempt"})),
    )
    await agent.run("go")
    assert ran == ["t", "t"]


# -- hooks -------------------------------------------------------------------------------------


class Guard(ToolHook):
    priority = 10

    def __init__(self) -> None:
        self.after: list[tuple[str, str]] = []

    async def before_tool_call(self, call: HookCall) -> Rewrite | Cancel | None:
        if call.name == "forbidden":
            return Cancel(reason="policy says no")
        if call.name == "old_name":
            return Rewrite(name="echo", arguments={"text": "rewritten"})
        return None

    async def after_tool_call(self, call: HookCall, outcome: Any) -> None:
        self.after.append((call.name, outcome.status))


class Broken(ToolHook):
    async def before_tool_call(self, call: HookCall) -> Rewrite | Cancel | None:
        raise RuntimeError("hook bug")


@tool(read_only=True)
def echo(text: str) -> str:
    """Echo.

    Args:
        text: Text.
    """
    return text


async def test_hooks_cancel_rewrite_and_survive_a_broken_hook(events: Events) -> None:
    guard = Guard()
    turns = [
        calls_turn(call("forbidden"), call("old_name", text="original")),
        {"text": "ok"},
    ]
    agent = Agent(model=ScriptedModel(turns), tools=[echo], hooks=[Broken(), guard])
    result = await agent.run("go", sink=events)
    got = contents(result.history)
    assert got["c_forbidden"] == "Cancelled by hook: policy says no"
    assert events.results()["c_forbidden"].status == "hook_cancelled"
    assert got["c_old_name"] == "rewritten"
    assert events.results()["c_old_name"].name == "echo"
    assert guard.after == [("echo", "ok")]
    events.assert_one_pair_per_call()


# -- availability and delivery defaults ---------------------------------------------------------


async def test_excluded_tool_is_hidden_and_refused_even_by_suffix(events: Events) -> None:
    @tool(name="docs__extract_text", read_only=True)
    def extract() -> str:
        """Extract."""
        return "text"

    model = ScriptedModel(
        [calls_turn(call("extract_text"), call("docs__extract_text", "c2")), {"text": "ok"}]
    )
    agent = Agent(model=model, tools=[extract, echo], excluded_tools=["Docs__Extract_Text "])
    await agent.run("go", sink=events)
    assert [s.name for s in model.requests[0].tools] == ["echo"]
    assert events.results()["c_extract_text"].status in ("excluded", "unknown")
    assert events.results()["c2"].status == "excluded"


async def test_unique_suffix_resolves_namespaced_tool_and_ambiguous_does_not(
    events: Events,
) -> None:
    @tool(name="fs__read", read_only=True)
    def fs_read() -> str:
        """Read."""
        return "fs"

    @tool(name="git__status", read_only=True)
    def git_status() -> str:
        """Status."""
        return "clean"

    @tool(name="web__status", read_only=True)
    def web_status() -> str:
        """Status."""
        return "up"

    turns = [calls_turn(call("read"), call("status")), {"text": "ok"}]
    agent = Agent(model=ScriptedModel(turns), tools=[fs_read, git_status, web_status])
    result = await agent.run("go", sink=events)
    assert contents(result.history)["c_read"] == "fs"
    assert events.results()["c_read"].name == "fs__read"
    assert events.results()["c_status"].status == "unknown"


async def test_channel_aware_tool_gets_the_channel_as_a_declared_default(events: Events) -> None:
    @tool(runtime_args=["channel"], read_only=True)
    def notify(text: str, channel: str = "") -> str:
        """Tell the user something.

        Args:
            text: The message.
            channel: Where to send it.
        """
        return f"{channel}: {text}"

    assert "heron fills in the channel" in notify.spec.description
    turns = [calls_turn(call("notify", text="hi")), {"text": "ok"}]
    result = await Agent(model=ScriptedModel(turns), tools=[notify]).run(
        "go", sink=events, channel="telegram"
    )
    assert contents(result.history)["c_notify"] == "telegram: hi"
    (card,) = events.of("tool_call")
    assert card.injected == ("channel",) and card.arguments["channel"] == "telegram"


def test_per_run_narrowing_can_only_narrow() -> None:
    agent = Agent(model=ScriptedModel([]), tools=[echo], allowed_tools=["echo"])
    narrowed = agent.resolve(allowed_tools=["echo", "shell"]).registry
    assert narrowed.names() == ["echo"]
    assert agent.resolve(allowed_tools=[]).registry.names() == []


def test_read_only_autonomy_exposes_only_read_only_tools() -> None:
    shell = make_shell(Counter())
    agent = Agent(model=ScriptedModel([]), tools=[echo, shell], autonomy="read-only")
    assert agent.registry.names() == ["echo"]


async def test_per_run_narrowing_also_hides_activated_tools(events: Events) -> None:
    from heron import ActivatedToolSet

    @tool(name="srv__lookup", read_only=True)
    def lookup() -> str:
        """Activated earlier in the session."""
        return "found"

    activated = ActivatedToolSet()
    activated.activate(lookup)
    model = ScriptedModel([calls_turn(call("srv__lookup")), {"text": "ok"}])
    agent = Agent(model=model, tools=[echo], activated=activated)
    await agent.run("go", sink=events, allowed_tools=["echo"])
    assert [s.name for s in model.requests[0].tools] == ["echo"]
    assert events.results()["c_srv__lookup"].status == "excluded"
