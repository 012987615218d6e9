"""`[store] url` selects the shared store for what the built-in sets and the agent keep:
through the Python API a user runs (`open_builtin`, `build_agent`), an oversize output one
worker's agent spilled is read page by page by another worker's `read_artifact`, and the
receipt its call got verifies with the key another worker loads — two workers with their own
state directories on one real PostgreSQL database; only the model is scripted."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

import heron
from heron._support.postgres import close_process_pools
from heron.artifacts.postgres_contents import PostgresArtifactContents
from heron.config import HeronConfig
from heron.config.build import build_agent, open_builtin
from heron.config.builtin import Builtin
from heron.messages import ToolResultMessage
from heron.models.base import ModelRequest
from heron.models.scripted import FunctionModel, ModelTurn, ScriptedCall
from heron.tools.definition import ToolContext
from heron.turn.receipts import parse_receipt, verify_receipt
from heron.turn.signing_keys import key_store
from support.postgres import postgres_server, postgres_url

__all__ = ["postgres_server", "postgres_url"]  # fixtures, found by pytest here

LONG = "".join(f"row {n:05d}\n" for n in range(1, 3001))


@heron.tool
def report() -> str:
    """A long report."""
    return LONG


def config(tmp_path: Path, name: str, url: str) -> HeronConfig:
    workspace = tmp_path / name / "workspace"
    workspace.mkdir(parents=True)
    return HeronConfig.model_validate(
        {
            "state": {"dir": str(tmp_path / name / "state")},
            "store": {"url": url},
            "agent": {"receipts": True, "autonomy": "full"},
            "tools": {"builtin": {"sets": ["perception"], "workspace": str(workspace)}},
        }
    )


@asynccontextmanager
async def builtin_of(cfg: HeronConfig) -> AsyncIterator[Builtin]:
    built = await open_builtin(cfg)
    assert built is not None
    try:
        yield built
    finally:
        await built.aclose()


@pytest.fixture(autouse=True)
def _pools() -> Iterator[None]:
    yield
    close_process_pools()  # each test has its own database


async def test_a_spilled_output_and_its_receipt_are_read_and_verified_on_another_worker(
    tmp_path: Path, postgres_url: str
) -> None:
    def decide(request: ModelRequest) -> str | ModelTurn:
        if len(request.messages) == 1:
            return ModelTurn(tool_calls=[ScriptedCall(id="c1", name="report")])
        return "done"

    first = config(tmp_path, "a", postgres_url)
    async with builtin_of(first) as built:
        assert isinstance(built.spill.store.contents, PostgresArtifactContents)
        agent = build_agent(first, tools=[report], model=FunctionModel(decide), builtin=built)
        result = await agent.run("report, please")
    [receipt] = result.receipts
    parsed = parse_receipt(receipt.receipt)
    assert parsed is not None

    second = config(tmp_path, "b", postgres_url)
    async with builtin_of(second) as other:
        [read] = [t for t in other.all_tools() if t.spec.name == "read_artifact"]
        [spilled] = [m for m in result.history if isinstance(m, ToolResultMessage)]
        art = re.search(r"art_[0-9a-f]{16}", str(spilled.content))
        assert art is not None, spilled
        page = await read.execute(
            read.validate({"id": art.group(0), "offset": 2000, "limit": 2}),
            ToolContext(call_id="r", turn_id="t"),
        )
    assert page.success and "row 02000" in page.output and "row 02001" in page.output
    key = key_store("receipt", state_dir=tmp_path / "b" / "state", store_url=postgres_url).load(
        parsed[0]
    )
    assert key is not None
    assert verify_receipt(receipt.receipt, key=key, tool="report", arguments={}, output=LONG)
