"""Ctrl-C during `heron run`: running calls end as interrupted, the turn as cancelled, exit 130.
Sync tools that time out or are interrupted say truthfully what became of their work.

Every wait is on something the process reports (an event on stdout, a line a tool writes to
stderr), bounded by the helper's timeout.
"""

from __future__ import annotations

import os
import textwrap
from typing import Any

from support.cli import Finished, Heron, Running, assert_one_result_per_call, stable

SYNC_TOOLS = textwrap.dedent(
    """
    import os
    import sys
    import threading
    import time
    from pathlib import Path

    from heron import tool

    @tool(runs_in="process")
    def crunch(seconds: float) -> str:
        \"\"\"Work in a worker process, recording its pid in crunch.pid.

        Args:
            seconds: How long.
        \"\"\"
        Path("crunch.pid").write_text(str(os.getpid()), encoding="utf-8")
        print("crunch started", file=sys.stderr, flush=True)
        time.sleep(seconds)
        Path("crunch.done").write_text("landed", encoding="utf-8")
        return "crunched"

    @tool(timeout_s=0.3)
    def post(text: str) -> str:
        \"\"\"Post a message, slowly (in a worker thread).

        Args:
            text: The message.
        \"\"\"
        threading.Event().wait(60)
        return "posted"
    """
)

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
    # The result says the truth: the thread was not stopped, it runs on in the background.
    still_running = (
        "[interrupted: cancelled, but it is still running in a worker thread (heron cannot stop "
        "a thread)] Its result will be discarded."
    )
    assert stable(done.events())[1:] == [
        {**INTERRUPTED, "id": "b1", "name": "block_thread", "output": still_running},
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


def start_sync_tools_turn(heron: Heron, *rounds: list[dict[str, Any]]) -> Running:
    heron.write("sync_tools.py", SYNC_TOOLS)
    model = heron.script("script.yaml", [{"tool_calls": r} for r in rounds] + [{"text": "done"}])
    flags = ["--tools", "sync_tools.py", "--events", "jsonl", "--autonomy", "full"]
    return heron.start("run", "go", "--model", model, *flags)


def test_ctrl_c_kills_a_process_tool_and_its_effect_never_lands(heron: Heron) -> None:
    running = start_sync_tools_turn(
        heron, [{"id": "p1", "name": "crunch", "arguments": {"seconds": 60}}]
    )
    running.wait_for_stderr("crunch started")
    pid = int((heron.root / "crunch.pid").read_text())
    running.interrupt()
    done = running.finish()

    assert done.code == 130, done.stderr
    (result,) = [e for e in done.events() if e["type"] == "tool_result"]
    assert result["output"].startswith(
        "[interrupted: cancelled while running; heron killed its worker process]"
    )
    assert not _alive(pid)
    assert not (heron.root / "crunch.done").exists()


def test_a_timed_out_thread_tool_is_reported_running_and_is_not_started_again(
    heron: Heron,
) -> None:
    post = {"name": "post", "arguments": {"text": "hello"}}
    done: Finished = start_sync_tools_turn(
        heron, [{"id": "t1", **post}], [{"id": "t2", **post}]
    ).finish()

    assert done.code == 0, done.stderr
    results = {e["id"]: e for e in done.events() if e["type"] == "tool_result"}
    assert results["t1"]["output"].startswith(
        "Error: 'post' timed out after 0.3 s and is still running: heron cannot stop a worker "
        "thread, so its outcome is unknown"
    )
    assert results["t2"]["output"].startswith(
        "Error: 'post' was not started: an earlier call of it (t1) is still running"
    )
    assert stable(done.events())[-1] == {"type": "final", "text": "done", "reason": "answer"}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
