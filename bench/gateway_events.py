"""Gateway event delivery: bus append → SSE frame received, with 1 and 100 connected clients;
requests per second of the message endpoint; memory per connected client.

A real `HeronServer` with its gateway runs in this process on uvicorn (loopback), its one
session answered by a function model with one tool round per event (so every event is a real
turn, with its cards and answer on the stream too). The SSE clients run in a child process
(`--client`), so their parsing does not share the server's event loop. Each event is appended
with `BusStore.publish`, its wall time stamped just before; each client records the wall time
it read the event's frame. The server's durable commits are counted on its SQLite connection
(the bus, the histories and the turn log share it): per event, its publish and its turn.

    python bench/gateway_events.py [--events 200] [--clients 1 100] [--interval 0.1]
                                   [--rps-seconds 3]

Runs of `--events 100 --interval 0.1` (2 CPU cores shared with other work, load average 6–9,
so the spread between runs is wide), the turn log committing with the history:

       1 client(s): 100 frames, delivery p50 2.8 ms, p99 27.9 ms; 6.0 commits per event
     100 client(s): 10000 frames, delivery p50 142–198 ms, p99 395–617 ms; 5.5–5.9 commits
    server RSS per connected client: 29 KiB (100 clients)
    POST /v1/sessions/{s}/messages: 95–117 requests/s (16 concurrent)

Before, with the turn log in transactions of its own (the same bench on the previous code):
8.0 commits per event (7.2 with 100 clients, where turns answer several events at once); 1
client p50 2.4–8.1 ms, p99 20–73 ms; 100 clients p50 23–271 ms, p99 68–592 ms; 37–186
requests/s. The commits fall by two per tool round (a call's cards ride on its result's
commit); the latency figures are within the noise of this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

TOKEN = "bench-token"
SESSION = "default"


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# -- the client process -------------------------------------------------------------------


async def client_main(url: str, clients: int, events: int, prefix: str) -> None:
    """Open `clients` streams; print `ready`, then one JSON line of receive times per stream
    (of the events whose marker starts with `prefix`: earlier rounds replay too)."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    connected = asyncio.Event()
    opened = 0
    received: list[dict[str, float]] = [{} for _ in range(clients)]
    limits = httpx.Limits(max_connections=clients + 5)
    async with httpx.AsyncClient(timeout=None, limits=limits, trust_env=False) as http:

        async def one(i: int) -> None:
            nonlocal opened
            async with http.stream("GET", url, headers=headers) as response:
                lines = response.aiter_lines()
                await anext(lines)  # the opening comment: the stream is live
                opened += 1
                if opened == clients:
                    connected.set()
                event = ""
                async for line in lines:
                    if line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: ") and event == "bus":
                        data = json.loads(line[6:])
                        marker = data["event"]["content"]["data"].get("bench")
                        if isinstance(marker, str) and marker.startswith(prefix):
                            received[i][marker] = time.time()
                            if len(received[i]) == events:
                                return

        tasks = [asyncio.ensure_future(one(i)) for i in range(clients)]
        await connected.wait()
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        await asyncio.gather(*tasks)
    sys.stdout.write(json.dumps(received) + "\n")
    sys.stdout.flush()


# -- the server ---------------------------------------------------------------------------


async def serve(state_dir: Path) -> tuple[Any, Any, asyncio.Future[None]]:
    from heron import Agent
    from heron.always_on.server import HeronServer, ServeConfig
    from heron.gateway.app import Gateway
    from heron.gateway.config import GatewayConfig
    from heron.messages import UserMessage
    from heron.models.scripted import FunctionModel, ModelTurn
    from heron.tools.function_tool import tool

    @tool(read_only=True)
    def note(text: str) -> str:
        """Note a message.

        Args:
            text: What to note.
        """
        return f"noted {text}"

    def answer(request: Any) -> ModelTurn | str:
        # One tool round per event (its cards on the stream), then the answer.
        if isinstance(request.messages[-1], UserMessage):
            call = {"name": "note", "arguments": {"text": request.messages[-1].content[:20]}}
            return ModelTurn.model_validate({"text": "Noting.", "tool_calls": [call]})
        return "ok"

    config = GatewayConfig.model_validate(
        {"limits": {"requests_per_minute": 1e9, "burst": 1_000_000, "max_clients": 10_000}}
    )
    gateway = Gateway(config, environ={"HERON_GATEWAY_TOKEN": TOKEN}, poll_interval_s=1.0)
    server = HeronServer(
        ServeConfig(state_dir=state_dir, http_port=0, approvals=None, poll_interval_s=1.0),
        lambda tools: Agent(model=FunctionModel(answer), tools=[*tools, note], autonomy="full"),
        session_sink=gateway.sinks(),
        http_routes=gateway.routes(),
    )
    gateway.server = server
    server.on_close.append(gateway.end_streams)
    await server.start()
    serving = asyncio.ensure_future(server.serve())  # the session answers its events
    return server, gateway, serving


async def deliver(
    server: Any, gateway: Any, url: str, clients: int, events: int, interval: float
) -> dict[str, Any]:
    from heron.always_on.bus.model import BusEvent, EventContent

    # The clients start from now (as after a reconnect), not with a replay of earlier rounds.
    last = await server.bus.events(session=SESSION, limit=1)
    cursor = f"{gateway.log.epoch}.{last[-1].seq if last else 0}.{gateway.log.last(SESSION)}"
    url = f"{url}?after={cursor}"
    before = rss_kib()
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--client",
        url,
        str(clients),
        str(events),
        f"c{clients}-",
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None
    ready = await child.stdout.readline()
    assert ready == b"ready\n", ready
    per_client_kib = (rss_kib() - before) / clients
    commits = Commits()
    server.bus.sessions.conn.set_trace_callback(commits)
    sent: dict[str, float] = {}
    for i in range(events):
        marker = f"c{clients}-e{i}"
        event = BusEvent(
            kind="user.input",
            source="user",
            channel="web",
            session=SESSION,
            content=EventContent(text=marker, data={"bench": marker}),
        )
        sent[marker] = time.time()
        await server.bus.publish(event)
        await asyncio.sleep(interval)  # pacing
    result = json.loads(await child.stdout.read())  # the one line, to the end
    await child.wait()
    server.bus.sessions.conn.set_trace_callback(None)
    latencies = sorted((times[m] - sent[m]) * 1000 for times in result for m in times if m in sent)
    return {
        "clients": clients,
        "frames": len(latencies),
        "p50_ms": statistics.median(latencies),
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "rss_per_client_kib": per_client_kib,
        "commits_per_event": commits.count / events,
    }


class Commits:
    """SQLite trace hook: counts the commits of the server's one connection (each a durable
    write: the bus, the histories and the turn log share it)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, sql: str) -> None:
        self.count += sql.lstrip()[:6].upper() == "COMMIT"


async def message_rate(url: str, seconds: float, concurrency: int = 16) -> float:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    done = 0
    deadline = time.perf_counter() + seconds
    async with httpx.AsyncClient(base_url=url, trust_env=False, headers=headers) as http:

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                response = await http.post(
                    f"/v1/sessions/{SESSION}/messages", json={"text": "hello"}
                )
                assert response.status_code == 202, response.text
                done += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done / (time.perf_counter() - start)


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server, gateway, serving = await serve(Path(tmp))
        url = server.http_url
        stream = f"{url}/v1/sessions/{SESSION}/events"
        try:
            await deliver(server, gateway, stream, 2, 5, 0.02)  # warm-up: imports, connections
            for clients in args.clients:
                r = await deliver(server, gateway, stream, clients, args.events, args.interval)
                print(
                    f"{r['clients']:>4} client(s): {r['frames']} frames, delivery p50 "
                    f"{r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms; "
                    f"server RSS per connected client {r['rss_per_client_kib']:.0f} KiB; "
                    f"{r['commits_per_event']:.1f} commits per event (publish and its turn)"
                )
            rate = await message_rate(url, args.rps_seconds)
            print(f"POST /v1/sessions/{{s}}/messages: {rate:.0f} requests/s (16 concurrent)")
        finally:
            server.stop()
            await serving  # closes the server
            gateway.close()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        asyncio.run(client_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]))
        raise SystemExit(0)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 100])
    parser.add_argument("--rps-seconds", type=float, default=3.0)
    parser.add_argument(
        "--interval", type=float, default=0.1, help="seconds between two appended events"
    )
    asyncio.run(main(parser.parse_args()))
    os._exit(0)
