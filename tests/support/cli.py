"""Helpers for end-to-end tests: the real `heron` command, run in a scratch directory.

Every process gets the scratch directory as its working directory, its own state directory
(`HERON_STATE_DIR`), its own user configuration directory (`XDG_CONFIG_HOME`) and a new session
(no controlling terminal), so nothing touches the real home and no approval prompt can block.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

HERON = (sys.executable, "-m", "heron.cli.main")
TIMEOUT_S = 30.0
"""Upper bound for any single process or wait; tests never get near it when heron works."""

TOOLS_SOURCE = Path(__file__).resolve().parents[1] / "e2e" / "e2e_tools.py"
RECEIPT = re.compile(r"heron-receipt-[0-9a-f]{8}-[0-9]+-[A-Za-z0-9_-]{43}")

Event = dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class Finished:
    """A finished `heron` process."""

    code: int
    stdout: str
    stderr: str

    def events(self) -> list[Event]:
        return parse_events(self.stdout)


def parse_events(stdout: str) -> list[Event]:
    """Every stdout line is one JSON event object with a `type`."""
    events: list[Event] = []
    for line in stdout.splitlines():
        event = json.loads(line)
        assert isinstance(event, dict) and "type" in event, line
        events.append(event)
    return events


def stable(events: Iterable[Event]) -> list[Event]:
    """Events without the fields that change from run to run, after checking them.

    All events share one non-empty `turn_id`; durations are non-negative numbers; receipts are
    well-formed and shown as `<receipt>`.
    """
    events = list(events)
    turn_ids = {e.get("turn_id") for e in events}
    assert len(turn_ids) == 1 and all(turn_ids), turn_ids
    out: list[Event] = []
    for event in events:
        kept = {k: v for k, v in event.items() if k not in ("turn_id", "duration_ms")}
        if "duration_ms" in event:
            assert event["duration_ms"] >= 0, event
        if "receipt" in kept:
            assert RECEIPT.fullmatch(kept["receipt"]), kept
            kept["receipt"] = "<receipt>"
        out.append(kept)
    return out


def assert_one_result_per_call(events: list[Event]) -> None:
    """Each `tool_call` id has exactly one `tool_result`, after it, and nothing else has one."""
    calls = Counter(e["id"] for e in events if e["type"] == "tool_call")
    results = Counter(e["id"] for e in events if e["type"] == "tool_result")
    assert calls == results, (calls, results)
    assert set(calls.values()) <= {1}, calls
    for call_id in calls:
        pending = next(
            i for i, e in enumerate(events) if e["type"] == "tool_call" and e["id"] == call_id
        )
        final = next(
            i for i, e in enumerate(events) if e["type"] == "tool_result" and e["id"] == call_id
        )
        assert pending < final, call_id


class Running:
    """A `heron` process whose output is read in the background, so every wait is bounded."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.seen: list[Event] = []
        self._threads: list[threading.Thread] = []
        self._stdout = self._reader(proc.stdout)
        self._stderr = self._reader(proc.stderr)
        self._stderr_lines: list[str] = []

    def _reader(self, stream: IO[str] | None) -> queue.Queue[str | None]:
        lines: queue.Queue[str | None] = queue.Queue()
        assert stream is not None

        def pump() -> None:
            for line in stream:
                lines.put(line)
            lines.put(None)

        thread = threading.Thread(target=pump, daemon=True)
        thread.start()
        self._threads.append(thread)
        return lines

    def next_event(self) -> Event:
        line = _get(self._stdout, f"no event within {TIMEOUT_S} s; events so far: {self.seen}")
        assert line is not None, (
            f"heron ended early; events so far: {self.seen}{self._ending(stderr_read=False)}"
        )
        event = json.loads(line)
        assert isinstance(event, dict)
        self.seen.append(event)
        return event

    def wait_for_event(self, type_: str, **fields: Any) -> Event:
        """Read events until one of this type with these field values arrives."""
        while True:
            event = self.next_event()
            if event["type"] == type_ and all(event.get(k) == v for k, v in fields.items()):
                return event

    def wait_for_stderr(self, text: str) -> None:
        while True:
            line = _get(self._stderr, f"{text!r} not on stderr within {TIMEOUT_S} s")
            assert line is not None, (
                f"heron ended before writing {text!r} to stderr{self._ending(stderr_read=True)}"
            )
            self._stderr_lines.append(line)
            if text in line:
                return

    def _ending(self, *, stderr_read: bool) -> str:
        """How the process ended, with its stderr: a failure seen only on another machine
        explains itself. `stderr_read`: the stderr reader already reached the end."""
        try:
            code = self.proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = None
        rest = "" if stderr_read or code is None else "".join(_drain(self._stderr))
        return f"; exit {code}; stderr:\n{''.join(self._stderr_lines)}{rest}"

    def interrupt(self) -> None:
        """What Ctrl-C does: SIGINT to the process."""
        self.proc.send_signal(signal.SIGINT)

    def finish(self, timeout: float = TIMEOUT_S) -> Finished:
        """Wait for the exit; the result's stdout holds every event, read earlier or not."""
        code = self.proc.wait(timeout=timeout)
        for line in _drain(self._stdout):
            self.seen.append(json.loads(line))
        stderr = "".join([*self._stderr_lines, *_drain(self._stderr)])
        self.close()
        stdout = "".join(json.dumps(e) + "\n" for e in self.seen)
        return Finished(code=code, stdout=stdout, stderr=stderr)

    def close(self) -> None:
        """Kill the process if it still runs, then release its pipes once the readers are done."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=TIMEOUT_S)
        for thread in self._threads:
            thread.join(timeout=TIMEOUT_S)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def _get(lines: queue.Queue[str | None], failure: str) -> str | None:
    try:
        return lines.get(timeout=TIMEOUT_S)
    except queue.Empty:
        raise AssertionError(failure) from None


def _drain(lines: queue.Queue[str | None]) -> Iterator[str]:
    while (line := _get(lines, "heron's output did not end")) is not None:
        yield line


class Heron:
    """The `heron` command bound to one scratch directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.state_dir = root / "state"
        self.config_home = root / "xdg-config"
        self.env = {
            **os.environ,
            "HERON_STATE_DIR": str(self.state_dir),
            "XDG_CONFIG_HOME": str(self.config_home),
            "XDG_STATE_HOME": str(root / "xdg-state"),
            "XDG_CACHE_HOME": str(root / "xdg-cache"),
            # A crash (SIGSEGV, SIGBUS) prints the Python stack on stderr, which a failure shows.
            "PYTHONFAULTHANDLER": "1",
            "NO_COLOR": "1",
            "COLUMNS": "120",
        }
        self._started: list[Running] = []

    def run(self, *args: str) -> Finished:
        proc = subprocess.run(
            [*HERON, *args],
            cwd=self.root,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            start_new_session=True,
        )
        return Finished(code=proc.returncode, stdout=proc.stdout, stderr=proc.stderr)

    def start(self, *args: str) -> Running:
        proc = subprocess.Popen(
            [*HERON, *args],
            cwd=self.root,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        running = Running(proc)
        self._started.append(running)
        return running

    def run_turn(self, model: str, *flags: str, prompt: str = "go") -> Finished:
        """`heron run PROMPT --model MODEL --tools tools.py --events jsonl FLAGS...`"""
        return self.run("run", prompt, *self._turn_args(model), *flags)

    def start_turn(self, model: str, *flags: str, prompt: str = "go") -> Running:
        """`run_turn`, left running in the background."""
        return self.start("run", prompt, *self._turn_args(model), *flags)

    def start_serve(self, model: str, *flags: str, subscribe: str = "webhook") -> Running:
        """`heron serve --model MODEL --webhook-port 0 --subscribe SUBSCRIBE --poll-interval 0.1
        FLAGS...`: the always-on agent on a free webhook port, polling its channels often."""
        return self.start(
            "serve",
            "--model",
            model,
            "--webhook-port",
            "0",
            "--subscribe",
            subscribe,
            "--poll-interval",
            "0.1",
            *flags,
        )

    def _turn_args(self, model: str) -> list[str]:
        return ["--model", model, "--tools", self.tools(), "--events", "jsonl"]

    def verify_receipt(
        self, receipt: str, *, tool: str, arguments: dict[str, Any], output: str, state_dir: Path
    ) -> Finished:
        """`heron receipts verify RECEIPT --tool T --args JSON --output TEXT --state-dir DIR`"""
        args = ["--tool", tool, "--args", json.dumps(arguments), "--output", output]
        return self.run("receipts", "verify", receipt, *args, "--state-dir", str(state_dir))

    def stop_all(self) -> None:
        """Kill processes this helper started that still run, and close their pipes (teardown)."""
        for running in self._started:
            running.close()

    def write(self, name: str, text: str) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def tools(self, name: str = "tools.py") -> str:
        """Copy the e2e tools into the scratch directory; returns the `--tools` value."""
        shutil.copyfile(TOOLS_SOURCE, self.root / name)
        return name

    def script(self, name: str, turns: list[dict[str, Any]], *, protocol: str = "native") -> str:
        """Write a model script (YAML or JSON by suffix); returns the `--model` value."""
        data = {"protocol": protocol, "turns": turns}
        text = json.dumps(data) if name.endswith(".json") else yaml.safe_dump(data)
        self.write(name, text)
        return f"scripted:{name}"
