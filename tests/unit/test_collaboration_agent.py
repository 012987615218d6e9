"""The agent builder and the runtime around the messaging tools: the system-prompt section on
when to message and when to ask, messaging without asking (recipients are configuration), and
the completion notice of a long turn."""

from __future__ import annotations

from pathlib import Path

from heron import ScriptedModel
from heron._support.clock import FakeClock
from heron.always_on.hooks import LifecycleHooks
from heron.always_on.messaging import ServeMessaging
from heron.collaboration.prompt import COLLABORATION_PROMPT
from heron.collaboration.setup import MessagingConfig
from heron.config.build import build_agent
from heron.config.schema import HeronConfig
from heron.messages import ToolResultMessage, UserMessage
from heron.turn.context import TurnState
from heron.turn.loop import TurnOutcome


def config(tmp_path: Path) -> HeronConfig:
    return HeronConfig.model_validate({"state": {"dir": str(tmp_path)}})


async def test_with_the_messaging_tools_the_prompt_teaches_when_to_message_and_ask(
    tmp_path: Path,
) -> None:
    messaging = ServeMessaging.open(MessagingConfig(), state_dir=tmp_path)
    try:
        from heron.collaboration.tools import messaging_tools

        tools = messaging_tools(messaging.outbox, session="s")
        agent = build_agent(config(tmp_path), tools=tools, model=ScriptedModel([]))
        plain = build_agent(config(tmp_path), model=ScriptedModel([]))
    finally:
        await messaging.aclose()
    assert COLLABORATION_PROMPT in (agent.system_prompt or "")
    assert "irreversible" in COLLABORATION_PROMPT and "value judgement" in COLLABORATION_PROMPT
    assert COLLABORATION_PROMPT not in (plain.system_prompt or "")
    # They reach only configured people, so they run without asking; always_ask still wins.
    names = set(agent.approval.policy.auto_approve)
    assert {"send_message", "send_card", "send_notification"} <= names


async def test_a_long_turn_that_sent_nothing_ends_with_a_notice_and_a_short_one_does_not(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    messaging = ServeMessaging.open(MessagingConfig(), state_dir=tmp_path, clock=clock)
    hooks = messaging.notices("ops", LifecycleHooks())
    final = TurnOutcome(status="final", text="done", reason="answer", iterations=1)

    async def turn(seconds: float, *, spoke: bool = False) -> None:
        state = TurnState(history=[UserMessage(content="go")])
        await hooks.turn_starting(state)
        clock.advance(seconds)
        if spoke:
            state.history.append(ToolResultMessage(call_id="c", name="send_message", content="{}"))
        await hooks.turn_finished(state, final)

    try:
        await turn(30)
        await turn(900, spoke=True)
        await turn(900)
        await messaging.drain()
        [notice] = messaging.store.list()
    finally:
        await messaging.aclose()
    assert notice.kind == "notification" and notice.session == "ops"
    assert notice.text.startswith("Finished after 15 min 0 s: a task of session 'ops'")


async def test_a_background_job_that_ran_long_ends_with_a_notice(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from heron.always_on.bus.model import BusEvent, EventContent

    clock = FakeClock()
    messaging = ServeMessaging.open(MessagingConfig(), state_dir=tmp_path, clock=clock)
    jobs = {
        "job-long": SimpleNamespace(started_at=0.0, ended_at=1200.0),
        "job-short": SimpleNamespace(started_at=0.0, ended_at=5.0),
    }
    store = SimpleNamespace(get=jobs.get)

    def ended(job_id: str) -> BusEvent:
        text = f"background job {job_id} (`make all`) completed: exit code 0."
        return BusEvent(
            kind="job.exit",
            source="tool",
            channel="async_tool",
            session="ops",
            content=EventContent(text=text, data={"job_id": job_id}),
        )

    try:
        messaging.job_ended(ended("job-short"), store)  # type: ignore[arg-type]
        messaging.job_ended(ended("job-long"), store)  # type: ignore[arg-type]
        await messaging.drain()
        [notice] = messaging.store.list()
    finally:
        await messaging.aclose()
    assert notice.text == (
        "Finished after 20 min 0 s: background job job-long (`make all`) completed: exit code 0."
    )
