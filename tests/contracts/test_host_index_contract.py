"""`HostIndex`: the sessions each server hosts, remembered once each, oldest first, per
server."""

from __future__ import annotations

import pytest

from heron.always_on.sessions import HostIndex
from support.stores import StoreBackend


@pytest.fixture
def index(backend: StoreBackend) -> HostIndex:
    return backend.host_index()


def test_a_session_is_added_once_and_read_back_by_another_store(
    index: HostIndex, backend: StoreBackend
) -> None:
    assert index.add("default", "default", now=10.0) is True
    assert index.add("default", "alpha", now=11.0) is True
    assert index.add("default", "alpha", now=12.0) is False
    assert backend.host_index().sessions("default") == ["default", "alpha"]


def test_sessions_are_oldest_first_and_kept_per_server(index: HostIndex) -> None:
    index.add("main", "zeta", now=1.0)
    index.add("main", "team/beta", now=2.0)
    index.add("main", "alpha", now=2.0)
    index.add("other", "alpha", now=0.5)
    # Oldest first; sessions first seen at the same moment by name.
    assert index.sessions("main") == ["zeta", "alpha", "team/beta"]
    assert index.sessions("other") == ["alpha"]
    assert index.sessions("nobody") == []


def test_touch_records_activity_without_changing_the_order(
    index: HostIndex, backend: StoreBackend
) -> None:
    index.add("main", "alpha", now=1.0)
    index.add("main", "beta", now=2.0)
    index.touch("main", "alpha", now=50.0)
    index.touch("main", "unknown", now=60.0)  # nothing to record: no error, nothing added
    assert backend.host_index().sessions("main") == ["alpha", "beta"]
