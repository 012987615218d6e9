"""`SubscriptionStore`: subscriptions per session with their filters, removal by id."""

from __future__ import annotations

import pytest

from heron.always_on.triggers.subscriptions import (
    Subscription,
    SubscriptionFilter,
    SubscriptionStore,
)
from support.stores import StoreBackend


@pytest.fixture
def store(backend: StoreBackend) -> SubscriptionStore:
    return backend.subscriptions()


def sub(
    sub_id: str, *, session: str = "main", created_at: float = 1.0, **rule: object
) -> Subscription:
    return Subscription(
        id=sub_id,
        session=session,
        source="mail",
        filter=SubscriptionFilter.model_validate(rule),
        note=f"note {sub_id}",
        created_at=created_at,
    )


def test_subscriptions_read_back_with_their_filters_through_another_store(
    store: SubscriptionStore, backend: StoreBackend
) -> None:
    full = sub(
        "sub-b",
        created_at=2.0,
        kinds=["mail.received"],
        sender="*@acme.example",
        text_regex="(?i)invoice",
        min_urgency="normal",
        origins=["contact", "stranger"],
    )
    store.insert(full)
    store.insert(sub("sub-a", created_at=1.0))
    store.insert(sub("sub-x", session="other"))
    assert backend.subscriptions().list("main") == [sub("sub-a", created_at=1.0), full]
    assert store.list("nobody") == []


def test_remove_deletes_only_that_sessions_subscription(store: SubscriptionStore) -> None:
    store.insert(sub("sub-1"))
    store.insert(sub("sub-2", session="other"))
    assert store.remove("main", "sub-2") is False
    assert store.remove("main", "sub-1") is True
    assert store.remove("main", "sub-1") is False
    assert store.list("main") == []
    assert [s.id for s in store.list("other")] == ["sub-2"]
