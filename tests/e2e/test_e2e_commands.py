"""`heron tools`, `heron doctor`, `heron demo` and `heron --help`."""

from __future__ import annotations

import json

from support.cli import Heron, assert_one_result_per_call

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
