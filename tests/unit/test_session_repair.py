"""Resuming sessions: repair of a turn cut off mid-call, write-before-show, single writer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from heron import Agent, FunctionModel, ModelRequest, ModelTurn, ScriptedModel, tool
from heron.messages import (
    AssistantMessage,
    Message,
    ToolCallPart,
    ToolResultMessage,
    UserMessage,
)
from heron.models.history_rules import HistoryChecker
from heron.models.scripted import ScriptedCall
from heron.sessions import ConcurrentWriteError, SessionStore, SqliteSessionStore
from heron.sessions.lock import SessionInUseError, SessionLock
from heron.sessions.repair import (
    INTERRUPTED_RESULT,
    SessionRepairError,
    open_calls,
    repair_messages,
)
from heron.sessions.session import CliSession, check_session_name
from heron.sessions.writer import SessionWriter
from heron.turn.cancel import CancelScope
from heron.turn.events import BaseEvent, FinalEvent, ToolCallEvent
from support.killed_turn import kill_mid_call

ROUND = AssistantMessage(
    text="Reading both.",
    tool_calls=(
        ToolCallPart(id="c1", name="read", arguments={"path": "a"}),
        ToolCallPart(id="c2", name="read", arguments={"path": "b"}),
    ),
)
FIRST_RESULT = ToolResultMessage(call_id="c1", name="read", content="alpha")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteSessionStore]:
    sessions = SqliteSessionStore.open(tmp_path)
    yield sessions
    sessions.close()


def test_a_call_left_open_at_the_end_gets_an_interrupted_result_as_a_new_entry(
    store: SessionStore,
) -> None:
    store.append("s", [UserMessage(content="read a and b"), ROUND, FIRST_RESULT])
    before = store.entries("s")

    resumed = SessionWriter.open(store, "s")

    after = store.entries("s")
    assert after[: len(before)] == before  # the stored entries are untouched
    [added] = after[len(before) :]
    assert added.parent_id == before[-1].entry_id
    assert added.message == ToolResultMessage(
        call_id="c2", name="read", content=INTERRUPTED_RESULT, is_error=True
    )
    assert "interrupted: the process ended before this tool finished" in INTERRUPTED_RESULT
    assert resumed.repaired == (added.message,)
    assert resumed.head == added.entry_id
    HistoryChecker().check(store.load("s"))


def test_every_call_of_a_round_without_results_is_closed_in_call_order() -> None:
    repairs = repair_messages([UserMessage(content="go"), ROUND])
    assert [r.call_id for r in repairs] == ["c1", "c2"]


def test_a_call_waiting_on_an_open_request_keeps_waiting_instead_of_being_interrupted(
    store: SessionStore,
) -> None:
    store.append("s", [UserMessage(content="read a and b"), ROUND])
    waiting = {"c2": "[awaiting approval apr-1 from the local operator: 'read' has not run.]"}
    woken = SessionWriter.wake(store, "s", awaiting=waiting)
    assert [(r.call_id, r.content) for r in woken.repaired] == [
        ("c1", INTERRUPTED_RESULT),
        ("c2", waiting["c2"]),
    ]
    HistoryChecker().check(store.load("s"))
    assert repair_messages([UserMessage(content="go"), ROUND], waiting)[1].content == waiting["c2"]


def test_a_complete_history_resumes_without_new_entries(store: SessionStore) -> None:
    store.append("s", [UserMessage(content="hi"), AssistantMessage(text="hello")])
    resumed = SessionWriter.open(store, "s")
    assert resumed.repaired == ()
    assert len(store.entries("s")) == 2


def test_a_user_message_still_waiting_for_the_model_needs_no_repair() -> None:
    history: list[Message] = [UserMessage(content="hi")]
    assert open_calls(history) == []
    assert repair_messages(history) == []


def test_a_history_broken_in_the_middle_is_refused_with_the_reason(store: SessionStore) -> None:
    store.append("s", [UserMessage(content="go"), ROUND, UserMessage(content="hello?")])
    with pytest.raises(
        SessionRepairError,
        match=r"session 's' cannot be resumed: .* comes before the results of tool calls c1, c2",
    ):
        SessionWriter.open(store, "s")
    assert len(store.entries("s")) == 3


def test_a_session_with_a_damaged_entry_is_refused_naming_the_entry(
    store: SqliteSessionStore,
) -> None:
    head = store.append("s", [UserMessage(content="go"), AssistantMessage(text="done")])
    store.conn.execute(
        'UPDATE session_entries SET message = \'{"role": "user"}\' WHERE entry_id = ?', (head,)
    )
    with pytest.raises(
        SessionRepairError,
        match=rf"session 's' cannot be resumed: stored entry {head} of session 's' is not a "
        r"valid message \(user\.content: Field required\)",
    ):
        SessionWriter.open(store, "s")
    assert store.head("s") == head  # nothing was appended to it


def test_a_second_writer_is_refused_not_interleaved(store: SessionStore) -> None:
    first = SessionWriter.open(store, "s")
    second = SessionWriter.open(store, "s")
    first.add(UserMessage(content="from the first"))

    with pytest.raises(ConcurrentWriteError, match="refusing to interleave"):
        second.add(UserMessage(content="from the second"))
    assert store.load("s") == [UserMessage(content="from the first")]


def test_close_open_calls_stores_the_repair_so_the_next_resume_has_nothing_to_do(
    store: SessionStore,
) -> None:
    writer = SessionWriter.open(store, "s")
    writer.history.extend([UserMessage(content="go"), ROUND])  # appended, not yet written

    assert [r.call_id for r in writer.close_open_calls()] == ["c1", "c2"]
    assert SessionWriter.open(store, "s").repaired == ()
    HistoryChecker().check(store.load("s"))


def test_a_locked_session_refuses_a_second_holder_until_released(tmp_path: Path) -> None:
    first = SessionLock(tmp_path / "state", "s")
    first.acquire()
    assert (tmp_path / "state").stat().st_mode & 0o077 == 0  # the state directory is private
    with pytest.raises(SessionInUseError, match=r"session 's' is in use .*\(pid \d+\)"):
        SessionLock(tmp_path / "state", "s").acquire()
    SessionLock(tmp_path / "state", "other").acquire()  # other sessions are free
    first.release()
    again = SessionLock(tmp_path / "state", "s")
    again.acquire()
    again.release()


def test_a_cli_session_cannot_be_opened_twice_at_once(tmp_path: Path) -> None:
    held = CliSession.open(tmp_path, "s")
    try:
        with pytest.raises(SessionInUseError):
            CliSession.open(tmp_path, "s")
    finally:
        held.close()
    CliSession.open(tmp_path, "s").close()


def test_new_sessions_get_fresh_ids_and_names_are_checked(tmp_path: Path) -> None:
    one, two = CliSession.open(tmp_path, None), CliSession.open(tmp_path, None)
    try:
        assert one.name != two.name and one.created and two.created
        check_session_name(one.name)
    finally:
        one.close()
        two.close()
    with pytest.raises(ValueError, match="invalid session name"):
        CliSession.open(tmp_path, "has space")
    with pytest.raises(ValueError, match="no session named 'missing'"):
        CliSession.open(tmp_path, "missing", must_exist=True)


async def test_messages_are_stored_before_events_show_them(tmp_path: Path) -> None:
    session = CliSession.open(tmp_path, "s")
    reader = SqliteSessionStore.open(tmp_path)
    seen: list[tuple[str, list[str]]] = []

    def sink(event: BaseEvent) -> None:
        if isinstance(event, ToolCallEvent | FinalEvent):
            seen.append((event.type, [m.role for m in reader.load("s")]))

    @tool(read_only=True)
    def look() -> str:
        """Look around."""
        return "a tree"

    def decide(request: ModelRequest) -> ModelTurn | str:
        if len(request.messages) == 1:
            # The prompt is stored before the model is asked.
            assert reader.load("s") == [UserMessage(content="what is there?")]
            return ModelTurn(tool_calls=[ScriptedCall(id="l1", name="look")])
        return "A tree."

    agent = Agent(model=FunctionModel(decide), tools=[look], autonomy="full")
    session.attach(agent)
    try:
        outcome = await session.run_turn(
            agent, "what is there?", sink=sink, cancel=CancelScope(), channel="test"
        )
    finally:
        session.close()
        reader.close()
    assert outcome.status == "final", outcome.error
    assert seen == [
        ("tool_call", ["user", "assistant"]),
        ("final", ["user", "assistant", "tool", "assistant"]),
    ]


async def test_a_turn_killed_mid_call_is_repaired_and_the_next_request_is_valid(
    tmp_path: Path,
) -> None:
    # The process dies mid-call: no interrupted result is ever written by this writer.
    await kill_mid_call(
        tmp_path, "s", {"text": "Waiting.", "tool_calls": [{"id": "h1", "name": "hang"}]}
    )

    resumed = CliSession.open(tmp_path, "s")
    try:
        assert [r.call_id for r in resumed.repaired] == ["h1"]
        # ScriptedModel checks every request against the providers' history rules.
        model = ScriptedModel([{"text": "It was interrupted.", "expect": {"last_role": "user"}}])
        next_agent = Agent(model=model)
        resumed.attach(next_agent)
        outcome = await resumed.run_turn(
            next_agent, "what happened?", sink=lambda _: None, cancel=CancelScope(), channel="t"
        )
        assert outcome.status == "final", outcome.error
        roles = [m.role for m in resumed.store.load("s")]
        assert roles == ["user", "assistant", "tool", "user", "assistant"]
    finally:
        resumed.close()
