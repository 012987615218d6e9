"""Three `heron serve` workers on one PostgreSQL store, each with its own state directory and
workspace, serving 30 sessions from signed webhooks that are all delivered twice. One worker is
killed -9 with turns in flight, another is paused (SIGSTOP) past its leases and resumed, and the
PostgreSQL server is restarted once. Afterwards every accepted event was consumed exactly once,
every history is valid for a provider and is one unbroken chain (no write of a paused worker's
stale epoch landed in a history another worker owned)."""

from __future__ import annotations

import asyncio
import json
import signal
import time

import httpx

from heron.always_on.bus.postgres_store import PostgresBusStore
from heron.messages import UserMessage
from heron.safety.signing import signed_headers
from heron.sessions.postgres_store import PostgresSessionStore
from heron.sessions.repair import check_history
from support.cli import TIMEOUT_S, Heron, Running
from support.postgres import PostgresServer, postgres_server, postgres_url
from support.waiting import poll_until

__all__ = ["postgres_server", "postgres_url"]  # fixtures, found by pytest here

SECRET = "workers-test-secret"
SESSIONS = [f"s{i:02d}" for i in range(30)]
LEASE_S = 2.0


def worker(heron: Heron, index: int, url: str, script: str) -> Running:
    root = heron.root / f"worker{index}"
    (root / "ws").mkdir(parents=True)
    return heron.start(
        "serve",
        "--store",
        url,
        "--lease",
        str(LEASE_S),
        "--state-dir",
        str(root / "state"),
        "--workspace",
        str(root / "ws"),
        "--session",
        f"worker-{index}",
        "--model",
        script,
        "--webhook-port",
        "0",
        "--subscribe",
        "webhook",
        "--poll-interval",
        "0.1",
        "--autonomy",
        "full",
    )


def delivery_id(text: str) -> str:
    """The sender's id of an event: once in the history per consumption (the text shows twice,
    as the event's text and inside its data)."""
    return "delivery-" + text.replace(" ", "-")


def post(url: str, session: str, body: bytes) -> httpx.Response:
    """One signed webhook, retried while the worker answers 5xx (its store restarting), as a
    sender does."""
    answers: list[httpx.Response] = []

    def answered() -> bool:
        headers = signed_headers(SECRET.encode(), body, time.time())
        answers.append(
            httpx.post(
                f"{url}/webhook/{session}",
                content=body,
                headers=headers,
                trust_env=False,
                timeout=30,
            )
        )
        return answers[-1].status_code < 500

    asyncio.run(poll_until(answered, f"{url} accepting webhooks", within_s=60, every_s=0.5))
    return answers[-1]


def deliver(url: str, session: str, text: str) -> bool:
    """Post one signed webhook twice (a redelivery); whether the first was stored."""
    body = json.dumps({"id": delivery_id(text), "text": text}).encode()
    first, again = post(url, session, body), post(url, session, body)
    assert first.status_code in (200, 202), first.text
    assert again.status_code == 200, "the redelivery was stored again"
    return first.status_code == 202


def wait_consumed(url: str, texts: set[str]) -> None:
    """Until every event of `texts` is consumed: another process's progress, so polled."""
    store = PostgresSessionStore.open(url)

    def consumed() -> bool:
        with store.pool.connection() as conn:
            rows = conn.execute("SELECT body FROM bus_events WHERE consumed_at IS NOT NULL")
            done = {json.loads(body)["content"]["text"] for (body,) in rows}
        return texts <= done

    try:
        asyncio.run(poll_until(consumed, "every event consumed", within_s=120, every_s=0.2))
    finally:
        store.close()


def owned_by(url: str, worker_session: str) -> str:
    """The lease owner of a worker's default session: that worker's owner id."""
    store = PostgresSessionStore.open(url)
    try:
        with store.pool.connection() as conn:
            row = conn.execute(
                "SELECT owner FROM session_leases WHERE session = %s", (worker_session,)
            ).fetchone()
    finally:
        store.close()
    assert row is not None
    return str(row[0])


def test_three_workers_consume_every_event_once_through_kill_pause_and_restart(
    heron: Heron, postgres_server: PostgresServer, postgres_url: str
) -> None:
    heron.env["HERON_WEBHOOK_SECRET"] = SECRET
    script = heron.script("s.yaml", [{"text": "Noted.", "delay_ms": 30} for _ in range(600)])
    workers = [worker(heron, i, postgres_url, script) for i in range(3)]
    urls = [w.wait_for_event("serve_started")["webhook"] for w in workers]
    accepted: set[str] = set()

    def round_(n: int, to: list[int], sessions: list[str] = SESSIONS) -> set[str]:
        sent = set()
        for i, session in enumerate(sessions):
            text = f"event {session} round {n}"
            if deliver(urls[to[i % len(to)]], session, text):
                sent.add(text)
        accepted.update(sent)
        return sent

    # Round 1: each worker takes the sessions whose first event it received.
    wait_consumed(postgres_url, round_(1, [0, 1, 2]))
    # Worker 0 is killed -9 with turns in flight: its sessions are taken over after its lease.
    round_(2, [0], SESSIONS[0::3])
    workers[0].wait_for_event("session_woken")
    workers[0].proc.kill()
    workers[0].proc.wait(timeout=TIMEOUT_S)
    wait_consumed(postgres_url, round_(3, [1, 2]) | {t for t in accepted if "round 2" in t})

    # Worker 1 is paused past its leases while its sessions get events, then resumed.
    paused_owner = owned_by(postgres_url, "worker-1")
    round_(4, [1], SESSIONS[1::3])
    workers[1].proc.send_signal(signal.SIGSTOP)
    try:
        wait_consumed(postgres_url, round_(5, [2]) | {t for t in accepted if "round 4" in t})
    finally:
        workers[1].proc.send_signal(signal.SIGCONT)
    workers[1].wait_for_event("session_lost")  # it learns it was taken over, writes nothing

    # The PostgreSQL server restarts under the two live workers.
    postgres_server.restart()
    wait_consumed(postgres_url, round_(6, [1, 2]))
    for running in workers[1:]:
        running.proc.terminate()
    for running in workers[1:]:
        assert running.finish().code == 0

    bus = PostgresBusStore.open(postgres_url)
    try:
        stored = asyncio.run(bus.events())
        assert {s.event.content.text for s in stored if s.event.kind == "webhook.received"} == (
            accepted
        )
        assert all(s.consumed and not s.dead for s in stored)
        for session in SESSIONS:
            history = bus.sessions.load(session)
            check_history(history)  # valid for a real provider
            prompts = "\n".join(m.content for m in history if isinstance(m, UserMessage))
            for text in (t for t in accepted if f"event {session} " in t):
                assert prompts.count(f'"{delivery_id(text)}"') == 1, (session, text)
            entries = bus.sessions.entries(session)
            chain = [e.parent_id for e in entries[1:]]
            assert chain == [e.entry_id for e in entries[:-1]], session  # one writer at a time
    finally:
        bus.close()
    assert paused_owner.split(":")[1] == str(workers[1].proc.pid)
