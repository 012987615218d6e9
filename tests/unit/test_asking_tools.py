"""request_human_approval and request_human_input over the durable desk: in serve a placeholder
at once (the answer comes as an event), under MCP the call waits for the answer; with nobody
answering, a question goes on with its default; with nobody reachable, it ends at once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from heron._support.vocabulary import HumanDecision
from heron.collaboration.asking import DeskRequests, asking_tools
from heron.humans.config import ApprovalsConfig
from heron.humans.console import ConsoleChannel
from heron.humans.desk import RequestDesk
from heron.humans.signing import DecisionKeyStore, DecisionSigner
from heron.humans.sqlite_store import SqliteRequestStore
from heron.tools.definition import Tool, ToolContext, ToolResult
from support.waiting import until

CTX = ToolContext(call_id="c1", turn_id="t1")


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[RequestDesk]:
    store = SqliteRequestStore.open_dir(tmp_path)
    yield RequestDesk(
        store,
        signer=DecisionSigner(DecisionKeyStore(tmp_path)),
        channels=[ConsoleChannel()],
        config=ApprovalsConfig(),
    )
    store.close()


def tools(desk: RequestDesk, wait_s: float | None = None) -> dict[str, Tool]:
    return {t.spec.name: t for t in asking_tools(DeskRequests(desk, wait_s=wait_s), session="s")}


async def run(t: Tool, **arguments: Any) -> ToolResult:
    return await t.execute(t.validate(arguments), CTX)


async def test_in_serve_a_question_returns_a_placeholder_naming_its_request(
    desk: RequestDesk,
) -> None:
    result = await run(tools(desk)["request_human_input"], question="Which account?")
    assert result.success and result.output.startswith("[asked: request ask-")
    [request] = desk.store.list()
    assert (request.kind, request.call_id, request.session) == ("question", "c1", "s")


async def test_under_mcp_the_call_waits_for_the_approvers_answer(desk: RequestDesk) -> None:
    asking = asyncio.ensure_future(
        run(tools(desk, wait_s=10)["request_human_approval"], question="Publish the post?")
    )
    await until(lambda: bool(desk.store.list()), "the request opened")
    [request] = desk.store.list()
    desk.decide(request.id, HumanDecision.yes(), channel="console", name="ana", reason="fine")
    result = await asking
    assert result.success and result.output == "Approved by console:ana. Reason: fine"
    # Reported here, so no session is woken by it later.
    assert desk.store.unreported() == []


async def test_nobody_answering_a_question_goes_on_with_its_default(desk: RequestDesk) -> None:
    result = await run(
        tools(desk, wait_s=5)["request_human_input"],
        question="How many replicas?",
        schema={"type": "integer"},
        timeout_s=0.3,
        default=2,
    )
    assert result.success and result.output == "No answer in time; the default applies: 2"


async def test_with_no_approver_reachable_the_request_ends_at_once(tmp_path: Path) -> None:
    store = SqliteRequestStore.open_dir(tmp_path)
    try:
        nobody = RequestDesk(store, signer=DecisionSigner(DecisionKeyStore(tmp_path)))
        result = await run(tools(nobody)["request_human_approval"], question="Delete it?")
    finally:
        store.close()
    assert not result.success and "no approver reachable" in (result.error or "")
