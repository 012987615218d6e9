"""Approval from the command line when nobody can answer, and under full autonomy."""

from __future__ import annotations

import json
from contextlib import closing
from typing import Any

import pytest

from heron._support.state import open_db
from heron.audit.sqlite_store import SqliteApprovalAudit
from support.cli import Heron, assert_one_result_per_call, stable

MAKE_FILE_TURNS: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "c1", "name": "make_file", "arguments": {"name": "made.txt"}}]},
    {"text": "Finished.", "expect": {"last_role": "tool"}},
]

DENIED = {"success": False, "status": "denied", "cached": False}


# Without the flag heron looks for a terminal; the helper's processes have none (new session).
@pytest.mark.parametrize(
    "flags",
    [["--non-interactive"], []],
    ids=["non-interactive", "no-terminal"],
)
def test_an_approval_required_call_is_denied_by_policy_when_no_operator_can_answer(
    heron: Heron, flags: list[str]
) -> None:
    # With --receipts on: a denied call must not get one.
    done = heron.run_turn(heron.script("script.yaml", MAKE_FILE_TURNS), "--receipts", *flags)

    assert done.code == 0, done.stdout + done.stderr
    events = stable(done.events())
    assert_one_result_per_call(events)
    asked = {"request_id": events[0]["request_id"], "call_id": "c1", "tool": "make_file"}
    card = {"id": "c1", "name": "make_file"}
    output = events[3]["output"]
    assert events == [
        {"type": "approval_request", **asked, "summary": "name: made.txt"},
        {"type": "approval_decision", **asked, "decision": "unavailable", "decided_by": "policy"},
        {"type": "tool_call", **card, "arguments": {"name": "made.txt"}, "injected": []},
        {"type": "tool_result", **card, **DENIED, "output": output},
        {"type": "text_delta", "text": "Finished."},
        {"type": "final", "text": "Finished.", "reason": "answer"},
    ]
    assert "no operator decision was available" in output
    assert "denied by the operator" not in output.lower()
    assert not (heron.root / "made.txt").exists()

    with closing(open_db(heron.state_dir)) as conn:
        decided = [(r.tool, r.decision, r.decided_by) for r in SqliteApprovalAudit(conn).list()]
    assert decided == [("make_file", "unavailable", "policy")]
    # `heron audit --approvals` reads the same trail.
    listed = heron.run("audit", "--approvals", "--json")
    assert listed.code == 0, listed.stderr
    [row] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (row["tool"], row["decision"], row["decided_by"], row["arguments"]) == (
        "make_file",
        "unavailable",
        "policy",
        "name: made.txt",
    )
    assert row["reason"] == "no operator decision was available"
    text = heron.run("audit", "--approvals")
    assert "make_file" in text.stdout and "unavailable  by policy  name: made.txt" in text.stdout
    refused = heron.run("audit", "--approvals", "--session", "s")
    assert refused.code == 2 and "not --session or --since" in refused.stderr


def test_full_autonomy_runs_an_approval_required_tool_without_asking(heron: Heron) -> None:
    model = heron.script("script.yaml", MAKE_FILE_TURNS)
    done = heron.run_turn(model, "--non-interactive", "--autonomy", "full")

    assert done.code == 0, done.stdout + done.stderr
    events = stable(done.events())
    assert [e["type"] for e in events] == ["tool_call", "tool_result", "text_delta", "final"]
    assert events[1]["status"] == "ok"
    assert events[1]["output"] == "created made.txt"
    assert (heron.root / "made.txt").read_text(encoding="utf-8") == "made by heron\n"
