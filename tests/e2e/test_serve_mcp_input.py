"""An MCP server asks for user input mid-call, on a real `heron serve`: the SDK-built server's
tool elicits a date; the question waits as a durable request (session `#mcp/<server>`), a person
answers it from another terminal with `heron approvals answer`, and the call completes with the
answer — which goes back to the server, not into any session as an event. An answer that does
not fit the server's schema is refused. (Silence, URL requests and no desk:
tests/unit/test_mcp_human_input.py.)"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from heron.safety.signing import signed_headers
from support.cli import Heron
from support.mcp_servers import probe_server
from support.waiting import wait_until

SECRET = "mcp-input-test-secret"


def post(url: str, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    headers = signed_headers(SECRET.encode(), body, time.time())
    response = httpx.post(f"{url}/webhook", content=body, headers=headers, trust_env=False)
    assert response.status_code == 202, response.text


def pending(heron: Heron) -> list[dict[str, Any]]:
    listed = heron.run("approvals", "list", "--json")
    assert listed.code == 0, listed.stderr
    found: list[dict[str, Any]] = json.loads(listed.stdout)
    return found


def test_an_mcp_servers_question_is_answered_from_another_terminal(heron: Heron) -> None:
    heron.env["HERON_WEBHOOK_SECRET"] = SECRET
    server = probe_server("asking")
    heron.write(
        "heron.toml",
        f"""[agent]
autonomy = "full"

[approvals.questions]
timeout_s = 60

[mcp.servers.rooms]
command = {json.dumps(server["command"])}
args = {json.dumps(server["args"])}
""",
    )
    model = heron.script(
        "serve.yaml",
        [
            {
                "tool_calls": [{"id": "b1", "name": "rooms__book", "arguments": {"room": "K2"}}],
                "expect": {"last_message_contains": "book K2"},
            },
            {"text": "K2 is booked.", "expect": {"last_message_contains": "booked K2 on"}},
        ],
    )
    serve = heron.start_serve(model)
    url = serve.wait_for_event("serve_started")["webhook"]
    post(url, {"id": "w1", "text": "please book K2"})

    wait_until(lambda: len(pending(heron)) == 1, "the server's question")
    [question] = pending(heron)
    assert question["session"] == "#mcp/rooms" and question["kind"] == "question"
    assert "Which date should K2 be booked for?" in question["question"]

    wrong = heron.run("approvals", "answer", question["id"], '{"day": 24}', "--json")
    assert wrong.code != 0 and "does not fit" in wrong.stderr
    answered = heron.run("approvals", "answer", question["id"], '{"date": "2026-12-24"}', "--json")
    assert answered.code == 0, answered.stderr

    result = serve.wait_for_event("tool_result", id="b1")
    assert result["status"] == "ok" and "booked K2 on 2026-12-24" in result["output"]
    serve.wait_for_event("final", text="K2 is booked.")
    serve.interrupt()
    done = serve.finish()
    assert done.code == 0, done.stderr
    # The answer went back to the server: no event for a session named after it.
    events = heron.run("events", "tail", "--json", "--limit", "100")
    assert "#mcp/rooms" not in events.stdout
