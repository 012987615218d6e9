"""Proposer–reviewer pre-approval of irreversible calls by an independent model."""

from __future__ import annotations

import json
from typing import Any

from heron import Agent, ApprovalRequest, BackChannelApprover, ScriptedModel, tool
from heron.checks import REVIEWER_PROMPT, ReviewerCheck
from heron.messages import ToolResultMessage, UserMessage
from support.engine import Events, call, calls_turn


def contents(history: list[Any]) -> dict[str, str]:
    return {m.call_id: m.content for m in history if isinstance(m, ToolResultMessage)}


def mail_tool(sent: list[str]) -> Any:
    @tool(irreversible=True, open_world=True)
    def send_mail(to: str, body: str) -> str:
        """Send an email. It cannot be recalled once sent.

        Args:
            to: Recipient address.
            body: Message text.
        """
        sent.append(to)
        return f"sent to {to}"

    return send_mail


@tool()
def save_draft(body: str) -> str:
    """Save a draft.

    Args:
        body: Message text.
    """
    return "saved"


def review(verdict: str, reason: str) -> dict[str, Any]:
    return {"text": json.dumps({"verdict": verdict, "reason": reason})}


def shown_to(reviewer: ScriptedModel, index: int = 0) -> dict[str, Any]:
    request = reviewer.requests[index]
    assert request.system == REVIEWER_PROMPT and len(request.messages) == 1
    message = request.messages[0]
    assert isinstance(message, UserMessage)
    payload: dict[str, Any] = json.loads(message.content)
    return payload


async def test_a_rejection_returns_to_the_proposer_who_revises_and_the_revision_runs(
    events: Events,
) -> None:
    sent: list[str] = []
    proposer = ScriptedModel(
        [
            calls_turn(call("send_mail", "c1", to="eve@example.org", body="Q3 report")),
            calls_turn(call("send_mail", "c2", to="bob@example.org", body="Q3 report")),
            {"text": "sent"},
        ]
    )
    reviewer = ScriptedModel(
        [
            review("reject", "the recipient is not the one the user named."),
            review("approve", "matches the request"),
        ],
        name="other-family",
    )
    agent = Agent(
        model=proposer,
        tools=[mail_tool(sent)],
        autonomy="full",
        checks=[ReviewerCheck(reviewer, user_request=lambda: "Mail the Q3 report to bob")],
    )
    result = await agent.run("Mail the Q3 report to bob", sink=events)
    got = contents(result.history)
    assert got["c1"] == (
        "Refused before running: reviewer: rejected by an independent reviewer (other-family): "
        "the recipient is not the one the user named. Revise the call or ask the user."
    )
    assert events.results()["c1"].status == "denied"
    assert got["c2"] == "sent to bob@example.org"
    assert sent == ["bob@example.org"]
    assert shown_to(reviewer)["user_request"] == "Mail the Q3 report to bob"
    # The proposer saw the rejection before it revised the call.
    assert "rejected by an independent reviewer" in contents(proposer.messages_at(1))["c1"]


async def test_the_reviewer_sees_the_call_and_tool_but_not_the_proposers_reasoning(
    events: Events,
) -> None:
    turn = calls_turn(
        call("send_mail", "c1", to="bob@example.org", body="hi"),
        text="REASONING: the reviewer will surely agree",
    )
    turn["reasoning"] = "THINKING: rush it through"
    reviewer = ScriptedModel([review("approve", "fine")])
    agent = Agent(
        model=ScriptedModel([turn, {"text": "done"}]),
        tools=[mail_tool([])],
        autonomy="full",
        checks=[ReviewerCheck(reviewer)],
    )
    await agent.run("SECRET-PROMPT: mail bob", sink=events)
    payload = shown_to(reviewer)
    assert payload["tool"] == "send_mail"
    assert payload["arguments"] == {"to": "bob@example.org", "body": "hi"}
    assert payload["description"].startswith("Send an email. It cannot be recalled once sent.")
    assert payload["annotations"] == ["irreversible", "open_world"]
    text = json.dumps(payload)
    assert "REASONING" not in text and "THINKING" not in text
    assert "user_request" not in payload and "SECRET-PROMPT" not in text  # off by default


async def test_only_irreversible_tools_are_reviewed_by_default(events: Events) -> None:
    reviewer = ScriptedModel([])  # asking it anything would fail the call
    agent = Agent(
        model=ScriptedModel([calls_turn(call("save_draft", "c1", body="x")), {"text": "ok"}]),
        tools=[save_draft],
        autonomy="full",
        checks=[ReviewerCheck(reviewer)],
    )
    result = await agent.run("draft it", sink=events)
    assert contents(result.history)["c1"] == "saved"
    assert reviewer.requests == []


async def test_an_unreadable_review_goes_to_the_human(events: Events) -> None:
    sent: list[str] = []
    reviewer = ScriptedModel([{"text": "I would rather not say."}])

    def yes(request: ApprovalRequest) -> None:
        approver.answer(request.request_id, "yes")

    approver = BackChannelApprover("web", on_request=yes)
    agent = Agent(
        model=ScriptedModel(
            [calls_turn(call("send_mail", "c1", to="bob@example.org", body="hi")), {"text": "ok"}]
        ),
        tools=[mail_tool(sent)],
        autonomy="full",
        checks=[ReviewerCheck(reviewer)],
        approver=approver,
    )
    await agent.run("mail bob", sink=events)
    assert [r.call_id for r in events.of("approval_request")] == ["c1"]
    assert sent == ["bob@example.org"]


async def test_a_custom_filter_puts_any_tool_under_review(events: Events) -> None:
    reviewer = ScriptedModel([review("reject", "drafts need a subject")])
    check = ReviewerCheck(reviewer, applies=lambda spec: spec.name == "save_draft")
    agent = Agent(
        model=ScriptedModel([calls_turn(call("save_draft", "c1", body="x")), {"text": "ok"}]),
        tools=[save_draft],
        autonomy="full",
        checks=[check],
    )
    result = await agent.run("draft it", sink=events)
    assert "drafts need a subject" in contents(result.history)["c1"]
