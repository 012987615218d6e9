"""Module-level `runs_in="process"` tools for test_cancellation.py.

A worker process imports this module by name (process tools must be importable), so it stays
small: no pytest, no fixtures.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from heron import tool


@tool(runs_in="process")
def write_after(path: str, seconds: float) -> str:
    """Write `path`.pid at once, then `path` after `seconds`.

    Args:
        path: Where the effect lands.
        seconds: How long to sleep first.
    """
    Path(path + ".pid").write_text(str(os.getpid()), encoding="utf-8")
    time.sleep(seconds)
    Path(path).write_text("landed", encoding="utf-8")
    return f"wrote {path}"


@tool(runs_in="process", read_only=True)
def add(a: int, b: int) -> dict[str, int]:
    """Add two numbers in a worker process.

    Args:
        a: First.
        b: Second.
    """
    return {"sum": a + b, "pid": os.getpid()}


@tool(runs_in="process", read_only=True)
def fail(message: str) -> str:
    """Raise ValueError(message) in a worker process.

    Args:
        message: The error message.
    """
    print("fail: about to raise")  # goes to heron's stderr, never into the result
    raise ValueError(message)
