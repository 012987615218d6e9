"""`RequestStore`: durable human requests — reuse of an identical pending request, the
compare-and-set answer, deadlines as a store query, deliveries, open calls — and "always"
rules with an expiry and a revocation."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from heron._support.vocabulary import HumanDecision
from heron.humans.store import (
    AlwaysRule,
    HumanRequest,
    RequestStore,
    Settlement,
    argument_digest,
    escalation_step,
)
from support.stores import StoreBackend


@pytest.fixture
def store(backend: StoreBackend) -> RequestStore:
    return backend.human_requests()


def request(request_id: str = "apr-1", **fields: Any) -> HumanRequest:
    arguments = fields.pop("arguments", {"path": "notes.txt", "token": "s3cret"})
    values: dict[str, Any] = {
        "id": request_id,
        "kind": "approval",
        "session": "main",
        "call_ids": (f"call-{request_id}",),
        "tool": "write_file",
        "arguments": arguments,
        "display_arguments": {**arguments, "token": "[REDACTED]"},
        "digest": argument_digest(arguments),
        "question": "May heron write notes.txt?",
        "approvers": ("console:*",),
        "created_at": 100.0,
        "deadline": 160.0,
    }
    values.update(fields)
    return HumanRequest(**values)


def answer(by: str = "console:alice", at: float = 110.0, **fields: Any) -> Settlement:
    values: dict[str, Any] = {
        "status": "completed",
        "outcome": "approved",
        "by": by,
        "at": at,
        "decision": HumanDecision.yes(),
        "signature": "heron-decision-x",
    }
    values.update(fields)
    return Settlement(**values)


def test_a_request_reads_back_whole_through_another_store(
    store: RequestStore, backend: StoreBackend
) -> None:
    full = request(
        options=("a", "b"),
        schema={"type": "object", "properties": {"path": {"type": "string"}}},
        urgency="urgent",
        risk="medium",
        default={"pick": "a"},
        remind_every_s=30.0,
    )
    assert store.open(full) == full
    assert backend.human_requests().get("apr-1") == full
    assert store.get("apr-2") is None


def test_an_identical_pending_request_is_reused_with_the_new_call_attached(
    store: RequestStore, backend: StoreBackend
) -> None:
    first = store.open(request("apr-1"))
    again = backend.human_requests().open(request("apr-2", call_ids=("call-2",)))
    assert again.id == "apr-1" and again.call_ids == ("call-apr-1", "call-2")
    assert store.get("apr-2") is None
    assert store.open(request("apr-3", call_ids=("call-2",))).call_ids == again.call_ids
    # Another session, another tool, other arguments, another kind: a new request each.
    assert store.open(request("apr-4", session="other")).id == "apr-4"
    assert store.open(request("apr-5", tool="delete_file")).id == "apr-5"
    other = {"path": "b.txt"}
    assert store.open(request("apr-6", arguments=other)).id == "apr-6"
    assert store.open(request("ask-7", kind="question")).id == "ask-7"
    # Once the first has ended, the same call asks anew.
    store.settle(first.id, answer())
    assert store.open(request("apr-8")).id == "apr-8"


def test_the_first_answer_wins_and_a_later_one_sees_who_answered(
    store: RequestStore, backend: StoreBackend
) -> None:
    store.open(request())
    won = store.settle("apr-1", answer("console:alice", 110.0))
    assert won.settled and won.request.status == "completed"
    assert (won.request.answered_by, won.request.answered_at) == ("console:alice", 110.0)
    assert won.request.decision == HumanDecision.yes() and won.request.outcome == "approved"
    lost = backend.human_requests().settle(
        "apr-1", answer("console:bob", 111.0, outcome="denied", decision=HumanDecision.no())
    )
    assert not lost.settled and not lost.late
    assert lost.request == won.request
    with pytest.raises(KeyError):
        store.settle("apr-9", answer())


def test_an_answer_at_or_after_the_deadline_does_not_settle(store: RequestStore) -> None:
    store.open(request(deadline=160.0))
    late = store.settle("apr-1", answer(at=160.0))
    assert not late.settled and late.late and late.request.status == "queued"


def test_an_approval_past_its_deadline_ends_as_no_answer_never_approved(
    store: RequestStore, backend: StoreBackend
) -> None:
    store.open(request("apr-1", deadline=150.0))
    store.open(request("apr-2", deadline=170.0, arguments={"x": 1}))
    store.open(request("apr-3", deadline=None, arguments={"x": 2}))
    assert store.expire(149.0) == []
    [ended] = backend.human_requests().expire(155.0)
    assert (ended.id, ended.status, ended.outcome) == ("apr-1", "timed_out", "no_answer")
    assert ended.decision is None and ended.answered_by == "policy"
    assert ended.answered_at == 150.0
    assert store.expire(155.0) == []
    assert [r.id for r in store.expire(10_000.0)] == ["apr-2"]
    assert store.get("apr-3").status == "queued"  # type: ignore[union-attr]


def test_an_ending_by_the_runtime_ignores_the_deadline(store: RequestStore) -> None:
    store.open(request(deadline=150.0))
    ended = store.settle(
        "apr-1",
        Settlement(
            status="failed",
            outcome="no_answer",
            by="policy",
            at=200.0,
            reason="no approver reachable",
            is_answer=False,
        ),
    )
    assert ended.settled and ended.request.reason == "no approver reachable"


def test_a_question_times_out_as_its_configuration_says(store: RequestStore) -> None:
    def question(qid: str, **fields: Any) -> HumanRequest:
        return request(qid, kind="question", arguments={"q": qid}, deadline=150.0, **fields)

    store.open(question("ask-default", on_timeout="default", default="blue"))
    store.open(question("ask-nodefault", on_timeout="default"))
    store.open(question("ask-halt", on_timeout="halt", default="blue"))
    store.open(question("ask-wait", on_timeout="wait", remind_every_s=20.0))
    changed = {r.id: r for r in store.expire(175.0)}
    assert set(changed) == {"ask-default", "ask-nodefault", "ask-halt", "ask-wait"}
    assert (changed["ask-default"].outcome, changed["ask-default"].answer) == ("defaulted", "blue")
    assert changed["ask-default"].status == "timed_out"
    assert changed["ask-nodefault"].outcome == "no_answer"
    assert (changed["ask-halt"].status, changed["ask-halt"].answer) == ("timed_out", None)
    waiting = changed["ask-wait"]
    assert waiting.active and waiting.reminders == 1 and waiting.deadline == 190.0
    assert store.expire(185.0) == []


def test_deliveries_are_recorded_and_the_first_ok_means_input_required(
    store: RequestStore, backend: StoreBackend
) -> None:
    store.open(request())
    store.deliver("apr-1", "mail", "failed: SMTP refused")
    assert store.get("apr-1").status == "queued"  # type: ignore[union-attr]
    store.deliver("apr-1", "console", "ok")
    got = backend.human_requests().get("apr-1")
    assert got is not None and got.status == "input_required"
    assert got.deliveries == {"mail": "failed: SMTP refused", "console": "ok"}
    with pytest.raises(KeyError):
        store.deliver("apr-9", "console", "ok")


def test_list_filters_by_status_session_and_time_oldest_first(store: RequestStore) -> None:
    for n in range(4):
        store.open(
            request(
                f"apr-{n}",
                arguments={"n": n},
                created_at=100.0 + n,
                session="main" if n % 2 == 0 else "side",
            )
        )
    store.settle("apr-0", answer())
    assert [r.id for r in store.list()] == ["apr-0", "apr-1", "apr-2", "apr-3"]
    assert [r.id for r in store.list(limit=2)] == ["apr-2", "apr-3"]
    assert [r.id for r in store.list(statuses={"queued"})] == ["apr-1", "apr-2", "apr-3"]
    assert [r.id for r in store.list(session="main")] == ["apr-0", "apr-2"]
    assert [r.id for r in store.list(since=102.0)] == ["apr-2", "apr-3"]
    with pytest.raises(ValueError):
        store.list(limit=-1)


def test_open_call_ids_are_the_calls_of_active_requests(store: RequestStore) -> None:
    store.open(request("apr-1"))
    store.open(request("apr-1b", call_ids=("call-again",)))
    store.open(request("apr-2", arguments={"other": 1}))
    store.settle("apr-2", answer())
    store.open(request("apr-3", session="side", arguments={"x": 3}))
    assert store.open_call_ids("main") == {"call-apr-1", "call-again"}


def test_rules_are_listed_live_until_they_expire_or_are_revoked(
    store: RequestStore, backend: StoreBackend
) -> None:
    def rule(rule_id: str, **fields: Any) -> AlwaysRule:
        values: dict[str, Any] = {
            "id": rule_id,
            "tool": "shell",
            "scope": "command",
            "session": "main",
            "command_prefix": ("git", "push"),
            "created_at": 100.0,
            "expires_at": 200.0,
            "created_by": "console:alice",
            "request_id": "apr-1",
        }
        values.update(fields)
        return AlwaysRule(**values)

    store.add_rule(rule("rule-1"))
    store.add_rule(
        rule(
            "rule-2",
            tool="write_file",
            scope="tool",
            session=None,
            command_prefix=None,
            expires_at=300.0,
        )
    )
    other = backend.human_requests()
    assert other.rules() == [
        rule("rule-1"),
        rule(
            "rule-2",
            tool="write_file",
            scope="tool",
            session=None,
            command_prefix=None,
            expires_at=300.0,
        ),
    ]
    assert [r.id for r in other.rules(now=250.0)] == ["rule-2"]
    assert [r.id for r in other.rules(tool="shell")] == ["rule-1"]
    assert other.revoke_rule("rule-2", 260.0) is True
    assert other.revoke_rule("rule-2", 261.0) is False
    assert other.revoke_rule("rule-9", 261.0) is False
    assert store.rules(now=150.0) == [rule("rule-1")]
    [_, revoked] = store.rules()
    assert revoked.revoked_at == 260.0 and not revoked.live(150.0)
    assert dataclasses.replace(revoked, revoked_at=None).live(150.0)


def test_an_ending_is_reported_exactly_once(store: RequestStore, backend: StoreBackend) -> None:
    store.open(request("apr-1", gates_call=True))
    store.open(request("apr-2", arguments={"x": 2}, session="side"))
    store.open(request("apr-3", arguments={"x": 3}))
    assert store.unreported() == []
    assert store.mark_reported("apr-1") is False  # still active
    store.settle("apr-1", answer(at=120.0))
    store.settle("apr-2", answer(at=110.0))
    assert [r.id for r in store.unreported()] == ["apr-2", "apr-1"]
    [mine] = backend.human_requests().unreported(session="main")
    assert mine.id == "apr-1" and mine.gates_call and not mine.reported
    assert store.mark_reported("apr-1") is True
    assert backend.human_requests().mark_reported("apr-1") is False
    assert store.get("apr-1").reported  # type: ignore[union-attr]
    assert [r.id for r in store.unreported()] == ["apr-2"]
    assert store.mark_reported("apr-9") is False


def test_the_next_deadline_is_the_earliest_of_the_active_requests(store: RequestStore) -> None:
    assert store.next_deadline() is None
    store.open(request("apr-1", deadline=170.0))
    store.open(request("apr-2", arguments={"x": 2}, deadline=150.0))
    store.open(request("apr-3", arguments={"x": 3}, deadline=None))
    assert store.next_deadline() == 150.0
    store.settle("apr-2", answer())
    assert store.next_deadline() == 170.0


def test_an_escalation_step_widens_an_active_request_once(
    store: RequestStore, backend: StoreBackend
) -> None:
    store.open(request())
    widened = store.escalate("apr-1", 1, ["mail:lead@example.com", "console:*"])
    assert widened is not None
    assert widened.approvers == ("console:*", "mail:lead@example.com")
    assert escalation_step(widened) == 1
    assert store.escalate("apr-1", 1, ["mail:other@example.com"]) is None  # taken already
    again = backend.human_requests().get("apr-1")  # durable, read by another store
    assert again is not None and again.approvers == widened.approvers
    store.settle("apr-1", answer(by="mail:lead@example.com"))
    assert store.escalate("apr-1", 2, ["mail:boss@example.com"]) is None  # ended
    assert store.escalate("apr-unknown", 1, ["mail:boss@example.com"]) is None
