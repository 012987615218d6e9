"""One process, a thousand agents: `heron serve` hosting 1,000 sessions fed by webhooks.

A real `heron serve` process (scripted model, temporary state directory) and a load generator
on loopback, both bounded in count and time. Prints:

- **ready**: spawn → the first webhook answered `202` (target ≤ 500 ms);
- **memory per idle session**: the server's RSS after every session was woken by one event
  and parked again, minus its RSS before, divided by the sessions (target ≤ 20 KiB);
- **event → model call**: from sending a webhook to the model's first streamed text for that
  session on the server's event stream, p50 / p99 / max, with every event to a parked session
  (so each one wakes it), at the offered rates (target p99 ≤ 20 ms at 1,000 events/s);
- **server CPU per event**: the server process's user + system time (`/proc/<pid>/stat`) over a
  round, from its first event until every session it woke is parked again (HTTP, wake, turn,
  park, event stream), divided by the events.

`--profile FILE` runs the load's server under cProfile timed by its CPU clock (written to FILE
when it stops; the profile inflates every figure, so read it for proportions).

The scripted model is one for the process and keeps every request it saw (a test double's
record), which the memory figure includes.

    python bench/serve_scale.py [--sessions 1000] [--rates 100 1000] [--profile FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SECRET = "bench-serve-scale-secret"
DEADLINE_S = 240.0
"""The whole bench stops after this, whatever is left."""


_PROFILED = """
import cProfile, runpy, sys, time
out, sys.argv = sys.argv[1], sys.argv[2:]
profile = cProfile.Profile(time.process_time)  # CPU, not the wall time other agents take
try:
    profile.runcall(runpy.run_module, sys.argv[0], run_name="__main__", alter_sys=True)
except SystemExit:
    pass
finally:
    profile.dump_stats(out)
"""
"""Runs a module under cProfile timed by the process's CPU clock: `-c _PROFILED OUT MODULE`."""


class Server:
    """`heron serve` in a subprocess, with a thread that timestamps its JSON-lines events."""

    def __init__(
        self, root: Path, turns: int, idle_timeout_s: float, profile: str | None = None
    ) -> None:
        (root / "script.yaml").write_text("turns:\n" + "  - text: ok\n" * turns, encoding="utf-8")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        env = {
            **os.environ,
            "HERON_STATE_DIR": str(root / "state"),
            "XDG_CONFIG_HOME": str(root / "config"),
            "HERON_WEBHOOK_SECRET": SECRET,
        }
        self.spawned = time.perf_counter()
        launch = ["-c", _PROFILED, str(Path(profile).resolve())] if profile else ["-m"]
        self.proc = subprocess.Popen(
            [
                sys.executable, *launch, "heron.cli.main", "serve",
                "--model", "scripted:script.yaml",
                "--webhook-port", str(self.port),
                "--subscribe", "webhook",
                "--idle-timeout", str(idle_timeout_s),
            ],
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.first_text: dict[str, float] = {}
        self.parked: set[str] = set()
        self.awake: set[str] = set()
        self.most_awake = 0
        """The most sessions awake at once (from `session_woken` / `session_parked`)."""
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            now = time.perf_counter()
            try:
                event: dict[str, Any] = json.loads(raw)
            except ValueError:
                continue
            session = event.get("session")
            with self.changed:
                if event.get("type") == "text_delta" and session not in self.first_text:
                    self.first_text[session] = now
                elif event.get("type") == "session_parked":
                    self.parked.add(session)
                    self.awake.discard(session)
                elif event.get("type") == "session_woken":
                    self.parked.discard(session)
                    self.awake.add(session)
                    self.most_awake = max(self.most_awake, len(self.awake))
                self.changed.notify_all()

    def rss_kib(self, field: str = "VmRSS") -> int:
        """The server's resident memory now (`VmHWM`: its peak so far)."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text(encoding="ascii")
        return int(
            next(line for line in status.splitlines() if line.startswith(f"{field}:")).split()[1]
        )

    def cpu_s(self) -> float:
        """The server's user + system CPU time so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text(encoding="ascii")
        utime, stime = fields.rsplit(")", 1)[1].split()[11:13]
        return (int(utime) + int(stime)) / os.sysconf("SC_CLK_TCK")

    def wait(self, done: Any, timeout_s: float) -> bool:
        with self.changed:
            return self.changed.wait_for(done, timeout=timeout_s)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def signed_request(port: int, session: str, event_id: str) -> bytes:
    body = json.dumps({"id": event_id, "text": "ping"}).encode()
    ts = str(int(time.time()))
    mac = hmac.new(SECRET.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return (
        f"POST /webhook/{session} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"X-Heron-Timestamp: {ts}\r\nX-Heron-Signature: sha256={mac}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


async def post(port: int, session: str, event_id: str) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(signed_request(port, session, event_id))
        await writer.drain()
        status = await reader.readline()
        return int(status.split()[1])
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def ready_ms(server: Server) -> float:
    while time.perf_counter() - server.spawned < 60:
        try:
            if await post(server.port, "probe", "probe-1") == 202:
                return (time.perf_counter() - server.spawned) * 1000
        except OSError:
            await asyncio.sleep(0.005)
    raise RuntimeError("heron serve did not accept a webhook within 60 s")


async def offer(server: Server, sessions: list[str], rate: float, tag: str) -> list[float]:
    """One event per session at `rate` events/s (open loop); latencies in ms."""
    sent: dict[str, float] = {}
    with server.changed:
        for name in sessions:
            server.first_text.pop(name, None)
    start = time.perf_counter()

    async def one(i: int, name: str) -> None:
        await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
        sent[name] = time.perf_counter()
        status = await post(server.port, name, f"{tag}-{name}")
        assert status == 202, status

    await asyncio.gather(*(one(i, n) for i, n in enumerate(sessions)))
    left = DEADLINE_S / 4
    await asyncio.to_thread(
        server.wait, lambda: all(n in server.first_text for n in sessions), left
    )
    return [(server.first_text[n] - sent[n]) * 1000 for n in sessions if n in server.first_text]


def report(label: str, latencies: list[float], expected: int) -> None:
    ordered = sorted(latencies)
    if not ordered:
        print(f"{label:<34} no model call seen")
        return
    p99 = ordered[max(0, int(len(ordered) * 0.99) - 1)]
    print(
        f"{label:<34} p50 {statistics.median(ordered):7.1f} ms   p99 {p99:7.1f} ms   "
        f"max {ordered[-1]:7.1f} ms   ({len(ordered)}/{expected} answered)"
    )


async def run(sessions_n: int, rates: list[float], profile: str | None) -> None:
    names = [f"s{i:04d}" for i in range(sessions_n)]
    idle_s = 1.0
    with tempfile.TemporaryDirectory() as tmp:
        # Readiness on its own server with a one-turn script: the load's script is thousands
        # of turns, and reading it is the test double's start-up, not heron's.
        (Path(tmp) / "ready").mkdir()
        probe = Server(Path(tmp) / "ready", turns=1, idle_timeout_s=idle_s)
        try:
            ready = await ready_ms(probe)
        finally:
            probe.stop()
        print(f"heron serve ready (spawn → first 202)  {ready:7.0f} ms   target ≤ 500")
        (Path(tmp) / "load").mkdir()
        server = Server(
            Path(tmp) / "load",
            turns=sessions_n * (2 + len(rates)) + 10,
            idle_timeout_s=idle_s,
            profile=profile,
        )
        try:
            await ready_ms(server)
            await asyncio.to_thread(server.wait, lambda: "probe" in server.parked, 30)
            before = server.rss_kib()
            warm = await offer(server, names, 500, "warm")
            parked = await asyncio.to_thread(
                server.wait, lambda: server.parked.issuperset(names), 60
            )
            after = server.rss_kib()
            print(
                f"memory per idle session             {(after - before) / sessions_n:7.1f} KiB   "
                f"target ≤ 20 ({sessions_n} sessions woken once and "
                f"{'parked' if parked else 'NOT all parked'}; RSS {before} → {after} KiB, "
                f"peak {server.rss_kib('VmHWM')} KiB with {server.most_awake} awake at once)"
            )
            report("first wake of each (500/s)", warm, sessions_n)
            for round_no, rate in enumerate(rates, start=1):
                cpu = server.cpu_s()
                latencies = await offer(server, names, rate, f"r{round_no}")
                report(f"event → model call at {rate:g}/s", latencies, sessions_n)
                await asyncio.to_thread(server.wait, lambda: server.parked.issuperset(names), 60)
                # Parking waits out the idle timeout: the CPU of a loop at rest is in it too.
                per_event = (server.cpu_s() - cpu) * 1000 / sessions_n
                print(f"{'':34} server CPU per event (HTTP, wake, turn, park): {per_event:.2f} ms")
                # Growing again per round means memory kept per wake, flat means allocator peak.
                print(f"{'':34} RSS after the round, all parked: {server.rss_kib()} KiB")
            print("target: p99 ≤ 20 ms at 1,000 events/s")
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--rates", type=float, nargs="+", default=[100.0, 1000.0])
    parser.add_argument("--profile", help="run the load's server under cProfile into this file")
    args = parser.parse_args()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    asyncio.run(asyncio.wait_for(run(args.sessions, args.rates, args.profile), DEADLINE_S))
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
