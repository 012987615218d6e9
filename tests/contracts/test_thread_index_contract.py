"""`ThreadIndex`: which session each mail belongs to, by Message-ID; the first session
recorded for a Message-ID stays."""

from __future__ import annotations

import pytest

from heron.always_on.channels.mail_inbound import ThreadIndex
from support.stores import StoreBackend


@pytest.fixture
def threads(backend: StoreBackend) -> ThreadIndex:
    return backend.thread_index()


def test_a_recorded_message_names_its_session_through_another_store(
    threads: ThreadIndex, backend: StoreBackend
) -> None:
    threads.record([("<m1@x>", "alpha"), ("<m2@x>", "team/beta")], now=1.0)
    other = backend.thread_index()
    assert other.session_of(["<m1@x>"]) == "alpha"
    assert other.session_of(["<m2@x>"]) == "team/beta"
    assert other.session_of(["<unknown@x>"]) is None
    assert other.session_of([]) is None


def test_the_first_known_message_id_decides(threads: ThreadIndex) -> None:
    threads.record([("<old@x>", "alpha"), ("<new@x>", "beta")], now=1.0)
    assert threads.session_of(["<unknown@x>", "<new@x>", "<old@x>"]) == "beta"
    assert threads.session_of(["<old@x>", "<new@x>"]) == "alpha"


def test_a_message_id_keeps_its_first_session_and_empty_ids_are_skipped(
    threads: ThreadIndex,
) -> None:
    threads.record([("<m@x>", "alpha")], now=1.0)
    threads.record([("<m@x>", "beta"), ("", "gamma")], now=2.0)
    threads.record([], now=3.0)
    assert threads.session_of(["<m@x>"]) == "alpha"
    assert threads.session_of([""]) is None
