"""`heron run`: tool batches, receipts, exclusion, the iteration cap and the text protocol."""

from __future__ import annotations

import json

from cli_support import Heron, assert_one_result_per_call, stable

PARALLEL_TURNS = [
    {
        "tool_calls": [
            {"id": "c1", "name": "read_first", "arguments": {"name": "alpha"}},
            {"id": "c2", "name": "read_second", "arguments": {"name": "beta"}},
        ]
    },
    # History keeps call order although c1 finished last: the model's last message is c2's.
    {
        "text": "Both notes read.",
        "expect": {"last_role": "tool", "last_message_contains": "second:beta"},
    },
]


def test_parallel_read_only_batch_runs_at_once_and_ends_with_the_final_answer(heron: Heron) -> None:
    model = heron.script("script.yaml", PARALLEL_TURNS)
    done = heron.run(
        "run", "read both", "--model", model, "--tools", heron.tools(), "--events", "jsonl"
    )

    assert done.code == 0, done.stderr
    assert done.stderr == ""
    events = done.events()
    assert_one_result_per_call(events)
    call = {"type": "tool_call", "owner": "user", "injected": []}
    result = {"type": "tool_result", "success": True, "status": "ok", "cached": False}
    assert stable(events) == [
        {**call, "id": "c1", "name": "read_first", "arguments": {"name": "alpha"}},
        {**call, "id": "c2", "name": "read_second", "arguments": {"name": "beta"}},
        # read_first waits for read_second, so it can only succeed in parallel, and ends last.
        {**result, "id": "c2", "name": "read_second", "output": "second:beta"},
        {**result, "id": "c1", "name": "read_first", "output": "first:alpha"},
        {"type": "text_delta", "text": "Both notes read."},
        {"type": "final", "text": "Both notes read.", "reason": "answer"},
    ]


def test_receipts_verify_with_heron_receipts_verify_and_tampering_is_caught(heron: Heron) -> None:
    # The run signs into --state-dir; the default state dir (HERON_STATE_DIR) stays empty.
    run_state = str(heron.root / "run-state")
    model = heron.script("script.yaml", PARALLEL_TURNS)
    done = heron.run(
        "run",
        "read both",
        "--model",
        model,
        "--tools",
        heron.tools(),
        "--events",
        "jsonl",
        "--receipts",
        "--state-dir",
        run_state,
    )
    assert done.code == 0, done.stderr
    events = done.events()
    assert_one_result_per_call(events)
    calls = {e["id"]: e for e in events if e["type"] == "tool_call"}
    results = [e for e in events if e["type"] == "tool_result"]
    assert [r["status"] for r in results] == ["ok", "ok"]
    assert all("receipt" in r for r in results), results

    for r in results:
        verified = heron.run(
            "receipts",
            "verify",
            r["receipt"],
            "--tool",
            r["name"],
            "--args",
            json.dumps(calls[r["id"]]["arguments"]),
            "--output",
            r["output"],
            "--state-dir",
            run_state,
        )
        assert verified.code == 0, verified.stdout + verified.stderr
        assert verified.stdout.startswith("valid:"), verified.stdout

    first = results[0]
    args = json.dumps(calls[first["id"]]["arguments"])
    tampered = heron.run(
        "receipts",
        "verify",
        first["receipt"],
        "--tool",
        first["name"],
        "--args",
        args,
        "--output",
        first["output"] + " (edited)",
        "--state-dir",
        run_state,
    )
    assert tampered.code == 1
    assert tampered.stdout.startswith("invalid:"), tampered.stdout

    elsewhere = heron.run(
        "receipts",
        "verify",
        first["receipt"],
        "--tool",
        first["name"],
        "--args",
        args,
        "--output",
        first["output"],
    )
    assert elsewhere.code == 1
    assert "no receipt key" in elsewhere.stdout


def test_an_excluded_tool_is_not_offered_and_its_call_is_refused(heron: Heron) -> None:
    model = heron.script(
        "script.yaml",
        [
            {
                "expect": {"tools_include": ["echo"], "tools_exclude": ["make_file"]},
                "tool_calls": [{"id": "c1", "name": "make_file", "arguments": {"name": "x.txt"}}],
            },
            {"text": "It was not available.", "expect": {"last_role": "tool"}},
        ],
    )
    done = heron.run(
        "run",
        "make a file",
        "--model",
        model,
        "--tools",
        heron.tools(),
        "--events",
        "jsonl",
        "--exclude-tool",
        "make_file",
        "--autonomy",
        "full",
    )

    assert done.code == 0, done.stdout + done.stderr
    assert stable(done.events()) == [
        {
            "type": "tool_call",
            "id": "c1",
            "name": "make_file",
            "arguments": {"name": "x.txt"},
            "injected": [],
        },
        {
            "type": "tool_result",
            "id": "c1",
            "name": "make_file",
            "success": False,
            "status": "excluded",
            "output": "Not available in this turn: 'make_file'.",
            "cached": False,
        },
        {"type": "text_delta", "text": "It was not available."},
        {"type": "final", "text": "It was not available.", "reason": "answer"},
    ]
    assert not (heron.root / "x.txt").exists()


def test_the_iteration_cap_ends_with_the_models_summary(heron: Heron) -> None:
    def echo_turn(n: int) -> dict[str, object]:
        return {"tool_calls": [{"id": f"c{n}", "name": "echo", "arguments": {"text": f"step {n}"}}]}

    model = heron.script(
        "script.yaml",
        [
            echo_turn(1),
            # After the cap heron asks (as a runtime user message, no tools offered) for a summary.
            {"text": "Summary: did step 1.", "expect": {"last_role": "user"}},
            echo_turn(2),
            echo_turn(3),
        ],
    )
    done = heron.run(
        "run",
        "keep going",
        "--model",
        model,
        "--tools",
        heron.tools(),
        "--events",
        "jsonl",
        "--max-iterations",
        "1",
    )

    assert done.code == 0, done.stdout + done.stderr
    events = stable(done.events())
    assert [e["type"] for e in events] == ["tool_call", "tool_result", "text_delta", "final"]
    assert events[1]["output"] == "step 1"
    assert events[-1] == {
        "type": "final",
        "text": "Summary: did step 1.",
        "reason": "iteration_cap",
    }


def test_a_text_protocol_model_runs_the_tool_named_in_its_tool_call_block(heron: Heron) -> None:
    block = '<tool_call>{"name": "echo", "arguments": {"text": "from text"}}</tool_call>'
    model = heron.script(
        "script.yaml",
        [
            {"text": f"Let me echo that. {block}"},
            {"text": "Echoed.", "expect": {"last_message_contains": "from text"}},
        ],
        protocol="text",
    )
    done = heron.run("run", "echo", "--model", model, "--tools", heron.tools(), "--events", "jsonl")

    assert done.code == 0, done.stdout + done.stderr
    events = stable(done.events())
    assert_one_result_per_call(events)
    call_id = events[1]["id"]
    assert call_id.startswith("call_")
    assert events == [
        {"type": "text_delta", "text": "Let me echo that."},
        {
            "type": "tool_call",
            "id": call_id,
            "name": "echo",
            "arguments": {"text": "from text"},
            "owner": "user",
            "injected": [],
        },
        {
            "type": "tool_result",
            "id": call_id,
            "name": "echo",
            "success": True,
            "status": "ok",
            "output": "from text",
            "cached": False,
        },
        {"type": "text_delta", "text": "Echoed."},
        {"type": "final", "text": "Echoed.", "reason": "answer"},
    ]


def test_an_exhausted_script_fails_the_run_with_an_error_event(heron: Heron) -> None:
    model = heron.script(
        "short.json", [{"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"text": "hi"}}]}]
    )
    done = heron.run("run", "hi", "--model", model, "--tools", heron.tools(), "--events", "jsonl")

    assert done.code == 1
    events = done.events()
    assert_one_result_per_call(events)
    assert [e["type"] for e in events] == ["tool_call", "tool_result", "error"]
    message = events[-1]["message"]
    assert "scripted:short.json" in message and "exhausted" in message, message


def test_a_credential_cut_by_the_result_limit_is_still_masked_in_events(heron: Heron) -> None:
    secret = "ghp_" + "0123456789abcdefghijklmnopqrstuvwxyz"
    model = heron.script(
        "script.yaml",
        [
            {"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"text": f"key {secret}"}}]},
            {"text": "ok"},
        ],
    )
    # 35 characters keep `key ` and 31 of the token's 40: the cut lands inside the credential.
    done = heron.run(
        "run", "echo", "--model", model, "--tools", heron.tools(), "--events", "jsonl",
        "--max-tool-result-chars", "35",
    )

    assert done.code == 0, done.stdout + done.stderr
    result = next(e for e in done.events() if e["type"] == "tool_result")
    assert result["output"].startswith("key ghp_")
    # Masking keeps four characters of a credential; no longer piece may reach any event.
    leaked = [secret[i : i + 8] for i in range(len(secret) - 7) if secret[i : i + 8] in done.stdout]
    assert leaked == [], result["output"]
