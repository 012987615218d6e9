"""`ShellHistory`: every command the shell tool was asked to run, newest first, per agent."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from heron.toolsets.shell import ShellHistory
from support.stores import StoreBackend


@pytest.fixture
def history(backend: StoreBackend) -> ShellHistory:
    return backend.shell_history()


def test_entries_read_back_whole_newest_first_through_another_store(
    history: ShellHistory, backend: StoreBackend
) -> None:
    before = dt.datetime.now(dt.UTC)
    history.record(command="true", cwd=Path("/ws"), outcome="ran", risk="low", exit_code=0)
    history.record(
        command="sleep 9",
        cwd=Path("/ws/sub"),
        outcome="ran",
        risk="low",
        agent="builder",
        exit_code=None,
        duration_s=2.5,
        timed_out=True,
    )
    history.record(command="sudo true", cwd=Path("/ws"), outcome="refused", risk="high")
    entries = backend.shell_history().recent()
    assert [(e.command, e.outcome, e.risk, e.exit_code) for e in entries] == [
        ("sudo true", "refused", "high", None),
        ("sleep 9", "ran", "low", None),
        ("true", "ran", "low", 0),
    ]
    slept = entries[1]
    assert (slept.cwd, slept.agent, slept.duration_s, slept.timed_out) == (
        "/ws/sub",
        "builder",
        2.5,
        True,
    )
    assert entries[2].timed_out is False and entries[2].agent is None
    assert entries[0].id > entries[1].id > entries[2].id
    earliest = before - dt.timedelta(seconds=1)
    assert all(e.at.tzinfo is not None and e.at >= earliest for e in entries)


def test_recent_keeps_the_limit_and_filters_by_agent(history: ShellHistory) -> None:
    for n in range(5):
        history.record(
            command=f"echo {n}", cwd=Path("/ws"), outcome="ran", risk="low", agent=f"a{n % 2}"
        )
    assert [e.command for e in history.recent(2)] == ["echo 4", "echo 3"]
    assert [e.command for e in history.recent(agent="a1")] == ["echo 3", "echo 1"]
    assert history.recent(agent="nobody") == []
