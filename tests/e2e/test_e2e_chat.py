"""`heron chat` driven through a pseudo-terminal, as a person would use it.

The chat process gets the terminal as its controlling terminal, so Ctrl-C (byte 0x03) reaches
it as SIGINT exactly when the terminal is not in raw mode — as at a real keyboard.
prompt_toolkit is told not to ask for the cursor position (`PROMPT_TOOLKIT_NO_CPR`), which a
real terminal would answer. Every wait is bounded and ends on text the chat writes; escape
sequences are removed before matching.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import struct
import subprocess
import termios
import time
from collections.abc import Iterator

import pytest

from heron.messages import Message, ToolResultMessage, UserMessage
from heron.models.history_rules import HistoryChecker
from heron.sessions.sqlite_store import SqliteSessionStore
from support.cli import HERON, TIMEOUT_S, Heron
from support.ollama import without_models
from support.protocol_servers import Reply, openai_stream, openai_usage, serve
from support.waiting import wait_until

ESCAPES = re.compile(
    rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-B]|\x1b[=>78]"
)


def _take_terminal() -> None:
    """In the child, after `setsid`: make stdin (the pty) the controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """A `heron` process (`args`: its command line) on a pseudo-terminal of 40 x 120."""

    def __init__(self, heron: Heron, *args: str) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        env = {**heron.env, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"}
        self.proc = subprocess.Popen(
            [*HERON, *args],
            cwd=heron.root,
            env=env,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=_take_terminal,
        )
        os.close(slave)
        self.master = master
        self.raw = b""
        self.screen = ""
        self.position = 0
        self._eof = False

    def expect(self, text: str) -> str:
        """Wait until `text` appears after the previous match; returns what came before it."""
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            found = self.screen.find(text, self.position)
            if found >= 0:
                before = self.screen[self.position : found]
                self.position = found + len(text)
                return before
            if self._eof or not self._read(deadline):
                tail = self.screen[self.position :][-1500:]
                raise AssertionError(f"{text!r} did not appear; the screen since: {tail!r}")

    def send(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def ctrl_c(self) -> None:
        self.send("\x03")

    def wait(self) -> int:
        """Read to the end of the output, then the exit code."""
        deadline = time.monotonic() + TIMEOUT_S
        while not self._eof:
            if not self._read(deadline):
                raise AssertionError(f"heron chat did not exit; screen: {self.screen[-1500:]!r}")
        return self.proc.wait(timeout=TIMEOUT_S)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=TIMEOUT_S)
        os.close(self.master)

    def _read(self, deadline: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return False
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: every holder of the terminal's other end has closed it
            data = b""
        if not data:
            self._eof = True
            return True
        self.raw += data
        self.screen = ESCAPES.sub(b"", self.raw).replace(b"\r", b"").decode(errors="replace")
        return True


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    opened: list[Terminal] = []
    yield opened
    for terminal in opened:
        terminal.close()


def chat(heron: Heron, terminals: list[Terminal], *args: str) -> Terminal:
    """`heron chat ARGS` on a terminal."""
    return start(heron, terminals, "chat", *args)


def start(heron: Heron, terminals: list[Terminal], *args: str) -> Terminal:
    terminal = Terminal(heron, *args)
    terminals.append(terminal)
    return terminal


def stored(heron: Heron, session: str) -> list[Message]:
    store = SqliteSessionStore.open(heron.state_dir)
    try:
        return store.load(session)
    finally:
        store.close()


CHAT_TURNS = [
    {
        "text": "Let me make the file.",
        "tool_calls": [{"id": "m1", "name": "make_file", "arguments": {"name": "out.txt"}}],
    },
    {"text": "Made it.", "expect": {"last_message_contains": "created out.txt"}},
    {"tool_calls": [{"id": "w1", "name": "wait_forever"}]},
    {"text": "never reached"},
]


def test_a_chat_streams_text_asks_approval_shows_cards_and_survives_ctrl_c(
    heron: Heron, terminals: list[Terminal]
) -> None:
    model = heron.script("chat.yaml", CHAT_TURNS)
    term = chat(heron, terminals, "--model", model, "--tools", heron.tools(), "--session", "c1")

    term.expect("heron chat · session c1 (new) · model scripted:chat.yaml")
    term.expect("you>")
    term.send("make a file\r")
    term.expect("Let me make the file.")
    term.expect("? heron wants to run make_file\n  name: out.txt")
    term.expect("allow make_file? [y]es / [n]o / [a]lways:")
    term.send("y\r")
    term.expect("approval yes for make_file by operator:chat")
    term.expect("✔ make_file out.txt  ok")
    term.expect("Made it.")
    term.expect("you>")

    term.send("now wait\r")
    term.expect("⏳ wait_forever")
    term.ctrl_c()
    term.expect("■ wait_forever  interrupted")
    term.expect("cancelled_while_running")
    term.expect("■ cancelled: interrupted by the operator (Ctrl-C)")
    term.expect("you>")

    term.send("/tools\r")
    term.expect("make_file")
    term.send("/session\r")
    term.expect("session c1: 7 messages stored (head entry 7)")
    term.send("/cost\r")
    term.expect("3 model call(s); usage reported for 0")
    term.send("/quit\r")
    assert term.wait() == 0
    term.expect("heron: session c1 — continue it with `heron chat --session c1`")

    assert (heron.root / "out.txt").read_text(encoding="utf-8") == "made by heron\n"
    history = stored(heron, "c1")
    assert [m.role for m in history] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
    ]
    HistoryChecker().check(history)
    interrupted = history[-1]
    assert isinstance(interrupted, ToolResultMessage)
    assert interrupted.content.startswith("[interrupted: cancelled while running]")
    typed = (heron.state_dir / "chat_history").read_text(encoding="utf-8")
    assert "+make a file\n" in typed and "+now wait\n" in typed
    assert (heron.state_dir / "chat_history").stat().st_mode & 0o077 == 0


def test_a_second_ctrl_c_exits_at_once_and_the_session_resumes_without_repair(
    heron: Heron, terminals: list[Terminal]
) -> None:
    turns = [{"tool_calls": [{"id": "s1", "name": "slow_to_stop"}]}, {"text": "resumed fine"}]
    model = heron.script("slow.yaml", turns)
    tools = heron.tools()
    term = chat(heron, terminals, "--model", model, "--tools", tools, "--session", "c2")
    term.expect("you>")
    term.send("stop slowly\r")
    term.expect("⏳ slow_to_stop")
    term.ctrl_c()
    term.expect("slow_to_stop: cancel received")
    term.ctrl_c()
    assert term.wait() == 130
    term.expect("heron: session c2 — continue it with")

    history = stored(heron, "c2")
    assert [m.role for m in history] == ["user", "assistant", "tool"]
    assert "the process ended before this tool finished" in history[-1].content  # type: ignore[union-attr]
    HistoryChecker().check(history)

    again = start(heron, terminals, "sessions", "resume", "c2", "--model", model, "--tools", tools)
    banner = again.expect("you>")
    assert "session c2 (resumed, 3 messages)" in banner
    assert "last: [s1] slow_to_stop: ✘ [interrupted: the process ended" in banner
    assert "ended mid-turn" not in banner  # nothing was left to repair
    again.send("/quit\r")
    assert again.wait() == 0


def test_ctrl_c_at_an_approval_question_says_no_and_cancels_the_step(
    heron: Heron, terminals: list[Terminal]
) -> None:
    turns = [{"tool_calls": [{"id": "m1", "name": "make_file", "arguments": {"name": "no.txt"}}]}]
    model = heron.script("deny.yaml", turns)
    term = chat(heron, terminals, "--model", model, "--tools", heron.tools(), "--session", "c4")
    term.expect("you>")
    term.send("make it\r")
    term.expect("allow make_file? [y]es / [n]o / [a]lways:")
    term.ctrl_c()
    term.expect("approval no for make_file by operator:chat")
    term.expect("■ make_file no.txt  interrupted")
    term.expect("waited for approval; it did not run")
    term.expect("■ cancelled: interrupted by the operator (Ctrl-C)")
    term.expect("you>")
    term.send("/quit\r")
    assert term.wait() == 0

    assert not (heron.root / "no.txt").exists()
    history = stored(heron, "c4")
    assert [m.role for m in history] == ["user", "assistant", "tool"]
    HistoryChecker().check(history)


def test_multi_line_input_and_the_input_history(heron: Heron, terminals: list[Terminal]) -> None:
    lines = "first line\nsecond line\nthird line"
    turns = [
        {"text": "Got three lines.", "expect": {"last_message_contains": lines}},
        {"text": "Got them again.", "expect": {"last_message_contains": lines}},
    ]
    term = chat(heron, terminals, "--model", heron.script("ml.yaml", turns), "--session", "c3")
    term.expect("you>")
    term.send("first line\x1b\r")  # Esc, then Enter: a new line
    term.send("second line\\\r")  # a trailing backslash: a new line
    term.send("third line\r")
    term.expect("Got three lines.")
    term.expect("you>")
    term.send("\x1b[A")  # Up: the previous input, all three lines
    term.send("\r")
    term.expect("Got them again.")
    term.expect("you>")
    term.send("\x04")  # Ctrl-D leaves
    assert term.wait() == 0

    prompts = [m for m in stored(heron, "c3") if isinstance(m, UserMessage)]
    assert [m.content for m in prompts] == [lines, lines]


def test_cost_shows_the_tokens_each_model_call_used(
    heron: Heron, terminals: list[Terminal]
) -> None:
    with serve() as server:
        server.queue(
            Reply(events=openai_stream(text=["Hel", "lo."], usage=openai_usage(12, 3, 2))),
            Reply(events=openai_stream(text=["Again."], usage=openai_usage(20, 1))),
        )
        model = ("--model", "openai-compatible:test-model", "--base-url", f"{server.url}/v1")
        term = chat(heron, terminals, *model)
        term.expect("you>")
        term.send("hi\r")
        term.expect("Hello.")
        term.expect("you>")
        term.send("and again\r")
        term.expect("Again.")
        term.expect("you>")
        term.send("/cost\r")
        term.expect("/cost\n")  # the submitted line; the report follows it
        report = term.expect("you>")
        term.send("/model\r")
        term.expect("model: openai-compatible:test-model")
        term.send("/quit\r")
        assert term.wait() == 0

    assert "2 model call(s); usage reported for 2" in report
    rows = [line.split() for line in report.splitlines() if re.match(r"\s+\d+\s+\w{12}\s", line)]
    assert [row[2:] for row in rows] == [["1", "12", "3", "2"], ["1", "20", "1", "0"]]
    assert "total: input 32, output 4, cached 2" in report


def test_chat_without_a_terminal_says_to_use_run(heron: Heron) -> None:
    done = heron.run("chat", "--model", heron.script("s.yaml", [{"text": "hi"}]))
    assert done.code == 2
    assert done.stderr == (
        "heron: heron chat needs a terminal; in scripts use `heron run --session NAME PROMPT`\n"
    )


def test_chat_without_a_model_names_the_ways_to_choose_one(
    heron: Heron, terminals: list[Terminal]
) -> None:
    without_models(heron.env)
    term = chat(heron, terminals)

    term.expect("heron: no model configured, and none to pick")
    term.expect("--model PROVIDER:MODEL")
    term.expect("`heron demo` plays the scripted tour.")
    assert term.wait() == 2
    assert "heron chat ·" not in term.screen  # no chat was started


def test_chat_takes_the_builtin_sets_and_their_workspace_like_run(
    heron: Heron, terminals: list[Terminal]
) -> None:
    ws = heron.root / "ws"
    ws.mkdir()
    (ws / "notes.md").write_text("# Notes\nThe launch is on Friday.\n", encoding="utf-8")
    turns = [
        {"tool_calls": [{"id": "r1", "name": "read_file", "arguments": {"path": "notes.md"}}]},
        {"text": "It is on Friday.", "expect": {"last_message_contains": "launch is on Friday"}},
    ]
    model = heron.script("read.yaml", turns)
    term = chat(
        heron, terminals, "--model", model, "--builtin", "perception", "--workspace", str(ws)
    )
    term.expect("you>")
    term.send("/tools\r")
    term.expect("read_file")
    term.expect("you>")
    term.send("when is the launch?\r")
    term.expect("✔ read_file notes.md  ok")
    term.expect("It is on Friday.")
    term.expect("you>")
    term.send("/quit\r")
    assert term.wait() == 0


WAITING_TOOL = '''
import asyncio
from pathlib import Path

from heron import tool


@tool(read_only=True)
async def wait_for_file(name: str) -> str:
    """Wait until the file exists (the test creates it)."""
    while not Path(name).exists():
        await asyncio.sleep(0.02)
    return f"{name} is there"
'''


def test_a_line_typed_while_a_tool_runs_is_answered_after_it(
    heron: Heron, terminals: list[Terminal]
) -> None:
    heron.write("waiting.py", WAITING_TOOL)
    turns = [
        {"tool_calls": [{"id": "w1", "name": "wait_for_file", "arguments": {"name": "go"}}]},
        {"text": "Saw your note.", "expect": {"last_message_contains": "also check the logs"}},
    ]
    model = heron.script("queue.yaml", turns)
    term = chat(heron, terminals, "--model", model, "--tools", "waiting.py", "--session", "q1")
    term.expect("you>")
    term.send("wait for go\r")
    term.expect("⏳ wait_for_file")
    term.send("also check the logs\r")
    term.expect("also check the logs")  # echoed by the terminal in line mode
    # The echo is the terminal's: the tool may end only once heron has the line on its bus.
    wait_until(
        lambda: "also check the logs" in heron.run("events", "tail", "--session", "q1").stdout,
        "the typed line on the bus",
    )
    (heron.root / "go").write_text("", encoding="utf-8")
    term.expect("✔ wait_for_file")
    term.expect("Saw your note.")
    term.expect("you>")
    term.send("/quit\r")
    assert term.wait() == 0

    history = stored(heron, "q1")
    assert [m.role for m in history] == ["user", "assistant", "tool", "user", "assistant"]
    HistoryChecker().check(history)


def test_the_interrupt_word_typed_while_a_tool_runs_interrupts_it(
    heron: Heron, terminals: list[Terminal]
) -> None:
    heron.write("waiting.py", WAITING_TOOL)
    turns = [
        {"tool_calls": [{"id": "w1", "name": "wait_for_file", "arguments": {"name": "never"}}]},
        {"text": "Stopped as asked.", "expect": {"last_message_contains": "halt"}},
    ]
    model = heron.script("halt.yaml", turns)
    term = chat(
        heron,
        terminals,
        *("--model", model, "--tools", "waiting.py", "--session", "h1"),
        *("--interrupt-word", "halt"),
    )
    term.expect("you>")
    term.send("wait forever\r")
    term.expect("⏳ wait_for_file")
    term.send("halt\r")
    term.expect("■ wait_for_file never  interrupted")
    term.expect("Stopped as asked.")
    term.expect("you>")
    term.send("/quit\r")
    assert term.wait() == 0

    history = stored(heron, "h1")
    assert [m.role for m in history] == ["user", "assistant", "tool", "user", "assistant"]
    HistoryChecker().check(history)


def _open_request(heron: Heron, call_id: str, amount: int) -> str:
    """A request on the state directory, as `heron serve` leaves one waiting."""
    import asyncio

    from heron.humans.console import ConsoleChannel
    from heron.humans.desk import RequestDesk
    from heron.humans.signing import DecisionKeyStore, DecisionSigner
    from heron.humans.sqlite_store import SqliteRequestStore

    store = SqliteRequestStore.open_dir(heron.state_dir)
    try:
        desk = RequestDesk(
            store,
            signer=DecisionSigner(DecisionKeyStore(heron.state_dir)),
            channels=[ConsoleChannel()],
        )
        request = asyncio.run(
            desk.open_approval(
                session="served",
                call_id=call_id,
                tool="pay",
                arguments={"to": "ACME", "amount": amount},
                gates_call=True,
            )
        )
    finally:
        store.close()
    return request.id


def test_a_chat_shows_the_requests_serve_waits_on_and_answers_them(
    heron: Heron, terminals: list[Terminal]
) -> None:
    first = _open_request(heron, "c1", 9)
    term = chat(heron, terminals, "--model", heron.script("none.yaml", []), "--session", "c9")
    term.expect(f"[{first} waits: pay(amount: 9, to: ACME) — /approve {first} or /deny {first}")
    term.expect("you>")
    second = _open_request(heron, "c2", 7)
    term.send("/approvals\r")
    term.expect(f"  {first}  pay(amount: 9, to: ACME)  (session served, normal, until ")
    term.expect(f"  {second}  pay(amount: 7, to: ACME)  (session served, normal, until ")
    term.send(f"/approve {first} invoice 7 is right\r")
    term.expect(f"{first}: approved by console:")
    term.send(f"/deny {second}\r")
    term.expect(f"{second}: denied by console:")
    term.send(f"/approve {first}\r")
    term.expect(f"not answered: {first} was already answered by console:")
    term.send("/approvals\r")
    term.expect("no request waits for a person")
    term.expect("you>")
    term.send("\x04")  # Ctrl-D leaves
    assert term.wait() == 0

    listed_json = heron.run("approvals", "list", "--status", "all", "--json")
    answers = {r["id"]: (r["outcome"], r["reason"]) for r in json.loads(listed_json.stdout)}
    assert answers == {first: ("approved", "invoice 7 is right"), second: ("denied", None)}
    verified = heron.run("approvals", "verify", first)
    assert verified.code == 0 and verified.stdout.startswith("valid:"), verified.stdout
