"""`MonitorStore`: shell monitors per session, their handled offset and their end."""

from __future__ import annotations

import pytest

from heron.always_on.triggers.monitor import MonitorRecord, MonitorStore
from support.stores import StoreBackend


@pytest.fixture
def store(backend: StoreBackend) -> MonitorStore:
    return backend.monitors()


def monitor(monitor_id: str, *, session: str = "main", created_at: float = 1.0) -> MonitorRecord:
    return MonitorRecord(
        id=monitor_id,
        job_id=f"job-{monitor_id}",
        session=session,
        call_id=None,
        pattern=r"ERROR|WARN",
        coalesce_s=2.0,
        max_events_per_min=6,
        offset=0,
        state="active",
        created_at=created_at,
    )


def test_monitors_read_back_oldest_first_through_another_store(
    store: MonitorStore, backend: StoreBackend
) -> None:
    store.insert(monitor("mon-b", created_at=2.0))
    store.insert(monitor("mon-a", created_at=1.0))
    store.insert(monitor("mon-x", session="other"))
    assert backend.monitors().monitors("main") == [
        monitor("mon-a", created_at=1.0),
        monitor("mon-b", created_at=2.0),
    ]
    assert store.monitors("nobody") == []


def test_update_records_the_offset_and_done_ends_the_monitor(store: MonitorStore) -> None:
    store.insert(monitor("mon-1"))
    store.insert(monitor("mon-2"))
    store.update("mon-1", offset=120)
    [first, second] = store.monitors("main")
    assert (first.offset, first.state) == (120, "active")
    store.update("mon-1", offset=300, done=True)
    assert [m.id for m in store.monitors("main")] == ["mon-2"]
    [ended, _] = store.monitors("main", active_only=False)
    assert (ended.id, ended.offset, ended.state) == ("mon-1", 300, "done")
    # An update without `done` leaves an ended monitor ended.
    store.update("mon-1", offset=310)
    assert store.monitors("main", active_only=False)[0].state == "done"
    assert second.offset == 0
