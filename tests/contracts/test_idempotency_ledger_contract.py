"""`IdempotencyLedger`: a key is claimed once, keeps its first result until it expires, and a
confirmation token is used once."""

from __future__ import annotations

import pytest

from heron.safety.idempotency import IdempotencyLedger, KeyRecord
from support.stores import StoreBackend

NOW = 1_700_000_000.0


@pytest.fixture
def ledger(backend: StoreBackend) -> IdempotencyLedger:
    return backend.idempotency()


def test_the_first_claim_wins_and_later_ones_see_the_running_record(
    ledger: IdempotencyLedger, backend: StoreBackend
) -> None:
    assert ledger.claim("pay", "inv-7", "d1", now=NOW, expires=NOW + 60) is None
    running = KeyRecord(arguments_sha256="d1", state="running", result=None, created=NOW)
    assert backend.idempotency().claim("pay", "inv-7", "d2", now=NOW + 1, expires=NOW + 61) == (
        running
    )
    assert ledger.get("pay", "inv-7", now=NOW + 1) == running
    # Keys are per tool.
    assert ledger.claim("refund", "inv-7", "d1", now=NOW, expires=NOW + 60) is None


def test_a_completed_key_keeps_its_result(ledger: IdempotencyLedger, backend: StoreBackend) -> None:
    ledger.claim("pay", "inv-7", "d1", now=NOW, expires=NOW + 60)
    ledger.complete("pay", "inv-7", '{"success": true, "output": "paid"}')
    done = KeyRecord(
        arguments_sha256="d1",
        state="done",
        result='{"success": true, "output": "paid"}',
        created=NOW,
    )
    assert backend.idempotency().get("pay", "inv-7", now=NOW + 30) == done
    assert ledger.claim("pay", "inv-7", "d1", now=NOW + 30, expires=NOW + 90) == done


def test_a_released_key_can_be_claimed_again(ledger: IdempotencyLedger) -> None:
    ledger.claim("pay", "inv-7", "d1", now=NOW, expires=NOW + 60)
    ledger.release("pay", "inv-7")
    assert ledger.get("pay", "inv-7", now=NOW) is None
    assert ledger.claim("pay", "inv-7", "d2", now=NOW + 1, expires=NOW + 61) is None
    assert ledger.get("pay", "inv-7", now=NOW + 1) == KeyRecord(
        arguments_sha256="d2", state="running", result=None, created=NOW + 1
    )


def test_an_expired_key_is_gone_and_its_claim_replaced(ledger: IdempotencyLedger) -> None:
    ledger.claim("pay", "inv-7", "d1", now=NOW, expires=NOW + 60)
    ledger.complete("pay", "inv-7", "{}")
    assert ledger.get("pay", "inv-7", now=NOW + 60) is None
    assert ledger.claim("pay", "inv-7", "d2", now=NOW + 60, expires=NOW + 120) is None
    record = ledger.get("pay", "inv-7", now=NOW + 61)
    assert record is not None and (record.arguments_sha256, record.state) == ("d2", "running")


def test_a_token_is_used_once(ledger: IdempotencyLedger, backend: StoreBackend) -> None:
    assert ledger.use_token("n1", "pay", NOW + 600) is True
    assert backend.idempotency().use_token("n1", "pay", NOW + 600) is False
    assert ledger.use_token("n2", "pay", NOW + 600) is True


def test_purge_forgets_expired_keys_and_tokens(ledger: IdempotencyLedger) -> None:
    ledger.claim("pay", "old", "d", now=NOW, expires=NOW + 10)
    ledger.claim("pay", "new", "d", now=NOW, expires=NOW + 100)
    ledger.use_token("t-old", "pay", NOW + 10)
    ledger.use_token("t-new", "pay", NOW + 100)
    assert ledger.purge_expired(NOW + 10) == 2
    assert ledger.purge_expired(NOW + 10) == 0
    assert ledger.get("pay", "new", now=NOW + 10) is not None
    # A purged token is forgotten; one not expired is still used.
    assert ledger.use_token("t-old", "pay", NOW + 10) is True
    assert ledger.use_token("t-new", "pay", NOW + 100) is False
