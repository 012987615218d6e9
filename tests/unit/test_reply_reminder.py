"""In serve, assistant text is private: an event needing a reply whose turn sends no message
gets exactly one reminder turn; a turn that sent one, or an event needing none, gets none."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from heron import Agent, ScriptedModel, tool
from heron.always_on.bus.loop import EventDrivenAgent
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.messages import UserMessage
from support.engine import call, calls_turn

REPLY_TOOLS = frozenset({"send_message"})


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[SqliteBusStore]:
    store = SqliteBusStore.open(tmp_path)
    yield store
    store.close()


@tool(name="send_message")
async def send_message(text: str) -> str:
    """Send a message."""
    return "sent"


def chat(text: str, *, needs_reply: bool = True) -> BusEvent:
    return BusEvent(
        kind="im.message",
        source="user",
        channel="im",
        session="main",
        content=EventContent(text=text, needs_reply=needs_reply),
    )


def loop(bus: SqliteBusStore, turns: list[object]) -> tuple[EventDrivenAgent, ScriptedModel]:
    model = ScriptedModel([{"text": t} if isinstance(t, str) else t for t in turns])
    agent = Agent(model=model, tools=[send_message], autonomy="full")
    eda = EventDrivenAgent(agent, bus, bus.sessions, session="main", reply_tools=REPLY_TOOLS)
    return eda, model


def reminders(eda: EventDrivenAgent) -> list[UserMessage]:
    return [m for m in eda.history if isinstance(m, UserMessage) and m.source == "runtime"]


async def test_a_private_answer_gets_one_reminder_turn_and_no_second(
    bus: SqliteBusStore,
) -> None:
    eda, _ = loop(bus, ["Yes, it is deployed.", "Still only in my notes."])
    await eda.publish(chat("is it deployed?"))
    await eda.run_until_idle()
    [reminder] = reminders(eda)
    assert "need a reply" in reminder.content and "send_message" in reminder.content
    assert len(eda.outcomes) == 2


async def test_a_turn_that_sent_a_message_or_an_event_needing_none_gets_no_reminder(
    bus: SqliteBusStore,
) -> None:
    eda, _ = loop(
        bus,
        [calls_turn(call("send_message", text="Yes, deployed.")), "Replied.", "Noted."],
    )
    await eda.publish(chat("is it deployed?"))
    await eda.run_until_idle()
    await eda.publish(chat("fyi: lunch at 1", needs_reply=False))
    await eda.run_until_idle()
    assert reminders(eda) == [] and len(eda.outcomes) == 2
