"""Ctrl-C during `heron run`: running calls end as interrupted, the turn as cancelled, exit 130."""

from __future__ import annotations

from cli_support import Heron, assert_one_result_per_call, stable

INTERRUPTED = {
    "type": "tool_result",
    "success": False,
    "status": "interrupted",
    "output": "[interrupted: cancelled while running]",
    "phase": "cancelled_while_running",
    "cached": False,
}
CANCELLED = {"type": "cancelled", "reason": "interrupted by the operator (Ctrl-C)"}


def test_ctrl_c_interrupts_a_running_tool_and_exits_130(heron: Heron) -> None:
    model = heron.script(
        "script.yaml",
        [
            {"tool_calls": [{"id": "w1", "name": "wait_forever", "arguments": {}}]},
            {"text": "never reached"},
        ],
    )
    running = heron.start(
        "run", "wait", "--model", model, "--tools", heron.tools(), "--events", "jsonl"
    )
    running.wait_for_event("tool_call", id="w1")
    running.interrupt()
    done = running.finish()

    assert done.code == 130, done.stderr
    events = stable(done.events())
    assert events == [
        {
            "type": "tool_call",
            "id": "w1",
            "name": "wait_forever",
            "arguments": {},
            "owner": "user",
            "injected": [],
        },
        {**INTERRUPTED, "id": "w1", "name": "wait_forever"},
        CANCELLED,
    ]


def test_ctrl_c_keeps_the_real_result_of_a_finished_parallel_sibling(heron: Heron) -> None:
    model = heron.script(
        "script.yaml",
        [
            {
                "tool_calls": [
                    {"id": "e1", "name": "echo", "arguments": {"text": "quick"}},
                    {"id": "w1", "name": "wait_forever", "arguments": {}},
                ]
            },
            {"text": "never reached"},
        ],
    )
    running = heron.start(
        "run", "both", "--model", model, "--tools", heron.tools(), "--events", "jsonl"
    )
    running.wait_for_event("tool_result", id="e1")
    running.interrupt()
    done = running.finish()

    assert done.code == 130, done.stderr
    events = stable(done.events())
    assert_one_result_per_call(events)
    results = {e["id"]: e for e in events if e["type"] == "tool_result"}
    assert results["e1"]["status"] == "ok" and results["e1"]["output"] == "quick"
    assert results["w1"] == {**INTERRUPTED, "id": "w1", "name": "wait_forever"}
    assert events[-1] == CANCELLED


def test_ctrl_c_exits_at_once_although_a_sync_tool_still_blocks_its_thread(heron: Heron) -> None:
    model = heron.script(
        "script.yaml",
        [
            {"tool_calls": [{"id": "b1", "name": "block_thread", "arguments": {}}]},
            {"text": "never reached"},
        ],
    )
    running = heron.start(
        "run", "block", "--model", model, "--tools", heron.tools(), "--events", "jsonl"
    )
    running.wait_for_stderr("block_thread started")
    running.interrupt()
    # The thread blocks for a minute; heron must not wait for it after the turn is cancelled.
    done = running.finish(timeout=10)

    assert done.code == 130, done.stderr
    assert stable(done.events())[1:] == [
        {**INTERRUPTED, "id": "b1", "name": "block_thread"},
        CANCELLED,
    ]
