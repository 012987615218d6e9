"""`EndingReporter`: an ended request is handed back once, and an approved call runs once —
across a crash before the ending is published and a crash while the tool ran."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import heron
from heron import Agent, ScriptedModel
from heron._support.clock import FakeClock
from heron._support.vocabulary import HumanDecision
from heron.humans.console import ConsoleChannel
from heron.humans.desk import RequestDesk
from heron.humans.outcomes import IDEMPOTENCY_TOOL, EndingReporter, RequestEnding, SessionAgent
from heron.humans.signing import DecisionKeyStore, DecisionSigner
from heron.humans.sqlite_store import SqliteRequestStore
from heron.humans.store import HumanRequest
from heron.safety.idempotency import IdempotencyStore
from heron.safety.sqlite_idempotency import SqliteIdempotencyLedger
from support.waiting import poll_until

RUNS: list[dict[str, Any]] = []


@heron.tool(destructive=True)
def pay(to: str, amount: int) -> str:
    """Pay someone.

    Args:
        to: The payee.
        amount: How much.
    """
    RUNS.append({"to": to, "amount": amount})
    return f"paid {amount} to {to}"


@heron.tool(idempotent=True)
def refresh(name: str) -> str:
    """Refresh a cache (safe to repeat).

    Args:
        name: The cache.
    """
    RUNS.append({"refresh": name})
    return f"refreshed {name}"


@heron.tool(runtime_args=["approved"])
def guarded(command: str, approved: bool = False) -> str:
    """Run only when approved.

    Args:
        command: What to run.
        approved: Set by the runtime only.
    """
    RUNS.append({"command": command, "approved": approved})
    return "ran" if approved else "refused: not approved"


AGENT = Agent(model=ScriptedModel([]), tools=[pay, refresh, guarded])
"""The session's agent: an approved call runs through its lifecycle."""


@pytest.fixture(autouse=True)
def _fresh_runs() -> None:
    RUNS.clear()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteRequestStore]:
    opened = SqliteRequestStore.open_dir(tmp_path)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=5_000.0)


@pytest.fixture
def desk(store: SqliteRequestStore, tmp_path: Path, clock: FakeClock) -> RequestDesk:
    return RequestDesk(
        store,
        signer=DecisionSigner(DecisionKeyStore(tmp_path)),
        channels=[ConsoleChannel()],
        approval_timeout_s=60.0,
        clock=clock,
    )


class Published:
    def __init__(self) -> None:
        self.endings: list[RequestEnding] = []
        self.fail_next = False

    async def __call__(self, ending: RequestEnding) -> None:
        if self.fail_next:
            self.fail_next = False
            raise ConnectionError("the process died before the event was durable")
        self.endings.append(ending)


def reporter(store: SqliteRequestStore, tmp_path: Path, published: Published) -> EndingReporter:
    return EndingReporter(
        store,
        sessions=lambda r: SessionAgent(AGENT),
        idempotency=IdempotencyStore(SqliteIdempotencyLedger(tmp_path)),
        publish=published,
    )


async def gated(desk: RequestDesk, tool: str = "pay", **arguments: Any) -> HumanRequest:
    return await desk.open_approval(
        session="main",
        call_id="call-7",
        tool=tool,
        arguments=arguments or {"to": "ACME", "amount": 120},
        gates_call=True,
    )


async def test_an_approved_call_runs_once_and_its_result_is_reported_once(
    desk: RequestDesk, store: SqliteRequestStore, tmp_path: Path
) -> None:
    request = await gated(desk)
    published = Published()
    assert await reporter(store, tmp_path, published).report() == []  # still waiting
    desk.decide(request.id, HumanDecision.yes(), channel="console", name="alice")
    [ending] = await reporter(store, tmp_path, published).report(session="main")
    assert (ending.kind, ending.success, ending.status) == ("tool.result", True, "completed")
    assert ending.text.startswith(f"[approval {request.id}: approved by console:alice at ")
    assert ending.text.endswith("paid 120 to ACME")
    assert ending.idempotency_key == f"approval:{request.id}"
    assert ending.request.call_id == "call-7"
    assert await reporter(store, tmp_path, published).report() == []
    assert RUNS == [{"to": "ACME", "amount": 120}]


async def test_a_crash_before_the_ending_is_published_republishes_without_running_again(
    desk: RequestDesk, store: SqliteRequestStore, tmp_path: Path
) -> None:
    request = await gated(desk)
    desk.decide(request.id, HumanDecision.yes(), channel="console", name="alice")
    published = Published()
    published.fail_next = True
    with pytest.raises(ConnectionError):
        await reporter(store, tmp_path, published).report()
    assert RUNS == [{"to": "ACME", "amount": 120}]
    [ending] = await reporter(store, tmp_path, published).report()  # the restart
    assert "paid 120 to ACME" in ending.text and ending.status == "completed"
    assert RUNS == [{"to": "ACME", "amount": 120}]


async def test_a_crash_while_the_tool_ran_reports_lost_and_never_runs_it_again(
    desk: RequestDesk, store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    request = await gated(desk)
    desk.decide(request.id, HumanDecision.yes(), channel="console", name="alice")
    # The process that started the tool died: its claim is still `running`.
    ledger = SqliteIdempotencyLedger(tmp_path)
    ledger.claim(
        IDEMPOTENCY_TOOL, request.id, request.digest, now=time.time(), expires=time.time() + 60
    )
    published = Published()
    [ending] = await reporter(store, tmp_path, published).report()
    assert (ending.status, ending.success) == ("lost", False)
    assert "outcome unknown" in ending.text and RUNS == []


async def test_an_idempotent_tool_cut_off_mid_run_runs_again(
    desk: RequestDesk, store: SqliteRequestStore, tmp_path: Path
) -> None:
    request = await gated(desk, "refresh", name="prices")
    desk.decide(request.id, HumanDecision.yes(), channel="console", name="alice")
    ledger = SqliteIdempotencyLedger(tmp_path)
    ledger.claim(
        IDEMPOTENCY_TOOL, request.id, request.digest, now=time.time(), expires=time.time() + 60
    )
    [ending] = await reporter(store, tmp_path, Published()).report()
    assert ending.status == "completed" and ending.text.endswith("refreshed prices")
    assert RUNS == [{"refresh": "prices"}]


async def test_silence_is_reported_as_no_answer_never_as_a_denial(
    desk: RequestDesk, store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    request = await gated(desk)
    clock.advance(60)
    desk.expire()
    [ending] = await reporter(store, tmp_path, Published()).report()
    assert ending.kind == "approval.answer" and not ending.success
    assert "there was no answer in 60 s" in ending.text
    assert "This was not the user's decision." in ending.text
    assert "denied" not in ending.text.lower() and RUNS == []
    assert ending.data["outcome"] == "no_answer" and request.id in ending.text


async def test_a_denial_a_replacement_and_an_edit(
    desk: RequestDesk, store: SqliteRequestStore, tmp_path: Path
) -> None:
    denied = await gated(desk, to="A", amount=1)
    replaced = await gated(desk, to="B", amount=2)
    edited = await gated(desk, to="C", amount=3)
    desk.decide(denied.id, HumanDecision.no(), channel="console", name="a", reason="no budget")
    desk.decide(replaced.id, HumanDecision.replace("Paid by hand."), channel="console", name="a")
    desk.decide(
        edited.id, HumanDecision.edit({"to": "C", "amount": 2}), channel="console", name="a"
    )
    by_id = {e.request.id: e for e in await reporter(store, tmp_path, Published()).report()}
    assert by_id[denied.id].text.startswith("Denied by the operator (console:a at ")
    assert by_id[denied.id].text.endswith("'pay' was not run. Reason: no budget")
    assert (by_id[replaced.id].kind, by_id[replaced.id].text) == ("tool.result", "Paid by hand.")
    assert "with edited arguments (amount: 2, to: C)" in by_id[edited.id].text
    assert RUNS == [{"to": "C", "amount": 2}]


async def test_a_tool_with_the_approval_marker_gets_it_after_a_persons_yes(
    desk: RequestDesk, store: SqliteRequestStore, tmp_path: Path
) -> None:
    request = await gated(desk, "guarded", command="deploy")
    desk.decide(request.id, HumanDecision.yes(), channel="console", name="a")
    [ending] = await reporter(store, tmp_path, Published()).report()
    assert ending.text.endswith("ran") and RUNS == [{"command": "deploy", "approved": True}]


async def test_the_watcher_reports_answers_and_deadlines_as_they_fall_due(
    desk: RequestDesk, store: SqliteRequestStore, tmp_path: Path, clock: FakeClock
) -> None:
    published = Published()
    answered = await gated(desk, to="A", amount=1)
    silent = await gated(desk, to="B", amount=2)
    task = asyncio.ensure_future(
        reporter(store, tmp_path, published).watch(
            expire=desk.expire, clock=clock, interval_s=5.0, session="main"
        )
    )
    try:
        await asyncio.sleep(0)
        desk.decide(answered.id, HumanDecision.yes(), channel="console", name="a")
        clock.advance(5)
        # The approved call runs in a worker thread (a sync tool): real time passes.
        await poll_until(lambda: len(published.endings) >= 1, "the answered request's ending")
        assert [e.request.id for e in published.endings] == [answered.id]
        clock.advance(55)  # the other one's deadline
        await poll_until(lambda: len(published.endings) >= 2, "the silent request's ending")
        assert [e.request.id for e in published.endings] == [answered.id, silent.id]
        assert "no answer in 60 s" in published.endings[1].text
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
