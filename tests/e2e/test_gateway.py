"""The gateway of a real `heron serve --http-port` subprocess, used with real httpx clients.

A webhook starts a run that waits on an approval; its event stream is read live, cut in the
middle and resumed with `Last-Event-ID`: the two parts together are exactly a fresh replay
from the store, in order. The approval is refused to a viewer (403), answered over HTTP by an
operator, and the same approval answered again from the CLI is "already answered" (and over
HTTP, 409). Tokens: none or unknown → 401, a body over the limit → 413.
"""

from __future__ import annotations

from typing import Any

import httpx

from heron.gateway.auth import hash_token
from support.cli import Heron
from support.gateway import (
    ADMIN,
    BUILD_COMMAND,
    BUILD_TURNS,
    OPS,
    PAY_TURNS,
    VIEWER,
    SseFrame,
    Stream,
    approve_the_pending_payment,
    bearer,
    durable,
    is_turn,
    post_webhook,
    start,
)
from support.waiting import wait_until


def pending(http: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{http}/v1/approvals", headers=bearer(VIEWER), trust_env=False)
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["requests"]
    return found


def test_a_webhook_run_is_watched_cut_and_resumed_and_the_approval_is_answered_once(
    heron: Heron,
) -> None:
    running, webhook, http = start(heron)
    stream = Stream(f"{http}/v1/sessions/main/events", bearer(VIEWER))
    post_webhook(webhook, "m1", "please pay ACME 120 for invoice 7")

    # Live until the call waits on its approval, then the connection is dropped.
    first = stream.read(is_turn("tool_result", id="c_pay"))
    assert first[-1].data["status"] == "awaiting_approval"
    [request] = pending(http)
    assert request["tool"] == "pay" and request["arguments"] == {"to": "ACME", "amount": 120}

    url = f"{http}/v1/approvals/{request['id']}"
    refused = httpx.post(url, json={"decision": "yes"}, headers=bearer(VIEWER), trust_env=False)
    assert refused.status_code == 403  # a viewer never approves
    approved = httpx.post(
        url,
        json={"decision": "yes", "reason": "invoice 7 is due"},
        headers=bearer(OPS),
        trust_env=False,
    )
    assert approved.status_code == 200, approved.text
    assert approved.json()["answered_by"] == "gateway:ops"
    twice = httpx.post(url, json={"decision": "no"}, headers=bearer(ADMIN), trust_env=False)
    assert twice.status_code == 409 and "already answered" in twice.json()["error"]
    cli = heron.run("approvals", "deny", request["id"], "--as", "alice")
    assert cli.code == 3 and "already answered by gateway:ops" in cli.stderr

    # Resumed from the last id seen: what happened meanwhile, then live to the end.
    second = stream.read(is_turn("text", text="Paid ACME 120."), last_event_id=first[-1].id)
    replay = Stream(stream.url, bearer(ADMIN)).read(is_turn("text", text="Paid ACME 120."))
    assert durable(first) + durable(second) == durable(replay)
    ids = [i for i, _, _ in durable(replay)]
    assert len(ids) == len(set(ids))
    kinds = [_kind(f) for f in replay if f.id is not None]
    assert kinds[0] == "bus:webhook.received"
    for expected in ("turn:tool_call", "turn:tool_result", "turn:text", "bus:tool.result"):
        assert expected in kinds, kinds
    running.proc.terminate()
    assert running.finish().code == 0


def test_after_a_kill_and_a_restart_the_stream_replays_the_run_as_it_ended(heron: Heron) -> None:
    running, webhook, http = start(heron)
    stream = Stream(f"{http}/v1/sessions/main/events", bearer(VIEWER))
    post_webhook(webhook, "m1", "please pay ACME 120 for invoice 7")
    stream.read(is_turn("tool_result", id="c_pay"))
    approve_the_pending_payment(http)
    paid = is_turn("text", text="Paid ACME 120.")
    before = durable(Stream(stream.url, bearer(VIEWER)).read(paid))
    running.proc.kill()  # SIGKILL: nothing is flushed or closed
    running.finish()
    again, _webhook, http = start(heron)
    after = durable(Stream(f"{http}/v1/sessions/main/events", bearer(VIEWER)).read(paid))
    assert after == before  # the same frames under the same ids
    types = [data.get("type") for _, event, data in after if event == "turn"]
    asked = ["approval_request", "approval_decision", "tool_call", "tool_result"]
    # Asked and left waiting, said so; approved, it runs and the answer follows.
    assert types == [*asked, "text", "final", *asked, "text"], types
    again.proc.terminate()
    assert again.finish().code == 0


WAIT_TOOL = '''
import threading

import heron


@heron.tool(read_only=True)
def wait_for_delivery() -> str:
    """Wait until the parcel arrives."""
    threading.Event().wait()  # never: the process is killed while the call runs
    return "arrived"
'''
WAIT_TURNS: list[dict[str, Any]] = [
    {
        "text": "Let me wait for it.",
        "tool_calls": [{"id": "c_wait", "name": "wait_for_delivery"}],
        "expect": {"last_message_contains": "parcel"},
    },
]
AFTER_WAIT: list[dict[str, Any]] = [
    {"text": "The wait was cut off.", "expect": {"last_message_contains": "interrupted"}},
]
"""The restarted process's model: the turn goes on from the repaired call."""


def test_a_call_cut_off_by_a_kill_is_replayed_as_interrupted_once(heron: Heron) -> None:
    heron.write("wait.py", WAIT_TOOL)
    running, webhook, http = start(heron, WAIT_TURNS, "--tools", "wait.py")
    url = f"{http}/v1/sessions/main/events"
    post_webhook(webhook, "m1", "where is my parcel?")
    # The call is stored with the message that makes it, and never gets a result.
    Stream(url, bearer(VIEWER)).read(is_turn("text", text="Let me wait for it."))
    running.proc.kill()  # SIGKILL: the call's cards wait for its result, never stored
    running.finish()
    again, _webhook, http = start(heron, AFTER_WAIT, "--tools", "wait.py")
    url = f"{http}/v1/sessions/main/events"
    cut = is_turn("text", text="The wait was cut off.")
    replay = durable(Stream(url, bearer(VIEWER)).read(cut))
    cards = [d for _, event, d in replay if event == "turn" and d.get("id") == "c_wait"]
    # Repaired on restart: the call's card, and its result as interrupted, exactly once.
    assert [(d["type"], d.get("status")) for d in cards] == [
        ("tool_call", None),
        ("tool_result", "interrupted"),
    ]
    again.proc.terminate()
    assert again.finish().code == 0


def _kind(frame: SseFrame) -> str:
    if frame.event == "bus":
        return f"bus:{frame.data['event']['kind']}"
    return f"{frame.event}:{frame.data.get('type')}"


def test_tokens_roles_and_limits_are_enforced_and_no_secret_is_answered(heron: Heron) -> None:
    running, _webhook, http = start(heron)
    with httpx.Client(base_url=http, trust_env=False) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/v1/sessions").status_code == 401
        assert client.get("/v1/sessions", headers=bearer("wrong")).status_code == 401
        listed = client.get("/v1/sessions", headers=bearer(VIEWER))
        assert listed.status_code == 200
        assert [s["name"] for s in listed.json()["sessions"]] == ["main"]
        message = {"text": "hello from the API"}
        viewer = client.post("/v1/sessions/main/messages", json=message, headers=bearer(VIEWER))
        assert viewer.status_code == 403
        sent = client.post("/v1/sessions/main/messages", json=message, headers=bearer(OPS))
        assert sent.status_code == 202 and len(sent.json()["event"]) == 32
        big = {"text": "x" * 5000}
        too_big = client.post("/v1/sessions/main/messages", json=big, headers=bearer(OPS))
        assert too_big.status_code == 413
        deep = '{"text": ' + "[" * 100 + "]" * 100 + "}"
        nested = client.post(
            "/v1/sessions/main/messages",
            content=deep,
            headers={**bearer(OPS), "Content-Type": "application/json"},
        )
        assert nested.status_code == 422 and "deep" in nested.json()["error"]
        metrics = client.get("/metrics", headers=bearer(ADMIN))
        assert metrics.status_code == 200
        assert 'heron_gateway_requests_total{route="/v1/sessions",status="401"} 2' in metrics.text
        whoami = client.get("/v1/whoami", headers=bearer(ADMIN))
        for response in (listed, sent, metrics, whoami):
            assert ADMIN not in response.text and OPS not in response.text
    running.proc.terminate()
    assert running.finish().code == 0


def test_doctor_warns_when_the_gateway_is_bound_beyond_loopback_without_tls(heron: Heron) -> None:
    assert "[ok  ] gateway: listens on loopback (127.0.0.1)" in heron.run("doctor").stdout
    heron.write("heron.toml", '[gateway]\nhost = "0.0.0.0"\n')
    exposed = heron.run("doctor")
    assert "[warn] gateway: listens on 0.0.0.0 without TLS in front" in exposed.stdout
    heron.write("heron.toml", '[gateway]\nhost = "0.0.0.0"\npublic_url = "https://heron.example"\n')
    behind = heron.run("doctor")
    assert "[ok  ] gateway: listens on 0.0.0.0 behind TLS (https://heron.example)" in behind.stdout


def test_jobs_timers_and_subscriptions_are_listed_shown_and_a_job_is_interrupted(
    heron: Heron,
) -> None:
    running, webhook, http = start(heron, BUILD_TURNS, "--autonomy", "full")
    stream = Stream(f"{http}/v1/sessions/main/events", bearer(VIEWER))
    post_webhook(webhook, "b1", "start the build")
    stream.read(is_turn("text", text="The build runs; I will check it in an hour."))
    s = f"{http}/v1/sessions/main"
    with httpx.Client(headers=bearer(VIEWER), trust_env=False) as client:
        [timer] = client.get(f"{s}/timers").json()["timers"]
        assert timer["message"] == "check the build" and timer["state"] == "active"
        assert client.get(f"{s}/timers/{timer['timer_id']}").json() == timer
        assert client.get(f"{s}/timers/t-nope").status_code == 404
        [job] = client.get(f"{s}/jobs").json()["jobs"]
        assert job["state"] == "working" and job["command"] == BUILD_COMMAND
        url = f"{s}/jobs/{job['job_id']}"
        wait_until(lambda: client.get(url).json()["output_tail"] == ["build started"])
        subscriptions = client.get(f"{s}/subscriptions").json()["subscriptions"]
        assert [sub["source"] for sub in subscriptions] == ["webhook"]
        [sub] = subscriptions
        assert client.get(f"{s}/subscriptions/{sub['id']}").json() == sub
        assert client.get(f"{s}/subscriptions/sub-nope").status_code == 404
        assert client.post(f"{url}/interrupt").status_code == 403  # a viewer
    stopped = httpx.post(f"{url}/interrupt", headers=bearer(OPS), trust_env=False)
    assert stopped.status_code == 202
    ended = stream.read(
        lambda f: f.event == "bus" and f.data["event"]["kind"] == "job.exit",
        last_event_id=stream.seen[-1].id,
    )
    assert ended[-1].data["event"]["context"]["call_id"] == "c_job"
    done = httpx.get(url, headers=bearer(VIEWER), trust_env=False).json()
    assert done["state"] == "cancelled" and done["cancel_requested"] is True
    metrics = httpx.get(f"{http}/metrics", headers=bearer(VIEWER), trust_env=False).text
    # The tool metrics every session's agent keeps, on the process's one registry.
    assert 'heron_tool_calls_total{tool="start_job",outcome="success"} 1' in metrics
    assert 'heron_tool_calls_total{tool="set_timer",outcome="success"} 1' in metrics
    running.proc.terminate()
    assert running.finish().code == 0


def test_hash_token_prints_the_line_a_token_entry_needs(heron: Heron) -> None:
    made = heron.run("gateway", "hash-token", "--new")
    assert made.code == 0, made.stderr
    token_line, sha_line = made.stdout.splitlines()
    token = token_line.removeprefix("token = ")
    assert sha_line == f'sha256 = "{hash_token(token)}"'
    assert heron.run("gateway", "hash-token").code == 2  # no token on standard input


def test_the_gateway_alone_needs_no_webhook_secret_and_serves_no_webhooks(heron: Heron) -> None:
    heron.env["HERON_GATEWAY_TOKEN"] = ADMIN
    heron.env.pop("HERON_WEBHOOK_SECRET", None)
    script = heron.script("s.yaml", [{"text": "Hello."}])
    running = heron.start("serve", "--model", script, "--http-port", "0")
    started = running.wait_for_event("serve_started")
    http = started["http"]
    assert started["webhook"] is None and http.startswith("http://127.0.0.1:")
    with httpx.Client(base_url=http, trust_env=False) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        nothing = client.post("/webhook", json={"text": "hi"})
        assert nothing.status_code == 404
        assert nothing.json() == {"status": "invalid", "error": "nothing at this path"}
        page = client.get("/")
        assert page.status_code == 200 and "heron console" in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
    running.proc.terminate()
    assert running.finish().code == 0


def test_the_gateway_answers_the_address_it_listens_on_and_refuses_a_rebound_name(
    heron: Heron,
) -> None:
    running, _webhook, http = start(heron, PAY_TURNS, "--http-host", "127.0.0.2")
    port = http.rsplit(":", 1)[1]
    assert http == f"http://127.0.0.2:{port}"
    with httpx.Client(base_url=http, headers=bearer(VIEWER), trust_env=False) as client:
        assert client.get("/v1/whoami").json()["principal"] == "val"
        rebound = {"Host": f"attacker.example:{port}", "Origin": f"http://attacker.example:{port}"}
        refused = client.get("/v1/whoami", headers=rebound)
        assert refused.status_code == 421 and "attacker.example" in refused.json()["error"]
        assert client.get("/", headers=rebound).status_code == 421
    running.proc.terminate()
    assert running.finish().code == 0


def test_a_session_name_with_a_slash_is_addressed_encoded_or_as_it_is(heron: Heron) -> None:
    running, _webhook, http = start(heron, [{"text": "Hello, team."}, {"text": "Stopped."}])
    name, encoded = "team/alpha:eu@1", "team%2Falpha:eu@1"
    with httpx.Client(base_url=http, headers=bearer(OPS), trust_env=False) as client:
        sent = client.post(f"/v1/sessions/{encoded}/messages", json={"text": "hi team"})
        assert sent.status_code == 202 and sent.json()["session"] == name
        until = is_turn("text", text="Hello, team.")
        got = Stream(f"{http}/v1/sessions/{encoded}/events", bearer(VIEWER)).read(until)
        [message] = [f.data["event"] for f in got if f.event == "bus"]
        assert message["id"] == sent.json()["event"] and message["session"] == name
        # As it is, where the rest of the path tells the route: the same stream.
        same = Stream(f"{http}/v1/sessions/{name}/events", bearer(VIEWER)).read(until)
        assert durable(same) == durable(got)
        shown = client.get(f"/v1/sessions/{encoded}").json()
        assert shown["name"] == name and shown["head"] > 0
        assert [e["event"]["id"] for e in shown["recent_events"]] == [message["id"]]
        listed = client.get("/v1/sessions").json()["sessions"]
        assert {"name": name, "entries": 2} in [
            {"name": s["name"], "entries": s["entries"]} for s in listed
        ]
        stopped = client.post(f"/v1/sessions/{encoded}/interrupt", json={"reason": "stop"})
        assert stopped.status_code == 202 and stopped.json()["session"] == name
        # The deepest route wins: the job `j1` of `name`, not the interrupt of `name/jobs/j1`.
        job = client.post(f"/v1/sessions/{name}/jobs/j1/interrupt")
        assert job.status_code == 404 and job.json() == {"error": "no such job in this session"}
        # A name that ends like a route is the session itself only when encoded.
        assert client.get("/v1/sessions/x%2Fjobs").json()["name"] == "x/jobs"
        assert client.get("/v1/sessions/x/jobs").json() == {"jobs": []}
        assert client.get("/v1/sessions/a%2Fquiet").status_code == 404  # reserved: not hosted
    running.proc.terminate()
    assert running.finish().code == 0
