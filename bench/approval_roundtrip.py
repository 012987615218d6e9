"""Approval round trip over the console and webhook channels, and what a pending request costs
to hold.

Round trip, with no human think time: a gated call opens a durable request (`RequestDesk.
open_approval`: stored and delivered to the console channel), an operator answers it from
another connection to the state directory — as `heron approvals approve` does from another
terminal — and the serving process's watcher (`EndingReporter.watch`, polling the store every
`--interval` seconds) notices the decision and starts the tool. Three spans are timed:
open (request created and delivered), answer (the compare-and-set decision, signed), pickup
(decision stored → tool started). `--cli N` also answers N requests with a real
`heron approvals approve` process (its start-up included). Each answer here lands just after a
poll, so pickup shows the worst case: one watcher interval (`heron serve --poll-interval`).

Webhook: the same with the request delivered as heron's signed JSON to a webhook approver (a
real HTTP server on loopback records when each POST arrives) and answered as `webhook:ops`;
delivered = the POST received by the approver's endpoint.

Memory: `--pending` requests are opened and left pending in one process; Python's traced
memory and the process's resident set are measured before and after, and the database's size
per request after a checkpoint. A pending request is a row, not a future: the process holds
nothing per request.

    python bench/approval_roundtrip.py [--rounds 200] [--interval 0.05] [--cli 10] [--pending 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from heron import Agent, ScriptedModel
from heron._support.clock import RealClock
from heron._support.vocabulary import HumanDecision
from heron.collaboration.tokens import MessageKeyStore, TokenSigner
from heron.collaboration.webhook_requests import WebhookRequestChannel
from heron.humans.config import ApprovalsConfig
from heron.humans.console import ConsoleChannel
from heron.humans.desk import RequestDesk
from heron.humans.outcomes import EndingReporter, RequestEnding, SessionAgent
from heron.humans.signing import DecisionKeyStore, DecisionSigner
from heron.humans.sqlite_store import SqliteRequestStore
from heron.humans.store import HumanRequest
from heron.safety.idempotency import IdempotencyStore
from heron.safety.sqlite_idempotency import SqliteIdempotencyLedger
from heron.tools.function_tool import tool

STARTED: dict[str, float] = {}


@tool(destructive=True)
def pay(ref: str, amount: int) -> str:
    """Pay an invoice.

    Args:
        ref: The invoice.
        amount: How much.
    """
    STARTED[ref] = time.perf_counter()
    return f"paid {ref}"


def desk_on(state_dir: Path) -> RequestDesk:
    return RequestDesk(
        SqliteRequestStore.open_dir(state_dir),
        signer=DecisionSigner(DecisionKeyStore(state_dir)),
        channels=[ConsoleChannel()],
        approval_timeout_s=3600.0,
    )


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def show(name: str, seconds: list[float]) -> None:
    ms = [s * 1000 for s in seconds]
    print(
        f"  {name:<28} p50 {statistics.median(ms):8.2f} ms   p99 {pct(ms, 0.99):8.2f} ms"
        f"   (n={len(ms)})"
    )


async def gated_pay(desk: RequestDesk, ref: str, n: int) -> HumanRequest:
    """The engine's gate asking about `pay(ref, n)`: a durable request, delivered."""
    return await desk.open_approval(
        session="bench",
        call_id=f"call-{ref}",
        tool="pay",
        arguments={"ref": ref, "amount": n},
        gates_call=True,
    )


def watch(
    serving: RequestDesk, state_dir: Path, interval: float
) -> tuple[asyncio.Queue[RequestEnding], asyncio.Future[None]]:
    """The serving process's watcher: it runs each approved `pay` and queues its ending."""
    done: asyncio.Queue[RequestEnding] = asyncio.Queue()

    async def publish(ending: RequestEnding) -> None:
        await done.put(ending)

    agent = SessionAgent(Agent(model=ScriptedModel([]), tools=[pay]))
    reporter = EndingReporter(
        serving.store,
        sessions=lambda r: agent,
        idempotency=IdempotencyStore(SqliteIdempotencyLedger(state_dir)),
        publish=publish,
    )
    watcher = asyncio.ensure_future(
        reporter.watch(expire=serving.expire, clock=RealClock(), interval_s=interval)
    )
    return done, watcher


async def round_trips(state_dir: Path, rounds: int, interval: float, cli: int) -> None:
    serving = desk_on(state_dir)  # the process that asked (serve)
    operator = desk_on(state_dir)  # another terminal: its own connection
    done, watcher = watch(serving, state_dir, interval)
    opened: list[float] = []
    answered: list[float] = []
    pickup: list[float] = []
    total: list[float] = []
    try:
        for n in range(rounds):
            ref = f"inv-{n}"
            t0 = time.perf_counter()
            request = await gated_pay(serving, ref, n)
            t1 = time.perf_counter()
            operator.decide(request.id, HumanDecision.yes(), channel="console", name="bench")
            t2 = time.perf_counter()
            await done.get()
            opened.append(t1 - t0)
            answered.append(t2 - t1)
            pickup.append(STARTED[ref] - t2)
            total.append(STARTED[ref] - t0)
        print(f"console round trip, watcher interval {interval * 1000:g} ms:")
        show("open (store + deliver)", opened)
        show("answer (signed CAS)", answered)
        show("pickup (stored → started)", pickup)
        show("created → tool started", total)
        if cli:
            env = {**os.environ, "HERON_STATE_DIR": str(state_dir)}
            spans: list[float] = []
            for n in range(cli):
                ref = f"cli-{n}"
                request = await gated_pay(serving, ref, n)
                t0 = time.perf_counter()
                await asyncio.to_thread(
                    subprocess.run,
                    [sys.executable, "-m", "heron.cli.main", "approvals", "approve", request.id],
                    env=env,
                    check=True,
                    capture_output=True,
                )
                await done.get()
                spans.append(STARTED[ref] - t0)
            print("with a real `heron approvals approve` process:")
            show("CLI start → tool started", spans)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)


class _Receiver:
    """A loopback endpoint that notes when each request POST arrives."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self.event = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.arrived[json.loads(body)["request"]["id"]] = time.perf_counter()
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()
                receiver.event.set()

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


async def webhook_round_trips(state_dir: Path, rounds: int, interval: float) -> None:
    receiver = _Receiver()
    channel = WebhookRequestChannel(
        {"ops": receiver.url}, signer=TokenSigner(MessageKeyStore(state_dir))
    )
    serving = RequestDesk(
        SqliteRequestStore.open_dir(state_dir),
        signer=DecisionSigner(DecisionKeyStore(state_dir)),
        config=ApprovalsConfig.model_validate({"approvers": {"webhook": ["ops"]}}),
        channels=[channel],
        approval_timeout_s=3600.0,
    )
    done, watcher = watch(serving, state_dir, interval)
    delivered: list[float] = []
    total: list[float] = []
    try:
        for n in range(rounds):
            ref = f"hook-{n}"
            t0 = time.perf_counter()
            request = await gated_pay(serving, ref, n)
            serving.decide(request.id, HumanDecision.yes(), channel="webhook", name="ops")
            await done.get()
            delivered.append(receiver.arrived[request.id] - t0)
            total.append(STARTED[ref] - t0)
        print(f"webhook round trip, watcher interval {interval * 1000:g} ms:")
        show("created → POST received", delivered)
        show("created → tool started", total)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        receiver.server.shutdown()


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def held(state_dir: Path, pending: int) -> None:
    desk = desk_on(state_dir)
    args: dict[str, Any] = {"ref": "x", "amount": 0, "note": "n" * 200}
    await desk.open_approval(session="warm", call_id="w", tool="pay", arguments=args)
    gc.collect()
    tracemalloc.start()
    before_traced, before_rss = tracemalloc.get_traced_memory()[0], rss_bytes()
    for n in range(pending):
        await desk.open_approval(
            session="hold", call_id=f"c{n}", tool="pay", arguments={**args, "amount": n}
        )
    gc.collect()
    after_traced, after_rss = tracemalloc.get_traced_memory()[0], rss_bytes()
    tracemalloc.stop()
    assert len(desk.store.list(statuses={"input_required"}, limit=pending + 10)) == pending + 1
    db = state_dir / "heron.db"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = db.stat().st_size
    print(f"{pending} pending requests held by one process:")
    print(f"  Python memory retained     {(after_traced - before_traced) / pending:8.1f} B/request")
    print(f"  resident set growth        {(after_rss - before_rss) / pending:8.1f} B/request")
    print(f"  database (whole file)      {size / (pending + 1):8.1f} B/request")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--cli", type=int, default=10)
    parser.add_argument("--pending", type=int, default=5000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(round_trips(Path(tmp) / "rt", args.rounds, args.interval, args.cli))
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(webhook_round_trips(Path(tmp) / "hook", args.rounds, args.interval))
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(held(Path(tmp) / "held", args.pending))


if __name__ == "__main__":
    main()
