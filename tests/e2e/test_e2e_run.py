"""`heron run`: tool batches, receipts, exclusion, the iteration cap and the text protocol."""

from __future__ import annotations

import json
from typing import Any

from support.cli import Heron, assert_one_result_per_call, stable

PARALLEL_TURNS: list[dict[str, Any]] = [
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
CALL = {"type": "tool_call", "owner": "user", "injected": []}
OK = {"type": "tool_result", "success": True, "status": "ok", "cached": False}


def final(text: str, reason: str = "answer") -> list[dict[str, Any]]:
    """The closing events of a native-protocol turn that ends with `text`."""
    return [{"type": "text_delta", "text": text}, {"type": "final", "text": text, "reason": reason}]


def test_parallel_read_only_batch_runs_at_once_and_ends_with_the_final_answer(heron: Heron) -> None:
    done = heron.run_turn(heron.script("script.yaml", PARALLEL_TURNS))

    assert done.code == 0, done.stderr
    assert done.stderr == ""
    events = done.events()
    assert_one_result_per_call(events)
    assert stable(events) == [
        {**CALL, "id": "c1", "name": "read_first", "arguments": {"name": "alpha"}},
        {**CALL, "id": "c2", "name": "read_second", "arguments": {"name": "beta"}},
        # read_first waits for read_second, so it can only succeed in parallel, and ends last.
        {**OK, "id": "c2", "name": "read_second", "output": "second:beta"},
        {**OK, "id": "c1", "name": "read_first", "output": "first:alpha"},
        *final("Both notes read."),
    ]


def test_receipts_verify_with_heron_receipts_verify_and_tampering_is_caught(heron: Heron) -> None:
    # Keys go to --state-dir; the default state dir (HERON_STATE_DIR) is checked to stay unused.
    run_state = heron.root / "run-state"
    model = heron.script("script.yaml", PARALLEL_TURNS)
    done = heron.run_turn(model, "--receipts", "--state-dir", str(run_state))

    assert done.code == 0, done.stderr
    events = done.events()
    assert_one_result_per_call(events)
    arguments = {e["id"]: e["arguments"] for e in events if e["type"] == "tool_call"}
    results = [e for e in events if e["type"] == "tool_result"]
    assert [r["status"] for r in results] == ["ok", "ok"]
    assert all("receipt" in r for r in results), results

    for r in results:
        verified = heron.verify_receipt(
            r["receipt"],
            tool=r["name"],
            arguments=arguments[r["id"]],
            output=r["output"],
            state_dir=run_state,
        )
        assert verified.code == 0, verified.stdout + verified.stderr
        assert verified.stdout.startswith("valid:"), verified.stdout

    first = results[0]
    claim = {"tool": first["name"], "arguments": arguments[first["id"]]}
    tampered = heron.verify_receipt(
        first["receipt"], **claim, output=first["output"] + " (edited)", state_dir=run_state
    )
    assert tampered.code == 1
    assert tampered.stdout.startswith("invalid:"), tampered.stdout

    # --output-file carries outputs that do not fit on a command line.
    output_file = heron.write("output.txt", first["output"])
    args = ["--tool", first["name"], "--args", json.dumps(claim["arguments"])]
    from_file = heron.run(
        "receipts", "verify", first["receipt"], *args, "--output-file", str(output_file),
        "--state-dir", str(run_state),
    )  # fmt: skip
    assert from_file.code == 0, from_file.stdout + from_file.stderr

    elsewhere = heron.verify_receipt(
        first["receipt"], **claim, output=first["output"], state_dir=heron.state_dir
    )
    assert elsewhere.code == 1
    assert "no receipt key" in elsewhere.stdout


def test_an_excluded_tool_is_not_offered_and_its_call_is_refused(heron: Heron) -> None:
    args = {"name": "x.txt"}
    model = heron.script(
        "script.yaml",
        [
            {
                "expect": {"tools_include": ["echo"], "tools_exclude": ["make_file"]},
                "tool_calls": [{"id": "c1", "name": "make_file", "arguments": args}],
            },
            {"text": "It was not available.", "expect": {"last_role": "tool"}},
        ],
    )
    # Full autonomy: only the exclusion stands between the call and a new file.
    done = heron.run_turn(model, "--exclude-tool", "make_file", "--autonomy", "full")

    assert done.code == 0, done.stdout + done.stderr
    refused = {"type": "tool_result", "success": False, "status": "excluded", "cached": False}
    text = "Not available in this turn: 'make_file'."
    assert stable(done.events()) == [
        # A refused call's card has no owner: the tool was never resolved for this turn.
        {"type": "tool_call", "id": "c1", "name": "make_file", "arguments": args, "injected": []},
        {**refused, "id": "c1", "name": "make_file", "output": text},
        *final("It was not available."),
    ]
    assert not (heron.root / "x.txt").exists()


def test_the_iteration_cap_ends_with_the_models_summary(heron: Heron) -> None:
    def echo_turn(n: int) -> dict[str, Any]:
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
    done = heron.run_turn(model, "--max-iterations", "1")

    assert done.code == 0, done.stdout + done.stderr
    assert stable(done.events()) == [
        {**CALL, "id": "c1", "name": "echo", "arguments": {"text": "step 1"}},
        {**OK, "id": "c1", "name": "echo", "output": "step 1"},
        *final("Summary: did step 1.", reason="iteration_cap"),
    ]


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
    done = heron.run_turn(model)

    assert done.code == 0, done.stdout + done.stderr
    events = stable(done.events())
    assert_one_result_per_call(events)
    call_id = events[1]["id"]
    assert call_id.startswith("call_")
    assert events == [
        {"type": "text_delta", "text": "Let me echo that."},
        {**CALL, "id": call_id, "name": "echo", "arguments": {"text": "from text"}},
        {**OK, "id": call_id, "name": "echo", "output": "from text"},
        *final("Echoed."),
    ]


def test_an_exhausted_script_fails_the_run_with_an_error_event(heron: Heron) -> None:
    turn = {"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"text": "hi"}}]}
    done = heron.run_turn(heron.script("short.json", [turn]))

    assert done.code == 1
    events = done.events()
    assert_one_result_per_call(events)
    assert [e["type"] for e in events] == ["tool_call", "tool_result", "error"]
    message = events[-1]["message"]
    assert "scripted:short.json" in message and "exhausted" in message, message


def test_a_credential_cut_by_the_result_limit_is_still_masked_in_events(heron: Heron) -> None:
    secret = "ghp_" + "0123456789abcdefghijklmnopqrstuvwxyz"
    turn = {"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"text": f"key {secret}"}}]}
    model = heron.script("script.yaml", [turn, {"text": "ok"}])
    # 35 characters keep `key ` and 31 of the token's 40: the cut lands inside the credential.
    done = heron.run_turn(model, "--max-tool-result-chars", "35")

    assert done.code == 0, done.stdout + done.stderr
    result = next(e for e in done.events() if e["type"] == "tool_result")
    assert result["output"].startswith("key ghp_")
    # Masking keeps four characters of a credential; no longer piece may reach any event.
    pieces = {secret[i : i + 8] for i in range(len(secret) - 7)}
    assert [p for p in pieces if p in done.stdout] == [], result["output"]


PLAN_TURNS: list[dict[str, Any]] = [
    {
        "tool_calls": [
            {
                "id": "p1",
                "name": "update_plan",
                "arguments": {
                    "plan": [
                        {"text": "Read the notes", "status": "completed"},
                        {"text": "Write the digest", "status": "in_progress"},
                        {"text": "Tell the user", "status": "pending"},
                    ]
                },
            }
        ]
    },
    {"text": "Plan noted."},
]


def test_update_plan_is_drawn_as_a_checklist_and_streamed_as_a_plan_event(heron: Heron) -> None:
    script = heron.script("plan.yaml", PLAN_TURNS)

    shown = heron.run("run", "go", "--model", script, "--builtin", "planning", "--events", "pretty")
    streamed = heron.run_turn(script, "--builtin", "planning")

    assert shown.code == 0, shown.stderr
    checklist = [line.strip() for line in shown.stdout.splitlines() if line.strip()[:3] in (
        "[x]", "[>]", "[ ]")]  # fmt: skip
    assert checklist == ["[x] Read the notes", "[>] Write the digest", "[ ] Tell the user"]
    assert streamed.code == 0, streamed.stderr
    [plan] = [e for e in streamed.events() if e["type"] == "plan"]
    assert [item["status"] for item in plan["items"]] == ["completed", "in_progress", "pending"]
