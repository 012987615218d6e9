"""`SessionWriter`: the one writer of a stored session, and its index of tool calls."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from heron import Agent, ScriptedModel, tool
from heron.messages import AssistantMessage, ToolCallPart, ToolResultMessage, UserMessage
from heron.sessions import SessionStore, SqliteSessionStore
from heron.sessions.writer import SessionWriter
from support.engine import call, calls_turn


@tool(read_only=True)
def tick() -> str:
    """Tick once."""
    return "tick"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SessionStore]:
    sessions = SqliteSessionStore.open(tmp_path)
    yield sessions
    sessions.close()


def round_of(*ids: str) -> AssistantMessage:
    return AssistantMessage(
        tool_calls=tuple(ToolCallPart(id=i, name="tick", arguments={}) for i in ids)
    )


def result(call_id: str) -> ToolResultMessage:
    return ToolResultMessage(call_id=call_id, name="tick", content="tick")


def test_the_call_index_follows_every_write_and_is_one_live_set(store: SessionStore) -> None:
    store.append("s", [UserMessage(content="go"), round_of("a"), result("a")])
    writer = SessionWriter.open(store, "s")
    ids = writer.call_ids
    assert ids == {"a"} and writer.open_calls == ()

    writer.add(round_of("b", "c"))
    assert ids == {"a", "b", "c"}
    assert [c.id for c in writer.open_calls] == ["b", "c"]

    writer.history.append(result("b"))  # appended by the engine, reported by on_append
    writer.on_append((writer.history[-1],))
    assert [c.id for c in writer.open_calls] == ["c"]

    writer.history.append(result("c"))  # stored by someone else's transaction (the bus)
    writer.saved(store.append("s", writer.unsaved(), expected_last_entry=writer.head))
    assert writer.open_calls == () and writer.call_ids is ids
    assert store.load("s") == writer.history


def test_a_repaired_session_has_no_open_calls_left(store: SessionStore) -> None:
    store.append("s", [UserMessage(content="go"), round_of("a", "b"), result("a")])
    writer = SessionWriter.open(store, "s")
    assert [r.call_id for r in writer.repaired] == ["b"]
    assert writer.open_calls == () and writer.call_ids == {"a", "b"}


def test_close_open_calls_without_open_calls_writes_nothing(store: SessionStore) -> None:
    writer = SessionWriter.open(store, "s")
    writer.add(UserMessage(content="hi"), AssistantMessage(text="hello"))
    head = writer.head
    assert writer.close_open_calls() == []
    assert writer.head == head


async def test_the_loop_takes_the_call_ids_in_use_from_the_index_it_is_given() -> None:
    # "dup" is taken according to the index although the history never shows it: the loop
    # asks the index, not the history, so the model's reused id is replaced.
    model = ScriptedModel([calls_turn(call("tick", "dup")), {"text": "done"}])
    agent = Agent(model=model, tools=[tick])
    state = agent.turn_state(history=[UserMessage(content="go")], known_call_ids={"dup"})
    assert (await agent.run_turn(state)).status == "final"
    [made] = [c for m in state.history if isinstance(m, AssistantMessage) for c in m.tool_calls]
    assert made.id != "dup"


async def test_a_turn_on_a_session_feeds_the_writers_index_as_it_writes(
    store: SessionStore,
) -> None:
    store.append("s", [UserMessage(content="go"), round_of("c_tick"), result("c_tick")])
    writer = SessionWriter.open(store, "s")
    writer.add(UserMessage(content="again"))
    model = ScriptedModel([calls_turn(call("tick")), {"text": "done"}])
    agent = Agent(model=model, tools=[tick])
    state = agent.turn_state(
        history=writer.history, on_append=writer.on_append, known_call_ids=writer.call_ids
    )
    assert (await agent.run_turn(state)).status == "final"
    ids = [c.id for m in writer.history if isinstance(m, AssistantMessage) for c in m.tool_calls]
    assert ids[0] == "c_tick" and ids[1] != "c_tick"  # the reused id was replaced
    assert writer.call_ids == set(ids) and writer.open_calls == ()
    assert store.load("s") == writer.history


def test_agent_turn_state_computes_the_exclusions_from_the_last_user_message() -> None:
    seen: list[str] = []

    def exclusions(message: str) -> list[str]:
        seen.append(message)
        return [" Tick "]

    agent = Agent(model=ScriptedModel([]), tools=[tick], turn_exclusions=exclusions)
    history = [UserMessage(content="first"), AssistantMessage(text="ok")]
    history.append(UserMessage(content="second"))
    assert agent.turn_state(history=history).excluded == frozenset({"tick"})
    assert agent.turn_state(history=history, prompt="given").excluded == frozenset({"tick"})
    assert seen == ["second", "given"]
    assert Agent(model=ScriptedModel([])).turn_state(history=history).excluded == frozenset()
