"""`RequestDesk`: requests to a human opened, delivered, answered once, expired on the store's
clock, signed, and exported — plus the "always" rules they leave behind."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from heron._support.clock import FakeClock
from heron._support.vocabulary import HumanDecision
from heron.humans.approvers import LOCAL_OPERATOR, Approvers, may_answer
from heron.humans.config import ApprovalsConfig, QuestionsConfig, clamp_seconds
from heron.humans.console import ConsoleChannel
from heron.humans.desk import RequestDesk, RuleChoice
from heron.humans.refusals import AlreadyAnswered, InvalidAnswer, NotAnApprover, UnknownRequest
from heron.humans.rules import command_words, parse_prefix
from heron.humans.signing import DecisionKeyStore, DecisionSigner, verify_decision
from heron.humans.sqlite_store import SqliteRequestStore
from heron.humans.store import HumanRequest

SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
    "required": ["path", "text"],
    "additionalProperties": False,
}


class Recorder:
    def __init__(self, name: str, outcome: str = "ok") -> None:
        self.name = name
        self.outcome = outcome
        self.delivered: list[str] = []

    async def deliver(self, request: HumanRequest) -> str:
        self.delivered.append(request.id)
        if self.outcome == "raise":
            raise ConnectionError("smtp.example.com refused")
        return self.outcome


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteRequestStore]:
    opened = SqliteRequestStore.open_dir(tmp_path)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=1_000.0)


def desk_for(
    store: SqliteRequestStore,
    tmp_path: Path,
    clock: FakeClock,
    *,
    approvers: dict[str, list[str]] | None = None,
    channels: list[Any] | None = None,
    questions: QuestionsConfig | None = None,
    escalation: list[dict[str, Any]] | None = None,
) -> RequestDesk:
    config = ApprovalsConfig.model_validate(
        {
            "approvers": approvers or {},
            "questions": questions or QuestionsConfig(),
            "escalation": escalation or [],
        }
    )
    return RequestDesk(
        store,
        signer=DecisionSigner(DecisionKeyStore(tmp_path)),
        config=config,
        channels=[ConsoleChannel()] if channels is None else channels,
        approval_timeout_s=60.0,
        clock=clock,
    )


async def approval(desk: RequestDesk, **fields: Any) -> HumanRequest:
    values: dict[str, Any] = {
        "session": "main",
        "call_id": "call-1",
        "tool": "write_file",
        "arguments": {"path": "notes.txt", "text": "hello", "api_key": "sk-live-123"},
        "schema": SCHEMA,
    }
    values.update(fields)
    return await desk.open_approval(**values)


async def test_an_approval_waits_for_the_local_operator_when_nothing_is_configured(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    desk = desk_for(store, tmp_path, clock)
    request = await approval(desk)
    assert request.status == "input_required" and request.approvers == (LOCAL_OPERATOR,)
    assert request.deadline == 1_060.0 and request.deliveries == {"console": "ok"}
    assert request.arguments["api_key"] == "sk-live-123"
    assert request.display_arguments["api_key"] == "[REDACTED]"
    assert "write_file" in request.question and "sk-live" not in request.question


async def test_the_first_answer_wins_and_the_second_names_who_answered_and_when(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    desk = desk_for(store, tmp_path, clock)
    request = await approval(desk)
    clock.advance(5)
    done = desk.decide(request.id, HumanDecision.yes(), channel="console", name="alice")
    assert (done.status, done.outcome, done.answered_by) == (
        "completed",
        "approved",
        "console:alice",
    )
    with pytest.raises(
        AlreadyAnswered, match=r"already answered by console:alice at 1970-01-01T00:16:45Z"
    ):
        desk.decide(request.id, HumanDecision.no(), channel="console", name="bob")
    with pytest.raises(UnknownRequest):
        desk.decide("apr-nope", HumanDecision.yes(), channel="console", name="alice")


async def test_withdrawing_a_gone_askers_session_cancels_only_its_active_requests(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    desk = desk_for(store, tmp_path, clock)
    child = "main/agent/abc"
    waiting = await approval(desk, session=child, asker="sub-agent helper abc (spawned by main)")
    answered = await approval(desk, session=child, call_id="call-2", tool="edit_file")
    desk.decide(answered.id, HumanDecision.yes(), channel="console", name="alice")
    other = await approval(desk, call_id="call-3")
    assert waiting.question.startswith("sub-agent helper abc (spawned by main) asks: May heron")
    (withdrawn,) = desk.withdraw(child, "sub-agent abc ended")
    assert (withdrawn.id, withdrawn.status, withdrawn.answered_by) == (
        waiting.id,
        "cancelled",
        "policy",
    )
    assert desk.get(answered.id).outcome == "approved"  # an ended request keeps its ending
    assert desk.get(other.id).status == "input_required"  # another session's is untouched


async def test_silence_never_approves_the_deadline_ends_an_approval_as_no_answer(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    desk = desk_for(store, tmp_path, clock)
    request = await approval(desk)
    clock.advance(60)
    with pytest.raises(AlreadyAnswered, match="timed_out, no_answer"):
        desk.decide(request.id, HumanDecision.yes(), channel="console", name="alice")
    ended = desk.get(request.id)
    assert (ended.status, ended.outcome, ended.decision) == ("timed_out", "no_answer", None)


async def test_only_a_configured_approver_may_answer(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    desk = desk_for(store, tmp_path, clock, approvers={"console": ["alice"], "mail": ["ops@x.org"]})
    request = await approval(desk)
    assert request.approvers == ("console:alice",)  # mail has no channel in this process
    with pytest.raises(NotAnApprover, match="console:mallory may not answer"):
        desk.decide(request.id, HumanDecision.yes(), channel="console", name="mallory")
    with pytest.raises(NotAnApprover):
        desk.decide(request.id, HumanDecision.yes(), channel="mail", name="ops@x.org")
    assert desk.get(request.id).active
    assert not may_answer(("console:alice",), "console", "*")


async def test_no_reachable_approver_ends_the_request_at_once(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    desk = desk_for(store, tmp_path, clock, approvers={"mail": ["ops@x.org"]})
    request = await approval(desk)
    assert (request.status, request.outcome, request.reason) == (
        "failed",
        "no_answer",
        "no approver reachable",
    )
    failing = desk_for(store, tmp_path, clock, channels=[Recorder("console", outcome="raise")])
    other = await approval(failing, arguments={"path": "b.txt", "text": "x"})
    assert other.outcome == "no_answer"
    assert other.reason is not None and "smtp.example.com refused" in other.reason


async def test_an_identical_pending_request_is_reused_not_delivered_again(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    console = Recorder("console")
    desk = desk_for(store, tmp_path, clock, channels=[console])
    first = await approval(desk)
    again = await approval(desk, call_id="call-2")
    assert again.id == first.id and again.call_ids == ("call-1", "call-2")
    assert console.delivered == [first.id]


async def test_urgency_picks_every_channel_or_the_first(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    console, mail = Recorder("console"), Recorder("mail")
    desk = desk_for(
        store,
        tmp_path,
        clock,
        approvers={"console": ["alice"], "mail": ["ops@x.org"]},
        channels=[console, mail],
    )
    normal = await approval(desk)
    urgent = await approval(desk, arguments={"path": "x", "text": "y"}, urgency="urgent")
    assert console.delivered == [normal.id, urgent.id] and mail.delivered == [urgent.id]
    # Another channel's approver answers the urgent one.
    done = desk.decide(urgent.id, HumanDecision.no(), channel="mail", name="ops@x.org")
    assert done.outcome == "denied"


async def test_an_edit_is_validated_against_the_tools_schema(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    desk = desk_for(store, tmp_path, clock)
    request = await approval(desk)
    with pytest.raises(InvalidAnswer, match="do not fit write_file"):
        desk.decide(request.id, HumanDecision.edit({"path": 3}), channel="console", name="a")
    done = desk.decide(
        request.id,
        HumanDecision.edit({"path": "draft.txt", "text": "hello"}),
        channel="console",
        name="a",
    )
    assert done.outcome == "edited" and done.decision is not None
    assert done.decision.arguments == {"path": "draft.txt", "text": "hello"}


async def test_a_replacement_is_sanitised(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    desk = desk_for(store, tmp_path, clock)
    request = await approval(desk)
    done = desk.decide(
        request.id, HumanDecision.replace("\x1b[31mdone\x1b[0m"), channel="console", name="a"
    )
    assert done.decision == HumanDecision.replace("[31mdone[0m")


async def test_every_decision_is_signed_and_verifies_until_anything_changes(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    desk = desk_for(store, tmp_path, clock)
    request = await approval(desk)
    clock.advance(1.2345)
    done = desk.decide(request.id, HumanDecision.yes(), channel="console", name="alice")
    assert done.signature is not None and done.signature.startswith("heron-decision-")
    keys = DecisionKeyStore(tmp_path)
    assert verify_decision(done, keys).valid
    assert (tmp_path / "decision-keys").is_dir() and not (tmp_path / "receipt-keys").exists()
    forged = [
        HumanRequest(**{**_fields(done), "arguments": {**done.arguments, "path": "/etc/passwd"}}),
        HumanRequest(**{**_fields(done), "decision": HumanDecision.always()}),
        HumanRequest(**{**_fields(done), "answered_by": "console:mallory"}),
        HumanRequest(**{**_fields(done), "answered_at": (done.answered_at or 0) + 1}),
        HumanRequest(**{**_fields(done), "id": "apr-other"}),
    ]
    assert [verify_decision(f, keys).valid for f in forged] == [False] * 5
    timed_out = await approval(desk, arguments={"path": "c", "text": "d"})
    clock.advance(61)
    result = verify_decision(desk.get(timed_out.id), keys)
    assert not result.valid and "no person decided" in result.detail


def _fields(request: HumanRequest) -> dict[str, Any]:
    return {name: getattr(request, name) for name in request.__dataclass_fields__}


async def test_always_stores_a_scoped_rule_that_expires_and_can_be_revoked(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    desk = desk_for(store, tmp_path, clock)
    request = await approval(
        desk, tool="shell", arguments={"command": "git push origin main"}, schema=None
    )
    desk.decide(
        request.id,
        HumanDecision.always(),
        channel="console",
        name="alice",
        rule=RuleChoice(scope="command", prefix="git push", ttl_s=600),
    )
    [rule] = store.rules()
    assert (rule.scope, rule.session, rule.command_prefix, rule.created_by) == (
        "command",
        "main",
        ("git", "push"),
        "console:alice",
    )
    assert rule.expires_at == clock.time() + 600

    def covered(command: str, *, session: str = "main", high_risk: bool = False) -> bool:
        found = desk.covering_rule(
            session=session, tool="shell", arguments={"command": command}, high_risk=high_risk
        )
        return found is not None

    assert covered("git push") and covered("git  push --tags")
    assert not covered("git pull")
    assert not covered("git push; rm -rf ~") and not covered("git push $(whoami)")
    assert not covered("git push | tee log") and not covered("git push > /dev/sda")
    assert not covered("git push", session="other")
    assert not covered("git push", high_risk=True)
    clock.advance(601)
    assert not covered("git push")


async def test_always_is_refused_for_a_high_risk_call_and_a_prefix_not_of_the_command(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    desk = desk_for(store, tmp_path, clock)
    risky = await approval(
        desk, tool="shell", arguments={"command": "sudo reboot"}, schema=None, risk="high"
    )
    with pytest.raises(InvalidAnswer, match="high-risk"):
        desk.decide(risky.id, HumanDecision.always(), channel="console", name="a")
    assert desk.get(risky.id).active  # refused answers change nothing
    plain = await approval(desk, tool="shell", arguments={"command": "make test"}, schema=None)
    with pytest.raises(InvalidAnswer, match="not a prefix"):
        desk.decide(
            plain.id,
            HumanDecision.always(),
            channel="console",
            name="a",
            rule=RuleChoice(scope="command", prefix="make install"),
        )
    desk.decide(
        plain.id,
        HumanDecision.always(),
        channel="console",
        name="a",
        rule=RuleChoice(scope="tool", ttl_s=10**9),
    )
    [rule] = store.rules()
    assert rule.session is None and rule.expires_at == clock.time() + 30 * 86_400
    assert desk.revoke_rule(rule.id) and not desk.revoke_rule(rule.id)
    assert desk.covering_rule(session="x", tool="shell", arguments={"command": "ls"}) is None


async def test_a_questions_timeout_and_default_are_clamped_by_configuration(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    questions = QuestionsConfig(timeout_s=30, max_timeout_s=120, on_timeout="default")
    desk = desk_for(store, tmp_path, clock, questions=questions)
    long = await desk.open_question(
        session="main",
        call_id="c1",
        question="Which colour?",
        timeout_s=10**6,
        default="blue",
        options=["blue", "green"],
    )
    assert long.deadline == clock.time() + 120
    unset = await desk.open_question(session="main", call_id="c2", question="Name?")
    assert unset.deadline == clock.time() + 30
    with pytest.raises(InvalidAnswer, match="the default must be one of"):
        await desk.open_question(
            session="main", call_id="c3", question="Pick", options=["a"], default="z"
        )
    with pytest.raises(InvalidAnswer, match="the answer must be one of"):
        desk.answer(long.id, "red", channel="console", name="a")
    clock.advance(120)
    ended = desk.get(long.id)
    assert (ended.status, ended.outcome, ended.answer) == ("timed_out", "defaulted", "blue")
    no_defaults = desk_for(store, tmp_path, clock, questions=QuestionsConfig(model_defaults=False))
    q = await no_defaults.open_question(session="m", call_id="c4", question="Q?", default="x")
    assert q.default is None
    assert clamp_seconds(float("nan"), default=5, maximum=9) == 5


async def test_a_question_is_answered_with_a_value_that_fits_its_schema(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    desk = desk_for(store, tmp_path, clock)
    q = await desk.open_question(
        session="main", call_id="c1", question="How many copies?", schema={"type": "integer"}
    )
    with pytest.raises(InvalidAnswer, match="does not fit"):
        desk.answer(q.id, "three", channel="console", name="a")
    with pytest.raises(InvalidAnswer, match="is a question"):
        desk.decide(q.id, HumanDecision.yes(), channel="console", name="a")
    done = desk.answer(q.id, 3, channel="console", name="a", reason="the usual")
    assert (done.outcome, done.answer) == ("answered", 3)
    assert verify_decision(done, DecisionKeyStore(tmp_path)).valid


async def test_a_waiting_question_is_reminded_and_keeps_waiting(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    desk = desk_for(
        store, tmp_path, clock, questions=QuestionsConfig(timeout_s=10, on_timeout="wait")
    )
    q = await desk.open_question(session="main", call_id="c1", question="Ready?")
    clock.advance(25)
    [reminded] = desk.expire()
    assert reminded.active and reminded.reminders == 1 and reminded.deadline == q.created_at + 30
    assert desk.answer(q.id, "yes", channel="console", name="a").outcome == "answered"


async def test_export_writes_the_feedback_data_of_ended_requests(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    desk = desk_for(store, tmp_path, clock)
    request = await approval(desk)
    await approval(desk, arguments={"path": "still", "text": "pending"})
    clock.advance(2.5)
    desk.decide(
        request.id, HumanDecision.no(), channel="console", name="alice", reason="wrong file"
    )
    [record] = list(desk.export())
    assert json.loads(json.dumps(record)) == record
    assert {k: record[k] for k in ("id", "decision", "reason", "approver", "latency_s")} == {
        "id": request.id,
        "decision": {"kind": "no"},
        "reason": "wrong file",
        "approver": "console:alice",
        "latency_s": 2.5,
    }
    assert record["arguments"]["api_key"] == "[REDACTED]"
    [exact] = list(desk.export(exact=True))
    assert exact["arguments"]["api_key"] == "sk-live-123"
    assert list(desk.export(since=clock.time() + 1)) == []


def test_approvers_come_from_configuration_with_the_local_operator_as_default() -> None:
    assert Approvers.from_config({}).identities == (LOCAL_OPERATOR,)
    configured = Approvers.from_config({"console": ["alice"], "mail": ["ops@x.org"]})
    assert configured.identities == ("console:alice", "mail:ops@x.org")
    assert configured.reachable({"mail"}) == ("mail:ops@x.org",)
    for bad in ({"fax": ["x"]}, {"console": [" "]}, {"mail": ["*"]}):
        with pytest.raises(ValueError):
            Approvers.from_config(bad)


def test_a_command_prefix_is_parsed_as_shell_words() -> None:
    assert parse_prefix("git 'push'") == ("git", "push")
    assert command_words("echo 'a; b'") == ("echo", "a; b")
    for compound in ("a && b", "a; b", "a | b", "a > f", "(a)", "a &", "$(a)", "`a`", "'open"):
        assert command_words(compound) is None, compound
    with pytest.raises(ValueError):
        parse_prefix("   ")


def test_answering_processes_share_the_state_directorys_decision_key(tmp_path: Path) -> None:
    first = DecisionSigner(DecisionKeyStore(tmp_path))
    second = DecisionSigner(DecisionKeyStore(tmp_path))
    payload = {"request_id": "apr-1", "arguments": {}, "decision": {"kind": "yes"}}
    one = first.sign(**payload, approver="console:a", epoch_ms=1)
    two = second.sign(**payload, approver="console:a", epoch_ms=1)
    assert one == two
    assert len(list((tmp_path / "decision-keys").glob("*.key"))) == 1
    assert (tmp_path / "decision-keys").stat().st_mode & 0o777 == 0o700


async def test_of_many_simultaneous_answers_on_separate_connections_exactly_one_wins(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    request = await approval(desk_for(store, tmp_path, clock))
    start = threading.Barrier(8)
    results: list[str] = []

    def answer(n: int) -> None:
        own = SqliteRequestStore.open_dir(tmp_path)  # another connection, as another process
        try:
            desk = desk_for(own, tmp_path, clock)
            start.wait()
            try:
                desk.decide(request.id, HumanDecision.yes(), channel="console", name=f"op{n}")
                results.append("won")
            except AlreadyAnswered as exc:
                results.append(str(exc))
        finally:
            own.close()

    threads = [threading.Thread(target=answer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert results.count("won") == 1 and len(results) == 8
    winner = store.get(request.id)
    assert winner is not None and winner.answered_by is not None
    assert all(f"already answered by {winner.answered_by}" in r for r in results if r != "won")


async def test_nobody_answering_escalates_to_the_next_group_once_on_all_its_channels(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    mail, webhook = Recorder("mail"), Recorder("webhook")
    desk = desk_for(
        store,
        tmp_path,
        clock,
        approvers={"console": ["alice"]},
        channels=[ConsoleChannel(), mail, webhook],
        escalation=[
            {"after_s": 20, "approvers": {"mail": ["lead@example.com"], "webhook": ["ops"]}},
            {"after_s": 40, "approvers": {"mail": ["boss@example.com"]}},
        ],
    )
    opened = await approval(desk)
    assert opened.approvers == ("console:alice",) and mail.delivered == []
    clock.advance(19)
    assert await desk.escalate() == []  # not due yet
    clock.advance(1)
    [widened] = await desk.escalate()
    assert widened.approvers == ("console:alice", "mail:lead@example.com", "webhook:ops")
    assert mail.delivered == [opened.id] and webhook.delivered == [opened.id]
    assert await desk.escalate() == []  # a step is taken once
    with pytest.raises(NotAnApprover):
        desk.decide(opened.id, HumanDecision.yes(), channel="mail", name="boss@example.com")
    clock.advance(20)
    [second] = await desk.escalate()
    assert second.approvers[-1] == "mail:boss@example.com" and len(mail.delivered) == 2
    # Whoever was asked first may still answer; the answer ends the escalation.
    settled = desk.decide(opened.id, HumanDecision.yes(), channel="console", name="alice")
    assert settled.outcome == "approved"
    clock.advance(1_000)
    assert await desk.escalate() == []


async def test_an_ended_request_is_not_escalated(
    store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    mail = Recorder("mail")
    desk = desk_for(
        store,
        tmp_path,
        clock,
        channels=[ConsoleChannel(), mail],
        escalation=[{"after_s": 90, "approvers": {"mail": ["lead@example.com"]}}],
    )
    opened = await approval(desk)  # its deadline (60 s) comes before the step (90 s)
    clock.advance(90)
    desk.expire()
    assert await desk.escalate() == [] and mail.delivered == []
    assert desk.get(opened.id).outcome == "no_answer"


def test_escalation_steps_must_come_in_order_and_name_someone() -> None:
    with pytest.raises(ValueError, match="increasing after_s"):
        ApprovalsConfig.model_validate(
            {
                "escalation": [
                    {"after_s": 60, "approvers": {"mail": ["a@example.com"]}},
                    {"after_s": 30, "approvers": {"mail": ["b@example.com"]}},
                ]
            }
        )
    with pytest.raises(ValueError, match="at least 1"):
        ApprovalsConfig.model_validate({"escalation": [{"after_s": 60, "approvers": {}}]})
