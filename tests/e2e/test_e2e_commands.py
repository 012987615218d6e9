"""`heron tools`, `heron doctor`, `heron demo`, `heron --help` (one set of agent flags on every
command that builds an agent) and a closed stdout pipe."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from support.cli import HERON, TIMEOUT_S, Heron, assert_one_result_per_call

AGENT_COMMANDS = [
    ("run",),
    ("chat",),
    ("serve",),
    ("sessions", "resume"),
    ("tools", "list"),
    ("tools", "show"),
]
"""Every command that builds an agent."""
AGENT_FLAGS = [
    "--model",
    "--base-url",
    "--tools",
    "--builtin",
    "--workspace",
    "--sandbox",
    "--autonomy",
    "--parallel",
    "--no-parallel",
    "--receipts",
    "--max-iterations",
    "--max-tool-result-chars",
    "--exclude-tool",
    "--config",
    "--state-dir",
]
CONFIGURATION_DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"

TOOL_NAMES = [
    "read_first",
    "read_second",
    "echo",
    "make_file",
    "wait_forever",
    "slow_to_stop",
    "block_thread",
]


def test_tools_list_prints_one_line_per_tool_in_definition_order(heron: Heron) -> None:
    done = heron.run("tools", "list", "--tools", heron.tools())

    assert done.code == 0, done.stderr
    rows = [line.split(None, 3) for line in done.stdout.splitlines()]
    assert [row[0] for row in rows] == TOOL_NAMES
    by_name = {row[0]: row for row in rows}
    assert by_name["echo"][1:] == ["user", "read_only,idempotent", "Return the text unchanged."]
    assert by_name["make_file"][1:3] == ["user", "requires_approval"]


def test_tools_list_json_gives_full_specs_and_honours_exclusion(heron: Heron) -> None:
    done = heron.run(
        "tools", "list", "--json", "--tools", heron.tools(), "--exclude-tool", "block_thread"
    )

    assert done.code == 0, done.stderr
    specs = json.loads(done.stdout)
    assert [s["name"] for s in specs] == TOOL_NAMES[:-1]
    echo = next(s for s in specs if s["name"] == "echo")
    assert echo["parameters"]["properties"]["text"] == {
        "description": "Any text.",
        "type": "string",
    }
    assert echo["parameters"]["required"] == ["text"]
    assert echo["annotations"]["read_only"] is True
    assert echo["annotations"]["requires_approval"] is False


def test_tools_show_prints_one_spec_and_refuses_unknown_names(heron: Heron) -> None:
    tools = heron.tools()
    shown = heron.run("tools", "show", "make_file", "--tools", tools)

    assert shown.code == 0, shown.stderr
    spec = json.loads(shown.stdout)
    assert spec["name"] == "make_file"
    assert spec["description"].startswith("Create a file named `name`")
    assert spec["annotations"]["requires_approval"] is True
    assert list(spec["parameters"]["properties"]) == ["name"]
    assert spec["runs_in"] == "thread"  # a plain def: shown, not hidden

    missing = heron.run("tools", "show", "nope", "--tools", tools)
    assert missing.code == 2
    assert "no tool named 'nope'" in missing.stderr


def test_doctor_reports_ready_with_a_writable_state_dir(heron: Heron) -> None:
    done = heron.run("doctor")

    assert done.code == 0, done.stdout + done.stderr
    assert f"[ok  ] state directory: {heron.state_dir} (writable)" in done.stdout
    assert "[ok  ] configuration: valid" in done.stdout
    assert done.stdout.endswith("heron is ready.\n")
    assert (heron.state_dir / "heron.db").is_file()


def test_doctor_says_what_each_sandbox_level_contains_on_this_machine(heron: Heron) -> None:
    heron.write("heron.toml", '[tools.builtin]\nsandbox = "bwrap"\n')
    done = heron.run("doctor")

    assert done.code == 0, done.stdout + done.stderr
    assert "\nsandbox bwrap (configured), network none:\n" in done.stdout
    assert "\nsandbox process, network host:\n" in done.stdout
    bwrap = done.stdout.split("sandbox bwrap (configured)")[1].split("\nsandbox process")[0]
    for aspect in ("heron_environment", "files_outside_write", "network", "loopback"):
        assert re.search(rf"^  contained +{aspect} ", bwrap, re.M), aspect
    process = done.stdout.split("\nsandbox process")[1]
    assert re.search(r"^  NOT contained +network +network host", process, re.M)


def test_doctor_fails_on_a_broken_project_config(heron: Heron) -> None:
    heron.write("heron.toml", "[agent]\nmodle = 'x'\n")
    done = heron.run("doctor")

    assert done.code == 1
    assert "[FAIL] configuration:" in done.stdout and "agent.modle" in done.stdout


def test_demo_runs_three_reads_in_parallel_then_an_approved_write_with_four_receipts(
    heron: Heron,
) -> None:
    done = heron.run("demo", "--events", "jsonl", "--workspace", str(heron.root / "ws"))

    assert done.code == 0, done.stdout + done.stderr
    events = done.events()
    assert_one_result_per_call(events)
    kinds = [e["type"] for e in events]
    approval = kinds.index("approval_request")
    assert kinds[:approval].count("tool_result") == 3
    assert [e["status"] for e in events if e["type"] == "tool_result"] == ["ok"] * 4
    assert sum("receipt" in e for e in events if e["type"] == "tool_result") == 4
    decision = next(e for e in events if e["type"] == "approval_decision")
    assert decision["decision"] == "yes"
    assert events[-1]["type"] == "final" and events[-1]["reason"] == "answer"
    assert "4 receipts verified" in done.stderr
    assert (heron.root / "ws" / "summaries" / "digest.md").is_file()


def test_help_lists_the_commands(heron: Heron) -> None:
    done = heron.run("--help")

    assert done.code == 0
    for command in ("run", "tools", "receipts", "doctor", "demo"):
        assert command in done.stdout


def test_receipts_verify_refuses_a_malformed_receipt_and_a_missing_output_file(
    heron: Heron,
) -> None:
    malformed = heron.verify_receipt(
        "heron-receipt-nothing", tool="echo", arguments={}, output="x", state_dir=heron.state_dir
    )
    assert malformed.code == 1
    assert malformed.stdout == "invalid: not a well-formed heron receipt\n"

    receipt = "heron-receipt-0123abcd-1700000000-" + "A" * 43
    missing = heron.run(
        "receipts", "verify", receipt, "--tool", "echo", "--args", "{}",
        "--output-file", "missing.txt",
    )  # fmt: skip
    assert missing.code == 2
    assert missing.stderr.startswith("heron: cannot read --output-file missing.txt"), missing.stderr


def test_a_file_where_the_receipt_keys_folder_belongs_is_an_error_not_a_spin(
    heron: Heron,
) -> None:
    # Making the folder raised FileExistsError, which the key's id collision retry caught:
    # a new key was drawn for ever, at full CPU, deaf to Ctrl-C.
    heron.state_dir.mkdir(parents=True, exist_ok=True)
    (heron.state_dir / "receipt-keys").write_text("not a folder\n")
    model = heron.script("done.yaml", [{"text": "done"}])
    done = heron.run("run", "hi", "--model", model, "--receipts")
    assert done.code == 1, done.stderr
    assert "heron: cannot keep keys in " in done.stderr, done.stderr
    assert "receipt-keys: File exists" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "args",
    [("sessions", "list"), ("db", "status"), ("audit",), ("run", "hi", "--model", "MODEL")],
    ids=["sessions-list", "db-status", "audit", "run"],
)
@pytest.mark.parametrize("damage", ["file-for-folder", "not-a-database"])
def test_a_state_directory_heron_cannot_use_is_a_one_line_error(
    heron: Heron, args: tuple[str, ...], damage: str
) -> None:
    state = heron.root / "state-here"
    if damage == "file-for-folder":
        state.write_text("a file\n")
    else:
        state.mkdir()
        (state / "heron.db").write_text("garbage, not SQLite\n")
    model = heron.script("done.yaml", [{"text": "done"}])
    argv = [model if a == "MODEL" else a for a in args]
    done = heron.run(*argv, "--state-dir", str(state))
    assert done.code == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "heron: cannot " in done.stderr and str(state) in done.stderr, done.stderr


def test_doctor_reports_a_damaged_state_database_and_goes_on(heron: Heron) -> None:
    state = heron.root / "state-here"
    state.mkdir()
    (state / "heron.db").write_text("garbage, not SQLite\n")
    done = heron.run("doctor", "--state-dir", str(state))
    assert done.code == 1 and "Traceback" not in done.stderr
    assert "[FAIL] state directory: cannot open the state database" in done.stdout + done.stderr
    assert "file is not a database" in done.stdout + done.stderr
    assert "gateway" in done.stdout + done.stderr  # the checks after it still ran


@pytest.mark.parametrize(
    "command",
    [("audit",), ("audit", "--approvals"), ("events", "tail"), ("approvals", "list"),
     ("messages", "list")],
    ids=["audit", "audit-approvals", "events-tail", "approvals-list", "messages-list"],
)  # fmt: skip
@pytest.mark.parametrize("limit", ["-3", "99999999999999999999999", "9" * 5000])
def test_a_listing_limit_out_of_range_is_a_usage_error(
    heron: Heron, command: tuple[str, ...], limit: str
) -> None:
    # A number past 64 bits reached SQLite (OverflowError) and a negative one the store
    # (ValueError): tracebacks, or for `events tail` silently nothing.
    done = heron.run(*command, "--limit", limit)
    assert done.code == 2 and "Traceback" not in done.stderr, done.stderr
    assert "argument --limit:" in done.stderr


@pytest.mark.parametrize("kind", ["fifo", "device", "no-newline"])
@pytest.mark.parametrize("command", ["sessions-import", "tools-search-queries"])
def test_an_input_file_that_never_ends_is_refused_not_read_whole(
    heron: Heron, kind: str, command: str
) -> None:
    # A FIFO held these commands for ever and /dev/zero grew them by gigabytes a second.
    if kind == "fifo":
        os.mkfifo(heron.root / "input")
        path = "input"
    elif kind == "device":
        path = "/dev/zero"
    else:  # sparse: 17 MiB of NUL bytes and no line end, no disk used
        with (heron.root / "input").open("wb") as fh:
            fh.truncate(17 * 1024 * 1024)
        path = "input"
    if command == "sessions-import":
        done = heron.run("sessions", "import", path)
    else:
        heron.write("catalogue.json", "{}")
        done = heron.run("tools", "search", "--catalogue", "catalogue.json", "--queries", path)
    assert done.code in (1, 2) and "Traceback" not in done.stderr, done.stderr
    expected = "is not a regular file" if kind != "no-newline" else "bytes"
    assert expected in done.stderr, done.stderr


def _help_sections(text: str) -> dict[str, list[str]]:
    """The flags of each section of an argparse `--help` (`options`, `agent`, …), in order."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            current = sections.setdefault(line[:-1], [])
        elif current is not None and (flag := re.match(r"  (--[a-z-]+)", line)):
            current.append(flag.group(1))
    return sections


def test_every_command_that_builds_an_agent_lists_the_same_agent_flags_in_one_order(
    heron: Heron,
) -> None:
    for command in AGENT_COMMANDS:
        done = heron.run(*command, "--help")
        assert done.code == 0, done.stderr
        sections = _help_sections(done.stdout)
        assert sections.get("agent") == AGENT_FLAGS, (command, sections)
        others = [flag for name, flags in sections.items() if name != "agent" for flag in flags]
        assert not set(others) & set(AGENT_FLAGS), (command, others)


def test_serve_takes_the_builtin_sets_and_their_workspace_like_run(heron: Heron) -> None:
    ws = heron.root / "ws"
    ws.mkdir()
    model = heron.script("s.yaml", [])
    running = heron.start(
        "serve", "--model", model, "--builtin", "perception", "--workspace", str(ws)
    )

    started = running.wait_for_event("serve_started")

    assert {"read_file", "list_dir", "send_notification"} <= set(started["tools"]), started["tools"]


def test_the_agent_flags_are_documented_once_in_their_order() -> None:
    text = CONFIGURATION_DOC.read_text(encoding="utf-8")
    table = text[text.index("\n## Flags\n") :].split("\n## ", 2)[1]
    documented = re.findall(r"^\| `(--[a-z-]+)", table, flags=re.MULTILINE)

    assert documented == AGENT_FLAGS
    # The one flags table: no other table of the page lists flags row by row.
    assert len(re.findall(r"^\| `--", text, flags=re.MULTILINE)) == len(AGENT_FLAGS)


def _into_a_closed_pipe(heron: Heron, *args: str) -> subprocess.CompletedProcess[str]:
    """Run heron with stdout on a pipe whose reader has already gone."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        return subprocess.run(
            [*HERON, *args],
            cwd=heron.root,
            env=heron.env,
            stdin=subprocess.DEVNULL,
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            timeout=TIMEOUT_S,
            start_new_session=True,
        )
    finally:
        os.close(writer)


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("tools", "list", "--tools", "tools.py"),
        ("tools", "show", "echo", "--tools", "tools.py"),
        ("sessions", "list"),
        ("sessions", "show", "s"),
        ("sessions", "export", "s"),
        ("audit",),
        ("doctor",),
        ("run", "go", "--model", "scripted:echo.yaml", "--tools", "tools.py", "--events", "jsonl"),
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_a_command_whose_reader_has_gone_ends_quietly(heron: Heron, args: tuple[str, ...]) -> None:
    heron.tools()
    echo = [{"tool_calls": [{"id": "e1", "name": "echo", "arguments": {"text": "x"}}]}]
    model = heron.script("echo.yaml", [*echo, {"text": "Done."}])
    assert heron.run_turn(model, "--session", "s").code == 0

    done = _into_a_closed_pipe(heron, *args)

    assert done.returncode in (0, 141), done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


def test_sessions_show_into_head_prints_one_line_and_no_traceback(heron: Heron) -> None:
    heron.tools()
    # A long session: more lines than a pipe holds, so heron is still writing when head leaves.
    calls = [
        {"id": f"e{i}", "name": "echo", "arguments": {"text": f"{i:03d} " + "x" * 90}}
        for i in range(600)
    ]
    model = heron.script("echo.yaml", [{"tool_calls": calls}, {"text": "Done."}])
    assert heron.run_turn(model, "--session", "s").code == 0

    done = subprocess.run(
        ["sh", "-c", '"$@" sessions show s | head -1', "sh", *HERON],
        cwd=heron.root,
        env=heron.env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )

    assert done.stdout.startswith("session s · ") and done.stdout.count("\n") == 1
    assert done.stderr == "", done.stderr
