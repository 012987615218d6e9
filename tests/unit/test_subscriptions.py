"""Subscriptions: which inbound events wake the agent, registered at run time and persisted."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from heron import ToolContext, ToolResult
from heron._support.clock import FakeClock
from heron._support.state import open_db
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.triggers.sqlite_store import SqliteSubscriptionStore
from heron.always_on.triggers.subscriptions import (
    Subscription,
    SubscriptionFilter,
    Subscriptions,
    should_wake,
)
from heron.always_on.triggers.tools import subscription_tools
from heron.tools.definition import Tool, ToolArgumentsError


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    connection = open_db(tmp_path / "state")
    yield connection
    connection.close()


def mail(sender: str, text: str = "hello", **fields: Any) -> BusEvent:
    return BusEvent(
        kind="mail.received",
        source=fields.pop("source", "stranger"),
        channel="mail",
        content=EventContent(text=text, data={"from": sender, "subject": "s"}),
        **fields,
    )


def sub(source: Any = "mail", **rule: Any) -> Subscription:
    return Subscription(
        id="sub-1", session="default", source=source, filter=SubscriptionFilter(**rule),
        created_at=0.0,
    )  # fmt: skip


def test_the_operators_own_traffic_always_wakes_and_outside_traffic_needs_a_subscription() -> None:
    for own in (
        BusEvent(kind="user.input", source="user", channel="cli"),
        BusEvent(kind="timer.trigger", source="system", channel="timer"),
        BusEvent(kind="job.exit", source="tool", channel="async_tool"),
        BusEvent(kind="system.resource_alert", source="system", channel="system"),
    ):
        assert should_wake(own, [])
    assert not should_wake(mail("spam@ads.example"), [])
    webhook = BusEvent(kind="webhook.received", source="system", channel="webhook")
    assert not should_wake(webhook, [])  # an inbound kind, whoever relays it
    assert should_wake(webhook, [sub("webhook")])
    assert should_wake(mail("x@y.example"), [sub("any")])


def test_a_sender_glob_matches_the_address_inside_a_display_name() -> None:
    acme = [sub(sender="*@acme.example")]
    assert should_wake(mail("Bob Smith <BOB@acme.example>"), acme)
    assert should_wake(mail("carol@acme.example"), acme)
    assert not should_wake(mail("mallory@acme.example.evil"), acme)
    assert not should_wake(
        BusEvent(kind="mail.received", source="stranger", channel="mail"), acme
    )  # no sender at all


def test_every_condition_of_a_filter_must_hold() -> None:
    rule = sub(
        kinds=["mail.received"],
        text_regex=r"(?i)\binvoice\b",
        min_urgency="normal",
        origins=["contact"],
    )
    good = mail("a@b.example", "Your INVOICE is attached", source="contact")
    assert rule.matches(good)
    assert not rule.matches(mail("a@b.example", "Your invoices", source="contact"))
    assert not rule.matches(good.model_copy(update={"urgency": "low"}))
    assert not rule.matches(good.model_copy(update={"source": "stranger"}))
    assert not rule.matches(good.model_copy(update={"channel": "im"}))  # source is mail
    assert should_wake(good, [sub(sender="nobody@x.example"), rule])  # any subscription


async def call(tool: Tool, **arguments: Any) -> ToolResult:
    return await tool.execute(tool.validate(arguments), ToolContext(call_id="c", turn_id="t"))


async def test_subscriptions_are_made_by_tools_and_persist_across_store_objects(
    conn: sqlite3.Connection, tmp_path: Path
) -> None:
    store = Subscriptions(SqliteSubscriptionStore(conn), session="main")
    subscribe, unsubscribe, list_subscriptions = subscription_tools(store, FakeClock())
    made = await call(
        subscribe, source="mail", filter={"sender": "*@acme.example"}, note="customer mail"
    )
    assert made.success
    assert made.data["filter"] == {"sender": "*@acme.example"}
    later = open_db(tmp_path / "state")
    try:
        reopened = Subscriptions(SqliteSubscriptionStore(later), session="main")
        [stored] = reopened.list()
        assert stored.id == made.data["subscription_id"] and stored.note == "customer mail"
        assert reopened.should_wake(mail("Ann <ann@acme.example>"))
        assert not reopened.should_wake(mail("ann@other.example"))
        assert Subscriptions(SqliteSubscriptionStore(later), session="other").list() == []
    finally:
        later.close()

    listed = await call(list_subscriptions)
    assert [s["source"] for s in listed.data["subscriptions"]] == ["mail"]
    gone = await call(unsubscribe, subscription_id=made.data["subscription_id"])
    assert gone.success and store.list() == []
    again = await call(unsubscribe, subscription_id=made.data["subscription_id"])
    assert not again.success


async def test_bad_filters_are_refused_with_a_reason(conn: sqlite3.Connection) -> None:
    subscribe = subscription_tools(Subscriptions(SqliteSubscriptionStore(conn)), FakeClock())[0]
    bad_regex = await call(subscribe, source="im", filter={"text_regex": "(unclosed"})
    assert not bad_regex.success and "invalid text_regex" in (bad_regex.error or "")
    bad_kind = await call(subscribe, source="any", filter={"kinds": ["mail.recieved"]})
    assert not bad_kind.success and "unknown event kinds ['mail.recieved']" in (
        bad_kind.error or ""
    )
    with pytest.raises(ToolArgumentsError):
        subscribe.validate({"source": "mail", "filter": {"sendr": "x"}})
    with pytest.raises(ToolArgumentsError):
        subscribe.validate({"source": "carrier-pigeon", "filter": {}})


async def test_a_hostile_text_cannot_make_a_subscription_pattern_run_for_hours(
    conn: sqlite3.Connection,
) -> None:
    # `(\w+\s?)+$` is a reasonable-looking filter; under Python's re a stranger's mail of 40
    # words and a '!' makes it backtrack for days, on the loop that routes every event.
    store = Subscriptions(SqliteSubscriptionStore(conn), session="main")
    subscribe = subscription_tools(store, FakeClock())[0]
    made = await call(subscribe, source="mail", filter={"text_regex": r"^(\w+\s?)+$"})
    assert made.success, made.error
    assert not store.should_wake(mail("x@evil.example", text="word " * 40 + "!"))
    assert store.should_wake(mail("x@evil.example", text="deploy done"))
    lookahead = await call(subscribe, source="mail", filter={"text_regex": "deploy(?= failed)"})
    assert not lookahead.success and "lookahead" in (lookahead.error or "")


def test_a_stored_pattern_that_re2_refuses_wakes_nothing() -> None:
    # Stored before patterns were RE2: it fails closed instead of failing every event.
    legacy = Subscription.model_validate(
        {"id": "sub-1", "session": "main", "source": "mail", "created_at": 0.0,
         "filter": {"text_regex": "deploy(?= failed)"}}
    )  # fmt: skip
    assert not should_wake(mail("ops@acme.example", text="deploy failed"), [legacy])
