"""Three `heron serve` workers on one PostgreSQL store, each with its own state directory and
workspace, serving 30 sessions from signed webhooks that are all delivered twice, and a
one-shot timer per session falling due while it all happens. One worker is killed -9 with
turns in flight, another is paused (SIGSTOP) past its leases and resumed, and the PostgreSQL
server is restarted once. Afterwards every accepted event was consumed exactly once, every
timer fired once, every history is valid for a provider and is one unbroken chain (no write of
a paused worker's stale epoch landed in a history another worker owned).

The killed worker's own session also holds three cron timers whose slots fell due while it was
down (written overdue right after the kill, as a worker that dies before firing leaves them):
no event wakes that session, yet a surviving worker takes it over once the lease expired and
applies each timer's misfire policy — `fire_once` fires once, `skip` not at all, `catch_up`
once per missed slot — and every timer's next slot is in the future."""

from __future__ import annotations

import asyncio
import json
import signal
import time

import httpx

from heron._support.postgres import open_pool
from heron.always_on.bus.postgres_store import PostgresBusStore
from heron.always_on.triggers.postgres_store import PostgresTimerStore
from heron.always_on.triggers.timers import Misfire, ScheduleKind, TimerRecord
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


def add_timers(url: str, *timers: TimerRecord) -> None:
    pool = open_pool(url, max_size=1)
    try:
        for timer in timers:
            PostgresTimerStore(pool).insert(timer)
    finally:
        pool.close()


def timer(
    timer_id: str,
    session: str,
    next_fire: float,
    *,
    kind: ScheduleKind = "at",
    misfire: Misfire = "fire_once",
) -> TimerRecord:
    return TimerRecord(
        id=timer_id,
        session=session,
        call_id=None,
        message=f"timer {timer_id}",
        kind=kind,
        every_s=None,
        cron="* * * * *" if kind == "cron" else None,
        tz="UTC",
        misfire=misfire,
        next_fire=next_fire,
        fires=0,
        missed=0,
        state="active",
        created_at=next_fire - 300,
        last_fired=None,
    )


def timers_of(url: str, session: str) -> dict[str, TimerRecord]:
    pool = open_pool(url, max_size=1)
    try:
        found = PostgresTimerStore(pool).timers(session, active_only=False)
    finally:
        pool.close()
    return {t.id: t for t in found}


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
    done: set[str] = set()

    def consumed() -> bool:
        with store.pool.connection() as conn:
            rows = conn.execute("SELECT body FROM bus_events WHERE consumed_at IS NOT NULL")
            done.update(json.loads(body)["content"]["text"] for (body,) in rows)
        return texts <= done

    try:
        asyncio.run(poll_until(consumed, "every event consumed", within_s=120, every_s=0.2))
    except AssertionError as timed_out:
        # What a failure in CI needs to be read: the events left and who held their sessions.
        with store.pool.connection() as conn:
            leases = conn.execute(
                "SELECT session, owner, epoch, expires_at FROM session_leases ORDER BY session"
            ).fetchall()
            busy = conn.execute(
                "SELECT pid, state, left(query, 80) FROM pg_stat_activity"
                " WHERE datname = current_database() AND state <> 'idle'"
            ).fetchall()
        raise AssertionError(
            f"{timed_out}: not consumed {sorted(texts - done)}; at {time.time():.1f} the leases"
            f" were {leases}; busy connections {busy}"
        ) from None
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
    start = time.time()
    # One timer per session, falling due one after another through the whole run.
    at_timers = [timer(f"tmr-{s}", s, start + 6 + 0.7 * i) for i, s in enumerate(SESSIONS)]
    add_timers(postgres_url, *at_timers)
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
    killed_at = time.time()
    overdue = killed_at - 150  # three minutes' slots missed while the worker was down
    crons = [
        timer(f"cron-{policy}", "worker-0", overdue, kind="cron", misfire=policy)
        for policy in ("fire_once", "skip", "catch_up")
    ]
    add_timers(postgres_url, *crons)
    wait_consumed(postgres_url, round_(3, [1, 2]) | {t for t in accepted if "round 2" in t})

    def crons_handled() -> bool:
        records = timers_of(postgres_url, "worker-0")
        return all((records[c.id].next_fire or 0) > killed_at for c in crons)

    asyncio.run(poll_until(crons_handled, "the cron timers taken over", within_s=60))

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
    wait_consumed(postgres_url, {t.message for t in at_timers})
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
        fired: dict[str, list[dict[str, object]]] = {}
        for s in stored:
            if s.event.kind == "timer.trigger":
                data = s.event.content.data
                fired.setdefault(str(data["timer_id"]), []).append(data)
        for at in at_timers:
            assert len(fired[at.id]) == 1, at.id  # once across all workers
            record = timers_of(postgres_url, at.session)[at.id]
            assert (record.state, record.fires) == ("done", 1)
        records = timers_of(postgres_url, "worker-0")
        missed = records["cron-fire_once"].missed
        assert missed >= 3 and all(r.missed == missed for r in records.values())
        late: dict[str, list[object]] = {}
        for cron in crons:
            fires = fired.get(cron.id, [])
            slots = [d["scheduled_for"] for d in fires]
            assert len(slots) == len(set(slots)) == records[cron.id].fires  # each slot once
            # The misfired slots by the policy; later slots (the next minute) fire on time.
            late[cron.id] = [d["missed"] for d in fires if "missed" in d]
            assert (records[cron.id].next_fire or 0) > killed_at, cron.id
        assert late == {
            "cron-fire_once": [missed],
            "cron-skip": [],
            "cron-catch_up": [missed] * missed,
        }
        for session in SESSIONS:
            history = bus.sessions.load(session)
            check_history(history)  # valid for a real provider
            prompts = "\n".join(m.content for m in history if isinstance(m, UserMessage))
            for text in (t for t in accepted if f"event {session} " in t):
                assert prompts.count(f'"{delivery_id(text)}"') == 1, (session, text)
            assert prompts.count(f"timer tmr-{session}") == 1, session
            entries = bus.sessions.entries(session)
            chain = [e.parent_id for e in entries[1:]]
            assert chain == [e.entry_id for e in entries[:-1]], session  # one writer at a time
    finally:
        bus.close()
    assert paused_owner.split(":")[1] == str(workers[1].proc.pid)
