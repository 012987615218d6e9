"""Poison messages in the event loop: counted, isolated, quarantined, announced; the agent
goes on with the next event (`heron.always_on.bus.quarantine`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from heron import Agent, FunctionModel
from heron.always_on.bus import loop as loop_module
from heron.always_on.bus.framing import SideAnswer
from heron.always_on.bus.loop import EventDrivenAgent
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.bus.routing import Router, RoutingRule
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.messages import UserMessage
from heron.models.base import ModelRequest
from heron.telemetry.alerts import Alert, AlertManager

BOUND = 10.0


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[SqliteBusStore]:
    store = SqliteBusStore.open(tmp_path)
    yield store
    store.close()


class Recorder:
    def __init__(self) -> None:
        self.alerts: list[Alert] = []

    async def deliver(self, alert: Alert) -> None:
        self.alerts.append(alert)


def event(text: str) -> BusEvent:
    return BusEvent(
        kind="user.input",
        source="user",
        channel="cli",
        session="main",
        content=EventContent(text=text),
    )


def answering(seen: list[str]) -> FunctionModel:
    def answer(request: ModelRequest) -> str:
        last = request.messages[-1]
        assert isinstance(last, UserMessage)
        seen.append(last.content)
        return "ok"

    return FunctionModel(answer)


def agent(
    bus: SqliteBusStore, seen: list[str], alerts: AlertManager | None = None, **kw: object
) -> EventDrivenAgent:
    return EventDrivenAgent(
        Agent(model=answering(seen), autonomy="full", alerts=alerts),
        bus,
        bus.sessions,
        session="main",
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def poisoned_framing(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Framing raises for any batch holding an event whose text is `poison`."""
    real = loop_module.frame_batch
    failures: list[int] = []

    def frame(events: Sequence[BusEvent], sides: Sequence[SideAnswer] = ()) -> UserMessage:
        if any(e.content.text == "poison" for e in events):
            failures.append(len(events))
            raise ValueError("cannot frame this payload")
        return real(events, sides)

    monkeypatch.setattr(loop_module, "frame_batch", frame)
    return failures


async def test_a_poison_event_is_quarantined_announced_and_the_others_go_through(
    bus: SqliteBusStore, poisoned_framing: list[int]
) -> None:
    seen: list[str] = []
    recorder = Recorder()
    alerts = AlertManager([recorder])
    eda = agent(bus, seen, alerts)
    first, poison, last = event("first"), event("poison"), event("last")
    await eda.publish_many([first, poison, last])

    await asyncio.wait_for(eda.run_until_idle(), BOUND)
    await alerts.flush()

    # The whole batch failed once; then one event at a time: the poison failed twice more.
    assert poisoned_framing == [3, 1, 1]
    assert seen[:2] == ["first", "last"]
    assert "An event could not be processed and was set aside: user.input" in seen[2]
    assert f"{poison.id}" in seen[2] and "it failed 3 times" in seen[2]
    assert "poison" not in seen[2].split("set aside")[1].split("(")[0]
    [letter] = await bus.dead_letters()
    assert (letter.event_id, letter.attempts) == (poison.id, 3)
    assert letter.error == "ValueError: cannot frame this payload"
    assert await bus.pending("main") == []
    [alert] = recorder.alerts
    assert (alert.rule, alert.severity, alert.subject) == ("dead_letter", "critical", "user.input")
    kinds = [s.event.kind for s in await bus.events(session="main")]
    assert kinds == ["user.input"] * 3 + ["system.dead_letter"]


async def test_a_restarted_loop_goes_on_counting_and_announces_once(
    bus: SqliteBusStore, poisoned_framing: list[int]
) -> None:
    poison = event("poison")
    seen: list[str] = []
    first = agent(bus, seen, max_attempts=2)
    await first.publish(poison)
    # One failed attempt, then the process "dies" (the loop is dropped without a clean stop).
    assert await first._step() is True
    assert poisoned_framing == [1]
    await first.aclose()

    second = agent(bus, seen, max_attempts=2)
    await asyncio.wait_for(second.run_until_idle(), BOUND)
    assert poisoned_framing == [1, 1]
    assert [d.event_id for d in await bus.dead_letters()] == [poison.id]
    await second.aclose()

    third = agent(bus, seen, max_attempts=2)
    await asyncio.wait_for(third.run_until_idle(), BOUND)
    assert poisoned_framing == [1, 1]  # never tried again
    assert len([s for s in seen if "set aside" in s]) == 1  # announced once
    await third.aclose()


async def test_a_routing_rule_that_raises_on_an_event_makes_it_poison(
    bus: SqliteBusStore,
) -> None:
    def picky(e: BusEvent) -> bool:
        if e.content.text == "poison":
            raise KeyError("no such field")
        return False

    seen: list[str] = []
    eda = agent(bus, seen, router=Router([RoutingRule(strategy="cancel", when=picky)]))
    await eda.publish_many([event("poison"), event("fine")])
    await asyncio.wait_for(eda.run_until_idle(), BOUND)
    assert seen[0] == "fine"
    [letter] = await bus.dead_letters()
    assert letter.error == "KeyError: 'no such field'"
    assert await bus.pending("main") == []
