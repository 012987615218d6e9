"""`KeyStore`: signing keys saved once and shared by every store object of one back end (every
worker of a shared store): a receipt signed through one verifies with the key another loads, a
decision signed through one verifies through another, a message token minted through one is
redeemed through another; each kind of key apart; a key is never replaced."""

from __future__ import annotations

import pytest

from heron.collaboration.tokens import TokenSigner
from heron.humans.signing import DecisionSigner, verify_decision
from heron.humans.store import HumanRequest
from heron.turn.receipts import (
    KeyIdTaken,
    ReceiptKey,
    ReceiptScope,
    current_key,
    parse_receipt,
    verify_receipt,
)
from support.stores import StoreBackend


def test_a_receipt_signed_through_one_store_verifies_with_the_key_another_loads(
    backend: StoreBackend,
) -> None:
    signer = ReceiptScope("runtime", store=backend.keys("receipt")).signer()
    receipt = signer.sign(tool="shell", arguments={"command": "ls"}, output="a\nb\n")
    parsed = parse_receipt(receipt)
    assert parsed is not None
    key = backend.keys("receipt").load(parsed[0])
    assert key is not None
    assert verify_receipt(
        receipt, key=key, tool="shell", arguments={"command": "ls"}, output="a\nb\n"
    )
    assert not verify_receipt(
        receipt, key=key, tool="shell", arguments={"command": "ls"}, output=""
    )
    # Each kind apart: the receipt key is no decision key.
    assert backend.keys("decision").load(parsed[0]) is None


def test_every_store_signs_with_the_newest_key_and_a_saved_key_is_never_replaced(
    backend: StoreBackend,
) -> None:
    first, second = backend.keys("message"), backend.keys("message")
    assert first.newest() is None
    key = current_key(first)
    assert current_key(second) == key
    first.save(key)  # the same key again: nothing happens
    with pytest.raises(KeyIdTaken):
        second.save(ReceiptKey(key_id=key.key_id, secret=b"\x01" * 32))
    assert second.load(key.key_id) == key


def test_a_message_token_minted_through_one_store_is_redeemed_through_another(
    backend: StoreBackend,
) -> None:
    token = TokenSigner(backend.keys("message")).mint("answer", ("msg-1", "yes"), ttl_s=600)
    claim = TokenSigner(backend.keys("message")).verify(token, "answer")
    assert claim.parts == ("msg-1", "yes")


def test_a_decision_signed_through_one_store_verifies_through_another(
    backend: StoreBackend,
) -> None:
    signature = DecisionSigner(backend.keys("decision")).sign(
        request_id="req-1",
        arguments={"command": "deploy"},
        decision={"answer": "ship it"},
        approver="ana",
        epoch_ms=1_700_000_000_000,
    )
    request = HumanRequest(
        id="req-1",
        kind="question",
        session="ops",
        call_ids=("call-1",),
        tool="ask_human",
        arguments={"command": "deploy"},
        display_arguments={"command": "deploy"},
        digest="d",
        question="Ship?",
        approvers=("console:ana",),
        created_at=1_699_999_999.0,
        status="completed",
        outcome="answered",
        answer="ship it",
        answered_by="ana",
        answered_at=1_700_000_000.0,
        signature=signature,
    )
    assert verify_decision(request, backend.keys("decision")).valid
