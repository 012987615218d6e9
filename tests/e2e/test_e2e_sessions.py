"""Durable sessions at the command line: `heron run --session`, resume repair after a killed
process, one writer per session, `heron sessions …` and the `heron audit` trail."""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any

from heron.messages import (
    AssistantMessage,
    Message,
    ToolCallPart,
    ToolResultMessage,
    UserMessage,
)
from heron.models.history_rules import HistoryChecker
from heron.sessions.sqlite_store import SqliteSessionStore
from heron.sessions.store import MESSAGE
from support.cli import Heron

WAIT = [{"text": "Waiting.", "tool_calls": [{"id": "w1", "name": "wait_forever"}]}]
ECHO = [
    {"text": "Echoing.", "tool_calls": [{"id": "e1", "name": "echo", "arguments": {"text": "hi"}}]},
    {"text": "It said hi.", "expect": {"last_message_contains": "hi"}},
]


def stored(heron: Heron, session: str) -> list[dict[str, Any]]:
    done = heron.run("sessions", "show", session, "--json")
    assert done.code == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def messages(heron: Heron, session: str) -> list[Message]:
    return [MESSAGE.validate_python(entry["message"]) for entry in stored(heron, session)]


def test_a_second_run_in_a_session_continues_its_history(heron: Heron) -> None:
    first = heron.run_turn(heron.script("one.yaml", ECHO), "--session", "s", prompt="say hi")
    second_script = [{"text": "You asked me to say hi.", "expect": {"last_message_contains": "?"}}]
    second = heron.run_turn(
        heron.script("two.yaml", second_script), "--session", "s", prompt="what did I ask?"
    )

    assert (first.code, second.code) == (0, 0), first.stderr + second.stderr
    assert first.stderr == second.stderr == ""  # JSON mode, no terminal: nothing to announce
    history = messages(heron, "s")
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"] * 1 + [
        "user",
        "assistant",
    ]
    HistoryChecker().check(history)
    entries = stored(heron, "s")
    assert [e["parent_id"] for e in entries][1:] == [e["entry_id"] for e in entries][:-1]
    listing = heron.run("sessions", "list", "--json")
    assert [json.loads(line)["session"] for line in listing.stdout.splitlines()] == ["s"]


def test_a_run_without_a_session_gets_a_new_one_and_says_so(heron: Heron) -> None:
    done = heron.run(
        "run",
        "hello",
        "--model",
        heron.script("s.yaml", [{"text": "Hello."}]),
        "--events",
        "pretty",
    )

    assert done.code == 0, done.stderr
    match = re.fullmatch(
        r"heron: session (\S+) — continue it with `heron chat --session \1`\n", done.stderr
    )
    assert match, done.stderr
    listing = [
        json.loads(line) for line in heron.run("sessions", "list", "--json").stdout.splitlines()
    ]
    assert [(row["session"], row["entries"]) for row in listing] == [(match.group(1), 2)]


def test_a_second_process_on_a_busy_session_is_refused_and_the_first_is_untouched(
    heron: Heron,
) -> None:
    first = heron.start_turn(heron.script("wait.yaml", WAIT), "--session", "s")
    first.wait_for_event("tool_call", id="w1")

    second = heron.run_turn(heron.script("echo.yaml", ECHO), "--session", "s")

    assert second.code == 1
    assert second.stdout == ""
    assert second.stderr == (
        f"heron: session 's' is in use by another heron process (pid {first.proc.pid}); "
        "refusing to write to it at the same time — wait for it to end, or fork the session "
        "(`heron sessions fork`)\n"
    )
    first.interrupt()
    assert first.finish().code == 130
    history = messages(heron, "s")
    assert [m.role for m in history] == ["user", "assistant", "tool"]
    HistoryChecker().check(history)


def test_a_session_killed_mid_call_is_repaired_on_resume_and_the_model_accepts_it(
    heron: Heron,
) -> None:
    block = [{"text": "Blocking.", "tool_calls": [{"id": "b1", "name": "block_thread"}]}]
    running = heron.start_turn(heron.script("block.yaml", block), "--session", "s")
    running.wait_for_stderr("block_thread started")  # the call runs: its audit row exists
    running.proc.kill()
    running.finish()
    assert [m.role for m in messages(heron, "s")] == ["user", "assistant"]

    # The scripted model checks the whole history against the providers' rules.
    resume = [{"text": "The wait was cut short.", "expect": {"last_role": "user"}}]
    done = heron.run_turn(heron.script("resume.yaml", resume), "--session", "s", prompt="again")

    assert done.code == 0, done.stderr
    assert done.stderr == (
        "heron: session 's' ended mid-turn last time; closed 1 open tool call(s) as "
        "interrupted: block_thread (b1)\n"
    )
    history = messages(heron, "s")
    assert [m.role for m in history] == ["user", "assistant", "tool", "user", "assistant"]
    repaired = history[2]
    assert isinstance(repaired, ToolResultMessage) and repaired.is_error
    assert "interrupted: the process ended before this tool finished" in repaired.content
    audit = heron.run("audit", "--json", "--session", "s")
    assert [(r["call_id"], r["status"]) for r in map(json.loads, audit.stdout.splitlines())] == [
        ("b1", "lost")
    ]


def test_resume_repair_only_closes_open_calls_without_running_a_model(heron: Heron) -> None:
    running = heron.start_turn(heron.script("wait.yaml", WAIT), "--session", "s")
    running.wait_for_event("tool_call", id="w1")
    running.proc.kill()
    running.finish()

    show = heron.run("sessions", "show", "s")
    assert "(ended mid-turn: 1 tool call(s) without a result" in show.stdout
    done = heron.run("sessions", "resume", "s", "--repair-only")
    again = heron.run("sessions", "resume", "s", "--repair-only")

    assert done.code == 0, done.stderr
    assert done.stdout == "session s: appended 1 interrupted result(s); head is now entry 3\n"
    assert again.stdout == "session s: nothing to repair\n"
    HistoryChecker().check(messages(heron, "s"))
    missing = heron.run("sessions", "resume", "nope", "--repair-only")
    assert (missing.code, missing.stderr) == (
        2,
        "heron: no session named 'nope'; see `heron sessions list`\n",
    )


def test_export_import_and_fork_copy_histories_and_refuse_duplicates(heron: Heron) -> None:
    assert heron.run_turn(heron.script("echo.yaml", ECHO), "--session", "s").code == 0
    exported = heron.run("sessions", "export", "s", "-o", "s.jsonl")
    assert exported.code == 0, exported.stderr

    clash = heron.run("sessions", "import", "s.jsonl")
    imported = heron.run("sessions", "import", "s.jsonl", "--as", "t")
    twice = heron.run("sessions", "import", "s.jsonl", "--as", "t")
    forked = heron.run("sessions", "fork", "s", "u", "--at", "2")

    assert (clash.code, clash.stderr) == (
        1,
        "heron: session 's' already exists (4 entries); refusing to duplicate or mix "
        "histories — choose another name\n",
    )
    assert (
        imported.code == 0 and imported.stdout == "imported 4 entries as session t (new ids 5..8)\n"
    )
    assert twice.code == 1 and "session 't' already exists" in twice.stderr
    assert forked.stdout == "forked s into u: 2 entries (new ids 9..10)\n"
    assert messages(heron, "t") == messages(heron, "s")
    assert messages(heron, "u") == messages(heron, "s")[:2]
    assert [e["timestamp"] for e in stored(heron, "t")] == [
        e["timestamp"] for e in stored(heron, "s")
    ]

    lines = (heron.root / "s.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    heron.write("dup.jsonl", "".join([*lines[:2], lines[1]]))
    bad = heron.run("sessions", "import", "dup.jsonl", "--as", "v")
    assert bad.code == 1
    assert bad.stderr == (
        "heron: dup.jsonl is not a valid session export: line 3: entry id 2 clashes with "
        "line 2; every entry id appears once\n"
    )
    assert heron.run("sessions", "show", "v").code == 2


def test_the_audit_trail_records_who_ran_what_in_which_session_and_why(heron: Heron) -> None:
    assert heron.run_turn(heron.script("echo.yaml", ECHO), "--session", "s").code == 0

    done = heron.run("audit", "--json", "--tool", "echo", "--since", "1h")
    other = heron.run("audit", "--json", "--session", "elsewhere")
    text = heron.run("audit")
    bad = heron.run("audit", "--since", "last tuesday")

    assert done.code == 0, done.stderr
    [row] = [json.loads(line) for line in done.stdout.splitlines()]
    assert {k: row[k] for k in ("tool", "call_id", "session", "channel", "agent", "why")} == {
        "tool": "echo",
        "call_id": "e1",
        "session": "s",
        "channel": "cli",
        "agent": "default",
        "why": "Echoing.",
    }
    assert (row["status"], row["success"], row["result"], row["arguments"]) == (
        "ok",
        True,
        "hi",
        '{"text":"hi"}',
    )
    assert row["operator"] and row["turn_id"] and row["duration_ms"] >= 0
    assert other.stdout == ""
    assert "echo" in text.stdout and "why: Echoing." in text.stdout
    assert bad.code == 2 and bad.stderr.startswith("heron: --since: cannot read 'last tuesday'")


def test_a_history_broken_before_its_end_is_refused_with_a_way_out(heron: Heron) -> None:
    store = SqliteSessionStore.open(heron.state_dir)
    call = ToolCallPart(id="c1", name="echo", arguments={"text": "x"})
    store.append("broken", [UserMessage(content="go"), AssistantMessage(tool_calls=(call,))])
    store.append("broken", [UserMessage(content="hello?")])  # a foreign writer skipped the result
    store.close()

    done = heron.run_turn(heron.script("s.yaml", ECHO), "--session", "broken")

    assert done.code == 1
    assert done.stderr == (
        "heron: session 'broken' cannot be resumed: the stored history is not valid: message 2 "
        "(user) comes before the results of tool calls c1 (`heron sessions show NAME` lists its "
        "entries; `heron sessions fork NAME NEW --at ENTRY` copies its valid start into a new "
        "session)\n"
    )


def test_a_damaged_stored_entry_is_named_not_shown_and_nothing_is_appended(heron: Heron) -> None:
    store = SqliteSessionStore.open(heron.state_dir)
    store.append("s", [UserMessage(content="go"), AssistantMessage(text="went")])
    store.close()
    db = sqlite3.connect(heron.state_dir / "heron.db")
    with db:  # another program wrote the second entry
        db.execute(
            "UPDATE session_entries SET message = ? WHERE session = 's' AND entry_id = 2",
            ['{"role": "assistant", "text": 7, "note": "injected text"}'],
        )
    db.close()

    shown = heron.run("sessions", "show", "s")
    resumed = heron.run_turn(heron.script("s.yaml", ECHO), "--session", "s")

    assert shown.code == 1 and shown.stdout == ""
    assert shown.stderr.startswith("heron: stored entry 2 of session 's' is not a valid message")
    assert resumed.code == 1
    assert resumed.stderr.startswith("heron: session 's' cannot be resumed: stored entry 2")
    for done in (shown, resumed):
        assert "Traceback" not in done.stderr and "injected" not in done.stderr
    db = sqlite3.connect(heron.state_dir / "heron.db")
    assert db.execute("SELECT count(*) FROM session_entries WHERE session = 's'").fetchone() == (2,)
    db.close()
