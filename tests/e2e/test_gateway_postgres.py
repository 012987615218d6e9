"""Any worker serves any session's event stream: two `heron serve --store <PostgreSQL>` workers
with their gateways on one database. Worker A runs a webhook's turn in its session; a client
connected to worker B watches it live, is cut while the call waits on its approval, and
resumes with `Last-Event-ID` after answering it through B: the union is exactly the run's
events, with the ids A's own stream gives. Worker B polls the stores only once a minute here,
so what reaches it within the test came by `LISTEN`/`NOTIFY` (the bus's and the turn log's)."""

from __future__ import annotations

from heron.sessions.postgres_store import PostgresSessionStore
from support.cli import Heron, Running
from support.gateway import (
    ADMIN,
    CONFIG,
    PAY_TOOL,
    PAY_TURNS,
    SECRET,
    VIEWER,
    Stream,
    approve_the_pending_payment,
    bearer,
    durable,
    is_turn,
    post_webhook,
)
from support.postgres import postgres_server, postgres_url

__all__ = ["postgres_server", "postgres_url"]  # fixtures, found by pytest here

PAID = is_turn("text", text="Paid ACME 120.")


def worker(heron: Heron, name: str, url: str, script: str, poll_s: str) -> Running:
    root = heron.root / name
    (root / "ws").mkdir(parents=True)
    return heron.start(
        "serve",
        "--store",
        url,
        "--state-dir",
        str(root / "state"),
        "--workspace",
        str(root / "ws"),
        "--session",
        name,
        "--model",
        script,
        "--webhook-port",
        "0",
        "--http-port",
        "0",
        "--subscribe",
        "webhook",
        "--poll-interval",
        poll_s,
        "--tools",
        str(heron.root / "pay.py"),
    )


def test_a_client_of_one_worker_watches_a_run_another_worker_executes(
    heron: Heron, postgres_url: str
) -> None:
    heron.env["HERON_WEBHOOK_SECRET"] = SECRET
    heron.env["HERON_GATEWAY_TOKEN"] = ADMIN
    heron.write("pay.py", PAY_TOOL)
    heron.write("heron.toml", CONFIG)
    script = heron.script("s.yaml", PAY_TURNS)
    a = worker(heron, "worker-a", postgres_url, script, "0.1")
    b = worker(heron, "worker-b", postgres_url, script, "60")
    a_started, b_started = (w.wait_for_event("serve_started") for w in (a, b))
    on_b = Stream(f"{b_started['http']}/v1/sessions/worker-a/events", bearer(VIEWER))

    post_webhook(a_started["webhook"], "m1", "please pay ACME 120 for invoice 7")
    first = on_b.read(is_turn("tool_result", id="c_pay"))
    assert first[-1].data["status"] == "awaiting_approval"
    # The request to a human is in the shared store too: answered through B.
    approve_the_pending_payment(b_started["http"])
    second = on_b.read(PAID, last_event_id=first[-1].id)

    on_a = Stream(f"{a_started['http']}/v1/sessions/worker-a/events", bearer(ADMIN)).read(PAID)
    assert durable(first) + durable(second) == durable(on_a)  # the same ids on every worker
    ids = [i for i, _, _ in durable(on_a)]
    assert len(ids) == len(set(ids))
    kinds = [f.data.get("type") or f.data["event"]["kind"] for f in on_a if f.id is not None]
    for expected in ("webhook.received", "tool_call", "tool_result", "tool.result", "text"):
        assert expected in kinds, kinds
    store = PostgresSessionStore.open(postgres_url)
    try:
        with store.pool.connection() as conn:
            row = conn.execute(
                "SELECT owner FROM session_leases WHERE session = 'worker-a'"
            ).fetchone()
    finally:
        store.close()
    assert row is not None and row[0].split(":")[1] == str(a.proc.pid)  # A ran it
    for running in (a, b):
        running.proc.terminate()
    for running in (a, b):
        assert running.finish().code == 0
