"""Ctrl-C during `heron run`: running calls end as interrupted, the turn as cancelled, exit 130.

Every wait is on something the process reports (an event on stdout, a line a tool writes to
stderr), bounded by the helper's timeout.
"""

from __future__ import annotations

from typing import Any

from support.cli import Heron, assert_one_result_per_call, stable

PENDING = {"type": "tool_call", "owner": "user", "injected": []}
INTERRUPTED = {
    "type": "tool_result",
    "success": False,
    "status": "interrupted",
    "output": "[interrupted: cancelled while running]",
    "phase": "cancelled_while_running",
    "cached": False,
}
CANCELLED = {"type": "cancelled", "reason": "interrupted by the operator (Ctrl-C)"}


def calls_script(heron: Heron, *calls: tuple[str, str, dict[str, Any]]) -> str:
    """A script whose one tool round is (id, tool, arguments) calls; its answer is never reached."""
    round_ = [{"id": i, "name": name, "arguments": args} for i, name, args in calls]
    return heron.script("script.yaml", [{"tool_calls": round_}, {"text": "never reached"}])


def test_ctrl_c_interrupts_a_running_tool_and_exits_130(heron: Heron) -> None:
    running = heron.start_turn(calls_script(heron, ("w1", "wait_forever", {})))
    running.wait_for_event("tool_call", id="w1")
    running.interrupt()
    done = running.finish()

    assert done.code == 130, done.stderr
    assert stable(done.events()) == [
        {**PENDING, "id": "w1", "name": "wait_forever", "arguments": {}},
        {**INTERRUPTED, "id": "w1", "name": "wait_forever"},
        CANCELLED,
    ]


def test_ctrl_c_keeps_the_real_result_of_a_finished_parallel_sibling(heron: Heron) -> None:
    model = calls_script(heron, ("e1", "echo", {"text": "quick"}), ("w1", "wait_forever", {}))
    running = heron.start_turn(model)
    running.wait_for_event("tool_result", id="e1")
    running.interrupt()
    done = running.finish()

    assert done.code == 130, done.stderr
    events = stable(done.events())
    assert_one_result_per_call(events)
    results = {e["id"]: e for e in events if e["type"] == "tool_result"}
    assert (results["e1"]["status"], results["e1"]["output"]) == ("ok", "quick")
    assert results["w1"] == {**INTERRUPTED, "id": "w1", "name": "wait_forever"}
    assert events[-1] == CANCELLED


def test_ctrl_c_exits_at_once_although_a_sync_tool_still_blocks_its_thread(heron: Heron) -> None:
    running = heron.start_turn(calls_script(heron, ("b1", "block_thread", {})))
    running.wait_for_stderr("block_thread started")
    running.interrupt()
    # The thread blocks for a minute; heron must not wait for it once the turn is cancelled.
    done = running.finish(timeout=10)

    assert done.code == 130, done.stderr
    assert stable(done.events())[1:] == [
        {**INTERRUPTED, "id": "b1", "name": "block_thread"},
        CANCELLED,
    ]


def test_a_second_ctrl_c_exits_at_once_while_a_tool_is_slow_to_stop(heron: Heron) -> None:
    running = heron.start_turn(calls_script(heron, ("s1", "slow_to_stop", {})))
    running.wait_for_event("tool_call", id="s1")
    running.interrupt()
    running.wait_for_stderr("slow_to_stop: cancel received")
    running.interrupt()
    done = running.finish()

    assert done.code == 130, done.stderr
    # The hard exit comes before the cancel grace ends, so no terminal card is drawn.
    assert [e["type"] for e in done.events()] == ["tool_call"]
