"""`TurnLog`: the gateway's per-session turn events, in order, durable, with one epoch per
database."""

from __future__ import annotations

import pytest

from heron.gateway.eventlog import TurnLog
from support.stores import StoreBackend


@pytest.fixture
def log(backend: StoreBackend) -> TurnLog:
    return backend.turn_log()


def test_records_are_read_back_in_order_per_session_by_another_store(
    log: TurnLog, backend: StoreBackend
) -> None:
    first = log.append("a", [("text", {"text": "hi"}), ("final", {"text": "done"})], 1.0)
    log.append("b", [("final", {"text": "other"})], 2.0)
    last = log.append("a", [("tool_call", {"id": "c1"})], 3.0)
    other = backend.turn_log()
    got = other.after("a", 0, limit=10)
    assert [(e.type, e.body, e.at) for e in got] == [
        ("text", {"text": "hi"}, 1.0),
        ("final", {"text": "done"}, 1.0),
        ("tool_call", {"id": "c1"}, 3.0),
    ]
    assert [e.seq for e in got] == sorted(e.seq for e in got) and got[1].seq == first
    assert other.last("a") == last and other.last("nobody") == 0
    assert other.epoch == log.epoch


def test_after_pages_from_a_sequence_and_keeps_the_limit(log: TurnLog) -> None:
    seqs = [log.append("a", [("final", {"n": i})], float(i)) for i in range(5)]
    page = log.after("a", seqs[1], limit=2)
    assert [e.body["n"] for e in page] == [2, 3]
    assert log.after("a", seqs[-1], limit=10) == []
