"""`HumanInput`: an MCP server's request for user input as a durable question — answered, left
unanswered (declined: silence never accepts), a URL to open, and no desk at all."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest

from heron._support.clock import FakeClock
from heron.humans.config import ApprovalsConfig
from heron.humans.console import ConsoleChannel
from heron.humans.desk import RequestDesk
from heron.humans.outcomes import EndingReporter
from heron.humans.signing import DecisionKeyStore, DecisionSigner
from heron.humans.sqlite_store import SqliteRequestStore
from heron.humans.store import HumanRequest
from heron.mcp.client.human_input import HumanInput
from heron.safety.idempotency import IdempotencyStore
from heron.safety.sqlite_idempotency import SqliteIdempotencyLedger
from support.waiting import poll_until

FORM = mcp_types.ElicitRequestFormParams(
    message="Which date?",
    requested_schema={
        "type": "object",
        "properties": {"date": {"type": "string"}},
        "required": ["date"],
    },
)
URL = mcp_types.ElicitRequestURLParams(
    message="Log in to the tracker.", url="https://tracker.example.com/login", elicitation_id="e1"
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteRequestStore]:
    opened = SqliteRequestStore.open_dir(tmp_path)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=1_000.0)


@pytest.fixture
def desk(store: SqliteRequestStore, tmp_path: Path, clock: FakeClock) -> RequestDesk:
    return RequestDesk(
        store,
        signer=DecisionSigner(DecisionKeyStore(tmp_path)),
        config=ApprovalsConfig.model_validate({"questions": {"timeout_s": 60}}),
        channels=[ConsoleChannel()],
        clock=clock,
    )


async def asked(desk: RequestDesk, params: Any) -> tuple[asyncio.Task[Any], HumanRequest]:
    elicit = HumanInput(lambda: desk, poll_s=0.005).for_server("tracker")
    task = asyncio.ensure_future(elicit(None, params))  # type: ignore[arg-type]
    await poll_until(lambda: bool(desk.store.list()), "the question")
    [request] = desk.store.list()
    return task, request


async def test_an_answer_is_accepted_with_its_content_and_reaches_no_session(
    desk: RequestDesk, tmp_path: Path
) -> None:
    task, request = await asked(desk, FORM)
    assert (request.session, request.kind, request.tool) == (
        "#mcp/tracker",
        "question",
        "tracker (MCP)",
    )
    assert "The MCP server 'tracker' asks: Which date?" in request.question
    desk.answer(request.id, {"date": "2026-12-24"}, channel="console", name="alice")
    result = await asyncio.wait_for(task, 10)
    assert result == mcp_types.ElicitResult(action="accept", content={"date": "2026-12-24"})
    published: list[Any] = []

    async def publish(ending: Any) -> None:
        published.append(ending)

    reporter = EndingReporter(
        desk.store,
        sessions=lambda r: None,
        idempotency=IdempotencyStore(SqliteIdempotencyLedger(tmp_path)),
        publish=publish,
    )
    assert await reporter.report() == [] and published == []  # its answer went to the server


async def test_silence_declines(desk: RequestDesk, clock: FakeClock) -> None:
    task, request = await asked(desk, FORM)
    clock.advance(61)
    result = await asyncio.wait_for(task, 10)
    assert result == mcp_types.ElicitResult(action="decline")
    assert desk.get(request.id).outcome == "no_answer"


async def test_a_url_request_asks_the_person_to_open_it(desk: RequestDesk) -> None:
    task, request = await asked(desk, URL)
    assert "open https://tracker.example.com/login" in request.question
    assert request.options == ("done", "decline")
    desk.answer(request.id, "done", channel="console", name="alice")
    assert await asyncio.wait_for(task, 10) == mcp_types.ElicitResult(action="accept")


async def test_with_no_desk_every_request_is_declined() -> None:
    elicit = HumanInput(lambda: None).for_server("tracker")
    assert await elicit(None, FORM) == mcp_types.ElicitResult(action="decline")  # type: ignore[arg-type]
