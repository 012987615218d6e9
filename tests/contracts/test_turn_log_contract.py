"""`TurnLog`: the gateway's per-session turn events, in order, durable, with one epoch per
database, whose records can join a history append's transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from heron.gateway.app import open_turn_log
from heron.gateway.eventlog import TurnLog
from heron.messages import AssistantMessage, Message
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


def test_records_written_inside_a_history_append_commit_or_roll_back_with_it(
    backend: StoreBackend,
) -> None:
    sessions = backend.sessions()
    log = open_turn_log(sessions)
    records = [("text", {"type": "text", "text": "Let me look."})]

    def joined(conn: Any, session: str, messages: Sequence[Message]) -> None:
        log.append_in(conn, session, records, 1.0)

    def fail(conn: Any, session: str, messages: Sequence[Message]) -> None:
        raise OSError("disk full")

    sessions.companions.extend([joined, fail])
    with pytest.raises(OSError, match="disk full"):
        sessions.append("a", [AssistantMessage(text="Let me look.")])
    other = backend.turn_log()
    assert sessions.load("a") == [] and other.last("a") == 0
    sessions.companions.remove(fail)
    head = sessions.append("a", [AssistantMessage(text="Let me look.")])
    assert sessions.head("a") == head
    assert [(e.type, e.body) for e in other.after("a", 0, limit=10)] == records
    log.close()
