"""`heron approvals` answers requests to a human from other processes, on the state directory.

The requests are opened the way a running agent opens them (a `RequestDesk` on the same state
directory, in this test process); every answer is a real `heron approvals …` process.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

from heron._support.clock import FakeClock
from heron.humans.config import ApprovalsConfig
from heron.humans.console import ConsoleChannel
from heron.humans.desk import RequestDesk
from heron.humans.signing import DecisionKeyStore, DecisionSigner
from heron.humans.sqlite_store import SqliteRequestStore
from heron.humans.store import HumanRequest
from support.cli import HERON, TIMEOUT_S, Heron

SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "amount": {"type": "integer"}},
    "required": ["to", "amount"],
    "additionalProperties": False,
}


def open_approval(
    state_dir: Path,
    *,
    approvers: dict[str, list[str]] | None = None,
    created: float | None = None,
    **fields: Any,
) -> HumanRequest:
    """What an agent does when a call needs approval: open a durable request."""
    values: dict[str, Any] = {
        "session": "main",
        "call_id": "call-1",
        "tool": "pay",
        "arguments": {"to": "ACME Ltd", "amount": 120},
        "schema": SCHEMA,
    }
    values.update(fields)
    store = SqliteRequestStore.open_dir(state_dir)
    try:
        desk = RequestDesk(
            store,
            signer=DecisionSigner(DecisionKeyStore(state_dir)),
            config=ApprovalsConfig(approvers=approvers or {}),  # type: ignore[arg-type]
            channels=[ConsoleChannel()],
            approval_timeout_s=60.0,
            clock=FakeClock(start=created if created is not None else time.time()),
        )
        return asyncio.run(desk.open_approval(**values))
    finally:
        store.close()


def test_a_pending_approval_is_listed_shown_approved_and_verified_from_other_processes(
    heron: Heron,
) -> None:
    request = open_approval(
        heron.state_dir, arguments={"to": "ACME", "amount": 5, "password": "1234"}, schema=None
    )
    listed = heron.run("approvals", "list")
    assert listed.code == 0 and request.id in listed.stdout and "pay(" in listed.stdout
    assert "1234" not in listed.stdout and "the local operator" in listed.stdout
    [data] = json.loads(heron.run("approvals", "list", "--json").stdout)
    assert (data["id"], data["status"], data["arguments"]["password"]) == (
        request.id,
        "input_required",
        "[REDACTED]",
    )
    shown = heron.run("approvals", "show", request.id)
    assert shown.code == 0 and "(redacted)" in shown.stdout and "1234" not in shown.stdout
    assert '"1234"' in heron.run("approvals", "show", request.id, "--exact").stdout

    approved = heron.run("approvals", "approve", request.id, "--as", "alice", "--reason", "ok")
    assert approved.code == 0, approved.stderr
    assert f"{request.id}: approved by console:alice" in approved.stdout
    assert heron.run("approvals", "list").stdout.strip() == "no pending requests"
    verified = heron.run("approvals", "verify", request.id)
    assert verified.code == 0 and verified.stdout.startswith("valid:"), verified.stdout

    # A tampered row no longer verifies.
    with sqlite3.connect(heron.state_dir / "heron.db") as db:
        db.execute(
            "UPDATE human_requests SET arguments = ? WHERE id = ?",
            (json.dumps({"to": "Mallory", "amount": 5, "password": "1234"}), request.id),
        )
    tampered = heron.run("approvals", "verify", request.id)
    assert tampered.code == 1 and tampered.stdout.startswith("invalid:")


def test_two_simultaneous_answers_from_two_processes_one_wins(heron: Heron) -> None:
    request = open_approval(heron.state_dir)
    answers = [("approve", "alice"), ("deny", "bob")]
    procs = [
        subprocess.Popen(
            [*HERON, "approvals", verb, request.id, "--as", name],
            cwd=heron.root,
            env=heron.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for verb, name in answers
    ]
    results = sorted(((p.wait(TIMEOUT_S), *p.communicate()) for p in procs), key=lambda r: r[0])
    assert [code for code, _, _ in results] == [0, 3], results
    winner = "alice" if "approved" in results[0][1] else "bob"
    assert f"already answered by console:{winner} at " in results[1][2]
    [row] = json.loads(heron.run("approvals", "list", "--status", "all", "--json").stdout)
    assert row["answered_by"] == f"console:{winner}"


def test_a_non_approver_is_refused_and_an_unknown_id_is_named(heron: Heron) -> None:
    request = open_approval(heron.state_dir, approvers={"console": ["alice"]})
    refused = heron.run("approvals", "approve", request.id, "--as", "mallory")
    assert refused.code == 4
    assert "console:mallory may not answer" in refused.stderr and "console:alice" in refused.stderr
    unknown = heron.run("approvals", "approve", "apr-doesnotexist", "--as", "alice")
    assert unknown.code == 1 and "no request 'apr-doesnotexist'" in unknown.stderr
    assert heron.run("approvals", "deny", request.id, "--as", "alice").code == 0


def test_an_approval_past_its_deadline_timed_out_and_cannot_be_approved(heron: Heron) -> None:
    request = open_approval(heron.state_dir, created=time.time() - 120)  # deadline 60 s ago
    late = heron.run("approvals", "approve", request.id, "--as", "alice")
    assert late.code == 3 and "timed_out, no_answer" in late.stderr
    [row] = json.loads(heron.run("approvals", "list", "--status", "timed_out", "--json").stdout)
    assert (row["outcome"], row["decision"], row["answered_by"]) == ("no_answer", None, "policy")
    unsigned = heron.run("approvals", "verify", request.id)
    assert unsigned.code == 1 and "no person decided" in unsigned.stdout


def test_an_edit_is_checked_against_the_tools_schema(heron: Heron) -> None:
    request = open_approval(heron.state_dir)
    bad = heron.run("approvals", "edit", request.id, "--args", '{"to": "ACME", "amount": "lots"}')
    assert bad.code == 2 and "do not fit pay" in bad.stderr
    assert heron.run("approvals", "edit", request.id, "--args", "[1]").code == 2
    good = heron.run("approvals", "edit", request.id, "--args", '{"to": "ACME", "amount": 100}')
    assert good.code == 0 and "edited" in good.stdout, good.stderr
    [row] = json.loads(heron.run("approvals", "list", "--status", "all", "--json").stdout)
    assert row["decision"] == {"kind": "edit", "arguments": {"to": "ACME", "amount": 100}}
    assert heron.run("approvals", "verify", request.id).code == 0


def test_replace_and_always_rules_listed_and_revoked(heron: Heron) -> None:
    replaced = open_approval(heron.state_dir)
    done = heron.run("approvals", "replace", replaced.id, "Paid by hand already.")
    assert done.code == 0 and "replaced" in done.stdout
    command = open_approval(
        heron.state_dir, tool="shell", arguments={"command": "git push origin main"}, schema=None
    )
    flags = ["--always", "--scope", "command", "--prefix", "git push", "--for", "2h"]
    always = heron.run("approvals", "approve", command.id, *flags)
    assert always.code == 0, always.stderr
    assert "shell commands beginning with `git push`, in session main" in always.stdout
    [rule] = json.loads(heron.run("approvals", "rules", "--json").stdout)
    assert rule["command_prefix"] == ["git", "push"] and rule["live"]
    assert 7100 < rule["expires_at"] - rule["created_at"] <= 7200
    assert heron.run("approvals", "rules", "--revoke", rule["id"]).code == 0
    assert heron.run("approvals", "rules").stdout.strip() == "no 'always' rules"
    assert "[revoked]" in heron.run("approvals", "rules", "--all").stdout
    assert heron.run("approvals", "rules", "--revoke", rule["id"]).code == 1
    usage = heron.run("approvals", "approve", command.id, "--prefix", "git")
    assert usage.code == 2 and "go with --always" in usage.stderr


def test_export_writes_json_lines_of_decisions_with_reasons_and_latency(heron: Heron) -> None:
    request = open_approval(heron.state_dir)
    open_approval(heron.state_dir, arguments={"to": "pending", "amount": 1})
    heron.run("approvals", "deny", request.id, "--as", "alice", "--reason", "wrong payee")
    exported = heron.run("approvals", "export", "--since", "1h")
    assert exported.code == 0
    [line] = exported.stdout.splitlines()
    record = json.loads(line)
    assert (record["id"], record["decision"], record["reason"], record["approver"]) == (
        request.id,
        {"kind": "no"},
        "wrong payee",
        "console:alice",
    )
    assert record["arguments"] == {"to": "ACME Ltd", "amount": 120}
    assert record["latency_s"] >= 0
