"""`heron run` fed hostile input: arguments nested thousands deep, lone surrogates, NaN and
10^400, a prompt and file names that are not UTF-8, process output that is not UTF-8. Every call
is answered with a validation error or a result, the run ends normally, and what it stored can
be shown again (`heron sessions show`)."""

from __future__ import annotations

import json
import os

from support.cli import Heron, assert_one_result_per_call

DEEP = '{"text": ' + "[" * 5000 + "]" * 5000 + "}"
INVALID = "Error: invalid arguments for 'echo': "


def test_hostile_arguments_get_validation_errors_and_the_run_ends_normally(heron: Heron) -> None:
    calls = [
        ("deep", DEEP),
        ("surrogate", '{"text": "half a character: \\ud800"}'),
        ("nan", '{"text": NaN}'),
        ("huge", '{"text": 1' + "0" * 400 + "}"),
        ("float", '{"text": 1e400}'),
        ("digits", '{"text": ' + "9" * 5000 + "}"),
    ]
    model = heron.script(
        "hostile.json",
        [
            {
                "tool_calls": [
                    {"id": f"c_{name}", "name": "echo", "arguments": raw} for name, raw in calls
                ]
            },
            {"text": "All refused.", "expect": {"last_role": "tool"}},
        ],
    )
    done = heron.run_turn(model, "--session", "hostile")
    assert done.code == 0, done.stderr
    assert "Traceback" not in done.stderr
    events = done.events()
    assert_one_result_per_call(events)
    results = {e["id"]: e["output"] for e in events if e["type"] == "tool_result"}
    assert results == {
        "c_deep": INVALID + "arguments: nested more than 64 levels deep (the limit of heron's "
        "input checks). Nothing was run; fix the arguments and call again.",
        "c_surrogate": INVALID + "text: text holds a lone surrogate (\\ud800), which is not "
        "Unicode; send the character itself or a valid surrogate pair. Nothing was run; fix the "
        "arguments and call again.",
        "c_nan": INVALID + "text: expected a finite number, got NaN. Nothing was run; fix the "
        "arguments and call again.",
        "c_huge": INVALID + "text: expected a finite number, got integer of 401 digits. Nothing "
        "was run; fix the arguments and call again.",
        "c_float": INVALID + "text: expected a finite number, got 1e400. Nothing was run; fix "
        "the arguments and call again.",
        "c_digits": INVALID + "text: expected a finite number, got integer of 5000 digits. "
        "Nothing was run; fix the arguments and call again.",
    }
    assert events[-1] == {**events[-1], "type": "final", "text": "All refused."}
    shown = heron.run("sessions", "show", "hostile", "--json")
    assert shown.code == 0, shown.stderr
    assert "nested more than 64 levels deep" in shown.stdout


def test_a_text_protocol_call_nested_too_deep_is_refused_like_a_native_one(heron: Heron) -> None:
    block = '<tool_call>{"name": "echo", "arguments": {"text": ' + "[" * 300 + "]" * 300
    model = heron.script(
        "text.json",
        [{"text": block + "}}</tool_call>"}, {"text": "Refused.", "expect": {"last_role": "tool"}}],
        protocol="text",
    )
    done = heron.run_turn(model)
    assert done.code == 0, done.stderr
    [result] = [e for e in done.events() if e["type"] == "tool_result"]
    assert result["output"].startswith(INVALID + "text" + "[0]" * 63 + ": nested more than 64")


def test_a_prompt_file_names_and_output_that_are_not_utf8_are_shown_with_escapes(
    heron: Heron,
) -> None:
    workspace = heron.root / "ws"
    workspace.mkdir()
    (workspace / os.fsdecode(b"caf\xe9 menu.txt")).write_text("espresso\n", encoding="utf-8")
    model = heron.script(
        "files.yaml",
        [
            {
                "tool_calls": [
                    {"id": "c_list", "name": "list_dir", "arguments": {"path": "."}},
                    {"id": "c_find", "name": "find_files", "arguments": {"pattern": "*.txt"}},
                ],
                "expect": {"last_message_contains": "order a caf\\xe9"},
            },
            {
                # The name exactly as the tools showed it reads the file on disk.
                "tool_calls": [
                    {
                        "id": "c_read",
                        "name": "read_file",
                        "arguments": {"path": "caf\\xe9 menu.txt"},
                    },
                    {
                        "id": "c_ls",
                        "name": "shell",
                        "arguments": {"command": "ls; printf 'a\\377b\\n'"},
                    },
                ]
            },
            {"text": "Read it.", "expect": {"last_role": "tool"}},
        ],
    )
    done = heron.run(
        "run",
        os.fsdecode(b"order a caf\xe9"),
        "--model",
        model,
        "--builtin",
        "perception",
        "--builtin",
        "execution",
        "--workspace",
        "ws",
        "--autonomy",
        "full",
        "--events",
        "jsonl",
        "--session",
        "odd",
    )
    assert done.code == 0, done.stderr
    results = {e["id"]: e for e in done.events() if e["type"] == "tool_result"}
    assert "caf\\xe9 menu.txt" in results["c_list"]["output"]
    assert results["c_list"]["data"]["entries"][0]["name"] == "caf\\xe9 menu.txt"
    assert "caf\\xe9 menu.txt" in results["c_find"]["output"]
    assert results["c_read"]["success"] and "espresso" in results["c_read"]["output"]
    assert "caf\\xe9 menu.txt" in results["c_ls"]["output"]
    assert "a\\xffb" in results["c_ls"]["output"]
    shown = heron.run("sessions", "show", "odd", "--json")
    assert shown.code == 0, shown.stderr
    assert "order a caf\\\\xe9" in shown.stdout
    assert all(json.loads(line) for line in shown.stdout.splitlines())
