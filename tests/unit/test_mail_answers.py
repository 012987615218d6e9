"""Mail answers to a request: the first line outside the quoted text, reply tokens per
approver (single use, expiring), the trusted-server check a high-risk request needs, and a
question's answer checked before its token is spent."""

from __future__ import annotations

from email import message_from_string, policy
from email.message import EmailMessage
from pathlib import Path

import pytest

from heron._support.clock import FakeClock
from heron.collaboration.mail_auth import check_authentication
from heron.collaboration.replies import (
    MailAnswer,
    MailRefusal,
    first_reply_line,
    parse_decision,
    read_mail_answer,
    reply_message_id,
)
from heron.collaboration.tokens import MessageKeyStore, TokenSigner
from heron.humans.store import HumanRequest
from heron.safety.sqlite_idempotency import SqliteIdempotencyLedger


def request(kind: str = "approval", **fields: object) -> HumanRequest:
    base: dict[str, object] = {
        "id": "apr-1",
        "kind": kind,
        "session": "main",
        "call_ids": ("c1",),
        "tool": "pay",
        "arguments": {},
        "display_arguments": {},
        "digest": "d",
        "question": "May heron pay?",
        "approvers": ("mail:ops@example.com",),
        "created_at": 0.0,
    }
    return HumanRequest(**{**base, **fields})  # type: ignore[arg-type]


def mail(text: str, *, sender: str = "ops@example.com", headers: str = "") -> EmailMessage:
    parsed = message_from_string(
        f"From: Ops <{sender}>\nTo: heron@example.com\nSubject: Re: approve?\n{headers}\n{text}",
        policy=policy.default,
    )
    assert isinstance(parsed, EmailMessage)
    return parsed


def test_only_the_first_line_outside_the_quote_counts() -> None:
    assert first_reply_line("\n  approve: fine by me \n\nOn Mon, Ana wrote:\n> deny") == (
        "approve: fine by me"
    )
    assert first_reply_line("> approve\n> old\ndeny: not on Fridays") == "deny: not on Fridays"
    assert first_reply_line("On Tue, 1 Dec 2026, heron wrote:\n> approve") is None
    assert first_reply_line("-- \nOps team") is None
    assert first_reply_line("-----Original Message-----\napprove") is None


@pytest.mark.parametrize(
    ("line", "kind", "reason"),
    [
        ("approve", "yes", None),
        ("Approve: looks right", "yes", "looks right"),
        ("deny: not on Fridays", "no", "not on Fridays"),
        ("NO - wrong recipient", "no", "wrong recipient"),
    ],
)
def test_decisions_are_read_in_any_case_with_a_reason(
    line: str, kind: str, reason: str | None
) -> None:
    decision = parse_decision(line)
    assert decision is not None and (decision.kind, decision.reason) == (kind, reason)


def test_other_first_lines_are_no_decision() -> None:
    assert parse_decision("approvers are busy") is None and parse_decision("maybe") is None


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def signer(tmp_path: Path, clock: FakeClock) -> TokenSigner:
    return TokenSigner(MessageKeyStore(tmp_path), clock=clock)


@pytest.fixture
def ledger(tmp_path: Path) -> SqliteIdempotencyLedger:
    return SqliteIdempotencyLedger(tmp_path)


def reply(
    signer: TokenSigner, text: str, *, approver: str = "mail:ops@example.com", **kw: str
) -> EmailMessage:
    token = signer.mint("reply", ("apr-1", approver), ttl_s=3600)
    msgid = reply_message_id(token, "example.com")
    headers = f"In-Reply-To: {msgid}\nReferences: <root@x> {msgid}\n" + kw.pop("headers", "")
    return mail(text, headers=headers, **kw)


def test_an_approvers_reply_answers_once_and_a_replay_is_refused(
    signer: TokenSigner, ledger: SqliteIdempotencyLedger
) -> None:
    message = reply(signer, "approve: go ahead\n\nOn Mon heron wrote:\n> deny")
    answer = read_mail_answer(message, signer=signer, ledger=ledger)
    assert isinstance(answer, MailAnswer)
    assert (answer.request_id, answer.approver, answer.decision.kind, answer.decision.reason) == (
        "apr-1",
        "mail:ops@example.com",
        "yes",
        "go ahead",
    )
    again = read_mail_answer(message, signer=signer, ledger=ledger)
    assert isinstance(again, MailRefusal) and "already used" in again.reason


def test_forged_late_foreign_and_unreadable_replies_are_refused_with_a_reason(
    signer: TokenSigner, ledger: SqliteIdempotencyLedger, clock: FakeClock, tmp_path: Path
) -> None:
    forger = TokenSigner(MessageKeyStore(tmp_path / "forger"), clock=clock)
    forged = read_mail_answer(reply(forger, "approve"), signer=signer, ledger=ledger)
    assert isinstance(forged, MailRefusal) and "does not hold" in forged.reason
    foreign = read_mail_answer(
        reply(signer, "approve", sender="mallory@example.com"), signer=signer, ledger=ledger
    )
    assert isinstance(foreign, MailRefusal) and "only ops@example.com may answer" in foreign.reason
    unclear = read_mail_answer(reply(signer, "sounds good"), signer=signer, ledger=ledger)
    assert isinstance(unclear, MailRefusal) and "first line" in unclear.reason
    late = reply(signer, "approve")
    clock.advance(3601)
    refused = read_mail_answer(late, signer=signer, ledger=ledger)
    assert isinstance(refused, MailRefusal) and "expired" in refused.reason
    assert read_mail_answer(mail("approve"), signer=signer, ledger=ledger) is None


def test_a_high_risk_call_needs_a_trusted_servers_dkim_verdict(
    signer: TokenSigner, ledger: SqliteIdempotencyLedger
) -> None:
    trusted = ["mx.example.com"]
    plain = reply(signer, "approve")
    risky = request(risk="high")
    refused = read_mail_answer(
        plain,
        signer=signer,
        ledger=ledger,
        trusted_authserv_ids=trusted,
        request_of=lambda _: risky,
    )
    assert isinstance(refused, MailRefusal) and "authenticated" in refused.reason
    signed = reply(
        signer,
        "approve",
        headers=(
            "Authentication-Results: mx.example.com; dkim=pass header.d=example.com header.s=s1\n"
        ),
    )
    answer = read_mail_answer(
        signed,
        signer=signer,
        ledger=ledger,
        trusted_authserv_ids=trusted,
        request_of=lambda _: risky,
    )
    assert isinstance(answer, MailAnswer) and answer.authenticated


def test_a_question_is_answered_by_the_first_line_and_an_unfit_answer_spends_nothing(
    signer: TokenSigner, ledger: SqliteIdempotencyLedger, clock: FakeClock
) -> None:
    asked = request("question", question="Which room?", options=("K1", "K2"))
    checked: list[object] = []

    def check(_request: HumanRequest, value: object) -> str | None:
        checked.append(value)
        return None if value in asked.options else "the answer must be one of 'K1', 'K2'"

    def read(text: str) -> MailAnswer | MailRefusal | None:
        message = reply(signer, f"{text}\n\nOn Mon heron wrote:\n> Which room?")
        return read_mail_answer(
            message, signer=signer, ledger=ledger, request_of=lambda _: asked, check=check
        )

    unfit = read("K7")
    answered = read("<K2>")
    replayed = read("K2")
    structured = request("question", schema={"type": "object"})
    clock.advance(1)  # another mail: another token
    as_json = read_mail_answer(
        reply(signer, '{"room": "K1"}'),
        signer=signer,
        ledger=ledger,
        request_of=lambda _: structured,
    )

    assert isinstance(unfit, MailRefusal) and "one of 'K1', 'K2'" in unfit.reason
    # The refused reply did not spend the token: the approver's next reply to it counts.
    assert isinstance(answered, MailAnswer) and answered.decision is None
    assert answered.value == "K2" and checked == ["K7", "K2", "K2"]
    assert isinstance(replayed, MailRefusal) and "already used" in replayed.reason
    assert isinstance(as_json, MailAnswer) and as_json.value == {"room": "K1"}


def test_only_a_trusted_authserv_id_aligned_with_the_from_domain_passes() -> None:
    def verdict(header: str, sender: str = "ops@example.com") -> bool:
        return check_authentication(
            mail("x", sender=sender, headers=f"Authentication-Results: {header}\n"),
            ["mx.example.com"],
        ).passed

    assert verdict("mx.example.com; dkim=pass header.d=example.com")
    assert verdict("mx.example.com; dmarc=pass (p=reject) header.from=example.com")
    assert verdict("mx.example.com; dkim=pass header.d=example.com", sender="a@eu.example.com")
    assert not verdict("evil.example.net; dkim=pass header.d=example.com")
    assert not verdict("mx.example.com; dkim=pass header.d=attacker.example")
    assert not verdict("mx.example.com; dkim=fail header.d=example.com")
    assert not check_authentication(mail("x"), []).passed
