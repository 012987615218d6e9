"""`heron serve` asks a human through durable requests, across `kill -9` and a restart.

The agent prepares an irreversible payment; the call waits on a request with a placeholder
result while the session keeps handling other events; the server is killed -9 while the request
is pending; a new server starts on the same state; `heron approvals approve` from another
process answers it; the payment runs exactly once (a side-effect file counts it) and the signed
decision verifies. A second scenario lets the deadline pass: the model is told "no answer in
N s", never "denied by the user", and nothing runs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from heron._support.state import open_db
from heron.audit.sqlite_store import SqliteApprovalAudit
from heron.humans.sqlite_store import SqliteRequestStore
from heron.models.history_rules import HistoryChecker
from heron.safety import signing
from heron.safety.signing import signed_headers
from heron.sessions.sqlite_store import SqliteSessionStore
from support.cli import Heron, Running
from support.peers import http_receiver
from support.waiting import wait_until

SECRET = "approvals-test-secret"
NOTIFY_SECRET = "approvals-notify-secret"
SESSION = "main"
PAY_TOOL = '''
from pathlib import Path

import heron


@heron.tool(requires_approval=True)
def pay(to: str, amount: int) -> str:
    """Pay an invoice; every payment is one line in payments.log.

    Args:
        to: The payee.
        amount: How much, in whole euros.
    """
    with (Path.cwd() / "payments.log").open("a", encoding="utf-8") as log:
        log.write(f"{to} {amount}\\n")
    return f"paid {amount} to {to}"
'''


def pay_call(amount: int) -> dict[str, Any]:
    return {"id": "c_pay", "name": "pay", "arguments": {"to": "ACME", "amount": amount}}


def serve(heron: Heron, script: str) -> Running:
    return heron.start(
        "serve",
        "--model",
        script,
        "--session",
        SESSION,
        "--webhook-port",
        "0",
        "--subscribe",
        "im",
        "--poll-interval",
        "0.1",
        "--tools",
        "pay.py",
    )


def post_im(url: str, message_id: str, text: str) -> None:
    body = json.dumps(
        {"platform": "chat", "message_id": message_id, "sender": {"id": "U9"}, "text": text}
    ).encode()
    headers = signed_headers(SECRET.encode(), body, time.time())
    response = httpx.post(f"{url}/im", content=body, headers=headers, trust_env=False)
    assert response.status_code == 202, response.text


def pay_then(heron: Heron, amount: int, answer: str, after: str) -> str:
    """A script: pay ACME `amount` (it waits for approval), then `answer` once the outcome —
    a message containing `after` — arrives."""
    call = {"id": "c_pay", "name": "pay", "arguments": {"to": "ACME", "amount": amount}}
    return heron.script(
        "script.yaml",
        [
            {"tool_calls": [call], "expect": {"last_message_contains": "pay ACME"}},
            {"text": "Waiting for approval."},
            {"text": answer, "expect": {"last_message_contains": after}},
        ],
    )


def requests(heron: Heron) -> list[dict[str, Any]]:
    listed = heron.run("approvals", "list", "--status", "all", "--json")
    assert listed.code == 0, listed.stderr
    found: list[dict[str, Any]] = json.loads(listed.stdout)
    return found


def history_is_valid(state_dir: Path) -> list[Any]:
    sessions = SqliteSessionStore.open(state_dir)
    try:
        history = sessions.load(SESSION)
    finally:
        sessions.close()
    HistoryChecker().check(history)  # what a real provider would accept
    return history


def payments(heron: Heron) -> list[str]:
    log = heron.root / "payments.log"
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def test_a_pending_approval_survives_kill_9_and_the_approved_call_runs_exactly_once(
    heron: Heron,
) -> None:
    heron.env["HERON_WEBHOOK_SECRET"] = SECRET
    heron.write("pay.py", PAY_TOOL)
    heron.write("heron.toml", '[approvals.approvers]\nconsole = ["alice"]\n')
    first = heron.script(
        "first.yaml",
        [
            {
                "tool_calls": [
                    {"id": "c_pay", "name": "pay", "arguments": {"to": "ACME", "amount": 120}}
                ],
                "expect": {"last_message_contains": "pay ACME"},
            },
            {"text": "I asked for approval to pay ACME."},
            {
                "text": "The office opens at nine.",
                "expect": {"last_message_contains": "when does the office open"},
            },
        ],
    )
    second = heron.script(
        "second.yaml",
        [
            {
                "text": "Paid ACME 120.",
                "expect": {"last_message_contains": "approved by console:alice"},
            }
        ],
    )
    one = serve(heron, first)
    url = one.wait_for_event("serve_started")["webhook"]
    post_im(url, "m1", "please pay ACME 120 for invoice 7")
    result = one.wait_for_event("tool_result", id="c_pay")
    assert result["status"] == "awaiting_approval"
    one.wait_for_event("final", text="I asked for approval to pay ACME.")
    [pending] = requests(heron)
    assert (pending["tool"], pending["status"], pending["call_ids"]) == (
        "pay",
        "input_required",
        ["c_pay"],
    )
    assert pending["approvers"] == ["console:alice"]

    # The session keeps working while the request waits, on a history a provider accepts.
    post_im(url, "m2", "unrelated: when does the office open?")
    one.wait_for_event("final", text="The office opens at nine.")
    history_is_valid(heron.state_dir)

    one.proc.kill()  # SIGKILL while the request is pending
    one.proc.wait()
    assert payments(heron) == []

    two = serve(heron, second)
    two.wait_for_event("serve_started")
    refused = heron.run("approvals", "approve", pending["id"], "--as", "mallory")
    assert refused.code == 4 and "may not answer" in refused.stderr
    approved = heron.run("approvals", "approve", pending["id"], "--as", "alice", "--reason", "ok")
    assert approved.code == 0, approved.stderr
    # The approved call runs through the engine like a call of a turn: its own cards.
    ran = two.wait_for_event("tool_result", id="c_pay")
    assert ran["status"] == "ok" and "paid 120 to ACME" in ran["output"]
    two.wait_for_event("final", text="Paid ACME 120.")
    again = heron.run("approvals", "approve", pending["id"], "--as", "alice")
    assert again.code == 3 and "already answered by console:alice" in again.stderr
    two.proc.terminate()
    finished = two.finish()
    assert finished.code == 0, finished.stderr

    assert payments(heron) == ["ACME 120"]  # exactly once
    verified = heron.run("approvals", "verify", pending["id"])
    assert verified.code == 0 and verified.stdout.startswith("valid:"), verified.stdout
    [done] = requests(heron)
    assert (done["status"], done["outcome"], done["answered_by"]) == (
        "completed",
        "approved",
        "console:alice",
    )
    history = history_is_valid(heron.state_dir)
    placeholders = [m for m in history if getattr(m, "call_id", None) == "c_pay"]
    assert len(placeholders) == 1 and "awaiting approval" in placeholders[0].content
    store = SqliteRequestStore.open_dir(heron.state_dir)
    try:
        assert store.unreported() == [] and store.get(pending["id"]).reported  # type: ignore[union-attr]
    finally:
        store.close()
    db = open_db(heron.state_dir)
    try:
        trail = SqliteApprovalAudit(db).list(tool="pay")
    finally:
        db.close()
    assert [(r.decision, r.decided_by) for r in trail] == [
        ("deferred", "policy"),
        ("yes", "console:alice"),
    ]
    executions = heron.run("audit", "--tool", "pay", "--json")
    assert executions.code == 0, executions.stderr
    [execution] = [json.loads(line) for line in executions.stdout.splitlines()]
    assert execution["call_id"] == "c_pay" and execution["success"] is True
    assert execution["approved_by"] == f"console:alice (request {pending['id']})"


def test_a_request_nobody_answers_ends_as_no_answer_and_the_model_is_told_so(
    heron: Heron,
) -> None:
    heron.env["HERON_WEBHOOK_SECRET"] = SECRET
    heron.write("pay.py", PAY_TOOL)
    heron.write("heron.toml", "[approval]\ntimeout_s = 1.0\n")
    script = pay_then(heron, 5, "Nobody answered; I did not pay.", "there was no answer in 1 s")
    server = serve(heron, script)
    url = server.wait_for_event("serve_started")["webhook"]
    post_im(url, "m1", "please pay ACME 5")
    server.wait_for_event("final", text="Waiting for approval.")
    server.wait_for_event("final", text="Nobody answered; I did not pay.")
    server.proc.terminate()
    assert server.finish().code == 0
    [request] = requests(heron)
    assert (request["status"], request["outcome"], request["decision"]) == (
        "timed_out",
        "no_answer",
        None,
    )
    assert payments(heron) == []
    history = history_is_valid(heron.state_dir)
    told = "\n".join(getattr(m, "content", "") for m in history)
    assert "there was no answer in 1 s" in told and "This was not the user's decision." in told
    assert "denied by the user" not in told.lower()
    late = heron.run("approvals", "approve", request["id"])
    assert late.code == 3 and "timed_out, no_answer" in late.stderr


def _signed_post(url: str, payload: dict[str, Any]) -> httpx.Response:
    body = json.dumps(payload).encode()
    headers = signed_headers(SECRET.encode(), body, time.time())
    return httpx.post(url, content=body, headers=headers, trust_env=False)


def test_nobody_answering_escalates_to_a_webhook_approver_who_answers_once(
    heron: Heron,
) -> None:
    heron.env["HERON_WEBHOOK_SECRET"] = SECRET
    heron.env["HERON_NOTIFY_SECRET"] = NOTIFY_SECRET
    heron.write("pay.py", PAY_TOOL)
    with http_receiver() as ops_hook:
        heron.write(
            "heron.toml",
            f"""
[approvals.approvers]
console = ["alice"]

[[approvals.escalation]]
after_s = 0.3
approvers = {{ webhook = ["ops"] }}

[people.ops]
channels = ["webhook"]
webhook = "{ops_hook.url}"

[channels.webhook]
secret_env = "HERON_NOTIFY_SECRET"
""",
        )
        script = pay_then(heron, 9, "Paid ACME 9.", "approved by webhook:ops")
        server = serve(heron, script)
        url = server.wait_for_event("serve_started")["webhook"]
        post_im(url, "m1", "please pay ACME 9")
        server.wait_for_event("final", text="Waiting for approval.")
        [pending] = requests(heron)  # opened for console:alice (unit-tested: the first group)

        wait_until(lambda: len(ops_hook.requests) == 1, "the escalation's webhook")
        headers, body = ops_hook.requests[0]
        assert signing.check(NOTIFY_SECRET.encode(), body, headers, now=time.time()) is None
        sent = json.loads(body)
        assert (sent["type"], sent["to"], sent["request"]["id"]) == (
            "approval.request",
            "ops",
            pending["id"],
        )
        assert sent["request"]["tool"] == "pay" and sent["answer_path"] == "/approval"
        assert headers["idempotency-key"] == f"{pending['id']}:ops"
        [widened] = requests(heron)
        assert widened["approvers"] == ["console:alice", "webhook:ops"]
        assert widened["deliveries"]["escalation:1"] == "opened"

        token = sent["answer_token"]
        forged = _signed_post(f"{url}/approval", {"token": token[:-2] + "xx", "decision": "yes"})
        assert forged.status_code == 401 and "token refused" in forged.text
        unknown = _signed_post(f"{url}/approval", {"token": token, "decision": "maybe"})
        assert unknown.status_code == 400
        answered = _signed_post(
            f"{url}/approval", {"token": token, "decision": "yes", "reason": "invoice 7"}
        )
        assert answered.status_code == 200, answered.text
        assert answered.json() == {
            "status": "recorded",
            "request": pending["id"],
            "result": "approved",
        }
        again = _signed_post(f"{url}/approval", {"token": token, "decision": "no"})
        assert again.status_code == 409 and "already answered by webhook:ops" in again.text

        server.wait_for_event("final", text="Paid ACME 9.")
        server.proc.terminate()
        assert server.finish().code == 0
    assert payments(heron) == ["ACME 9"]
    assert len(ops_hook.requests) == 1  # a step is taken once
    [done] = requests(heron)
    assert (done["answered_by"], done["reason"]) == ("webhook:ops", "invoice 7")
