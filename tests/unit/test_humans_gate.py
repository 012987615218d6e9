"""The engine's approval gate over durable requests (`DurableApprover`): the call gets a
placeholder at once and the turn goes on; the decision and the real result come later; rules,
unreachable approvers, edits and the repeated-prompt guard."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import heron
from heron import Agent, ScriptedModel
from heron._support.clock import FakeClock
from heron._support.vocabulary import HumanDecision
from heron.humans.console import ConsoleChannel
from heron.humans.desk import RequestDesk, RuleChoice
from heron.humans.gate import DurableApprover
from heron.humans.outcomes import EndingReporter, RequestEnding, SessionAgent
from heron.humans.signing import DecisionKeyStore, DecisionSigner
from heron.humans.sqlite_store import SqliteRequestStore
from heron.messages import ToolResultMessage
from heron.models.history_rules import HistoryChecker
from heron.safety.idempotency import IdempotencyStore
from heron.safety.sqlite_idempotency import SqliteIdempotencyLedger
from heron.tools.definition import CallApproval
from heron.turn.approval import ApprovalManager, ApprovalPolicy, BackChannelApprover
from heron.turn.approval_audit import MemoryAuditStore
from support.engine import Events, call, calls_turn
from support.waiting import until

PAID: list[dict[str, Any]] = []


@heron.tool(requires_approval=True)
def pay(to: str, amount: int) -> str:
    """Pay someone.

    Args:
        to: The payee.
        amount: How much, in whole euros.
    """
    PAID.append({"to": to, "amount": amount})
    return f"paid {amount} to {to}"


@pytest.fixture(autouse=True)
def _no_payments() -> None:
    PAID.clear()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteRequestStore]:
    opened = SqliteRequestStore.open_dir(tmp_path)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=10_000.0)


def make_desk(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock, **kwargs: Any
) -> RequestDesk:
    return RequestDesk(
        store,
        signer=DecisionSigner(DecisionKeyStore(tmp_path)),
        channels=kwargs.pop("channels", [ConsoleChannel()]),
        approval_timeout_s=60.0,
        clock=clock,
        **kwargs,
    )


def agent_with(approver: Any, model: ScriptedModel, audit: MemoryAuditStore) -> Agent:
    manager = ApprovalManager(policy=ApprovalPolicy(), approver=approver, audit=audit)
    return Agent(model=model, tools=[pay], approval=manager)


async def test_a_gated_call_gets_a_placeholder_at_once_and_runs_once_after_the_decision(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    desk = make_desk(store, tmp_path, clock)
    audit = MemoryAuditStore()
    model = ScriptedModel(
        [calls_turn(call("pay", "c1", to="ACME", amount=120)), {"text": "I asked for approval."}]
    )
    events = Events()
    agent = agent_with(DurableApprover(desk, session="main"), model, audit)
    result = await agent.run("pay the invoice", sink=events)
    assert result.text == "I asked for approval." and PAID == []
    [placeholder] = [m for m in result.history if isinstance(m, ToolResultMessage)]
    [request] = store.list()
    assert placeholder.content.startswith(f"[awaiting approval {request.id} from the local")
    HistoryChecker().check(result.history)  # valid for a real provider while it waits
    assert events.results()["c1"].status == "awaiting_approval"
    [decided] = events.of("approval_decision")
    assert (decided.decision, decided.decided_by) == ("deferred", f"request:{request.id}")
    assert [r.decision for r in audit.list()] == ["deferred"]
    assert request.gates_call and request.call_id == "c1"
    assert request.schema is not None and "approved" not in request.arguments

    desk.decide(request.id, HumanDecision.yes(), channel="console", name="alice")
    endings: list[RequestEnding] = []

    async def publish(ending: RequestEnding) -> None:
        endings.append(ending)

    later = Events()
    reporter = EndingReporter(
        store,
        sessions=lambda r: SessionAgent(agent, later) if r.session == "main" else None,
        idempotency=IdempotencyStore(SqliteIdempotencyLedger(tmp_path)),
        publish=publish,
        audit=audit,
    )
    await reporter.report()
    await reporter.report()
    assert PAID == [{"to": "ACME", "amount": 120}]
    [ending] = endings
    assert ending.request.call_id == "c1" and ending.text.endswith("paid 120 to ACME")
    # The approved call ran through the engine: its own cards, in the session's sink.
    assert [e.id for e in later.of("tool_call")] == ["c1"]
    assert later.results()["c1"].status == "ok"
    assert [(r.decision, r.decided_by) for r in audit.list()] == [
        ("deferred", "policy"),
        ("yes", "console:alice"),
    ]


async def test_an_always_rule_approves_the_next_call_without_asking(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    desk = make_desk(store, tmp_path, clock)
    first = await desk.open_approval(
        session="main",
        call_id="c0",
        tool="pay",
        arguments={"to": "ACME", "amount": 1},
        gates_call=True,
    )
    desk.decide(
        first.id,
        HumanDecision.always(),
        channel="console",
        name="alice",
        rule=RuleChoice(scope="session"),
    )
    audit = MemoryAuditStore()
    model = ScriptedModel([calls_turn(call("pay", "c1", to="B", amount=2)), {"text": "done"}])
    result = await agent_with(DurableApprover(desk, session="main"), model, audit).run("go")
    assert PAID == [{"to": "B", "amount": 2}] and result.text == "done"
    [record] = audit.list()
    assert record.decision == "yes" and record.decided_by.startswith("rule:rule-")
    # In another session the rule does not apply.
    other = await agent_with(
        DurableApprover(desk, session="other"),
        ScriptedModel([calls_turn(call("pay", "c2", to="B", amount=2)), {"text": "asked"}]),
        audit,
    ).run("go")
    assert other.text == "asked" and len(PAID) == 1


async def test_no_reachable_approver_is_a_denial_by_policy_not_by_the_user(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    desk = make_desk(store, tmp_path, clock, channels=[])
    model = ScriptedModel([calls_turn(call("pay", "c1", to="A", amount=1)), {"text": "ok"}])
    result = await agent_with(DurableApprover(desk, session="main"), model, MemoryAuditStore()).run(
        "go"
    )
    [text] = [m.content for m in result.history if isinstance(m, ToolResultMessage)]
    assert "no approver could be reached" in text and "not the user's decision" in text
    [request] = store.list()
    assert (request.status, request.outcome, request.reason) == (
        "failed",
        "no_answer",
        "no approver reachable",
    )


async def test_an_edit_runs_the_tool_with_the_operators_arguments_validated_again() -> None:
    approver = BackChannelApprover("web")
    events = Events()
    model = ScriptedModel(
        [
            calls_turn(call("pay", "c1", to="ACME", amount=120)),
            calls_turn(call("pay", "c2", to="ACME", amount=5)),
            {"text": "done"},
        ]
    )
    agent = agent_with(approver, model, MemoryAuditStore())
    turn = asyncio.ensure_future(agent.run("go", sink=events))
    await until(lambda: len(approver.pending) == 1)
    [first] = approver.pending
    approver.answer(first.request_id, "edit", arguments={"to": "ACME", "amount": 100})
    await until(lambda: len(approver.pending) == 1 and approver.pending[0] != first)
    [second] = approver.pending
    approver.answer(second.request_id, "edit", arguments={"to": "ACME", "amount": "lots"})
    result = await turn
    assert PAID == [{"to": "ACME", "amount": 100}]
    results = events.results()
    assert results["c1"].status == "ok" and results["c2"].status == "error"
    assert "edited arguments for 'pay' are invalid" in results["c2"].output
    assert result.text == "done"


async def test_the_repeated_prompt_guard_covers_every_prompt_required_tool() -> None:
    approver = BackChannelApprover("web")
    events = Events()
    model = ScriptedModel(
        [
            calls_turn(call("pay", "c1", to="A", amount=1)),
            calls_turn(call("pay", "c2", to="A", amount=1)),
            {"text": "unreachable"},
        ]
    )
    agent = agent_with(approver, model, MemoryAuditStore())
    turn = asyncio.ensure_future(agent.run("go", sink=events))
    await until(lambda: len(approver.pending) == 1)
    approver.answer(approver.pending[0].request_id, "no")
    result = await turn
    assert len(events.of("approval_request")) == 1  # not asked again
    assert "already refused approval" in events.results()["c2"].output
    assert result.outcome.status == "error" and PAID == []


async def test_a_models_own_approval_request_never_satisfies_the_gate(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    desk = make_desk(store, tmp_path, clock)
    own = await desk.open_approval(
        session="main",
        call_id="c0",
        tool="request_human_approval",
        arguments={"question": "May I pay ACME 120?"},
    )
    desk.decide(own.id, HumanDecision.yes(), channel="console", name="alice")
    model = ScriptedModel([calls_turn(call("pay", "c1", to="ACME", amount=120)), {"text": "ok"}])
    await agent_with(DurableApprover(desk, session="main"), model, MemoryAuditStore()).run("go")
    assert PAID == []
    gated = [r for r in store.list() if r.gates_call]
    assert len(gated) == 1 and gated[0].active and gated[0].tool == "pay"


class JudgedTool:
    """A tool that judges each call, like the shell: `ls` may run unattended, `rm` may not."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self._inner = heron.tool(name="run_cmd", destructive=True)(self._run)

    async def _run(self, command: str) -> str:
        """Run a command.

        Args:
            command: The command.
        """
        self.ran.append(command)
        return f"ran {command}"

    @property
    def spec(self) -> Any:
        return self._inner.spec

    def validate(self, arguments: Any) -> dict[str, Any]:
        return self._inner.validate(arguments)

    async def execute(self, arguments: dict[str, Any], ctx: Any) -> Any:
        return await self._inner.execute(arguments, ctx)

    def approval_for(self, arguments: Any) -> CallApproval:
        low = arguments["command"].startswith("ls")
        return CallApproval(risk="low" if low else "medium", unattended=low)


async def test_what_may_run_unattended_runs_and_only_the_rest_waits_on_a_request(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    desk = make_desk(store, tmp_path, clock)
    judged = JudgedTool()
    manager = ApprovalManager(approver=DurableApprover(desk, session="main"))
    model = ScriptedModel(
        [
            calls_turn(call("run_cmd", "c1", command="ls"), call("run_cmd", "c2", command="rm x")),
            {"text": "done"},
        ]
    )
    events = Events()
    await Agent(model=model, tools=[judged], approval=manager).run("go", sink=events)
    assert judged.ran == ["ls"]
    results = events.results()
    assert (results["c1"].status, results["c2"].status) == ("ok", "awaiting_approval")
    [request] = store.list()
    assert (request.call_id, request.risk) == ("c2", "medium")
