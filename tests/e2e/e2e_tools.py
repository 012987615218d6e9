"""Tools the end-to-end tests load with `heron ... --tools tools.py` (copied into a scratch dir).

Not imported by the tests themselves: only the `heron` subprocess loads this file.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

from heron import tool

_second_done = asyncio.Event()
_never = asyncio.Event()


@tool(read_only=True)
async def read_first(name: str) -> str:
    """Read the first note. Finishes only after `read_second` has run.

    Args:
        name: The note's name.
    """
    # Waiting on the sibling makes this call succeed only when both run at once, and makes it
    # finish after `read_second` although the model called it first.
    await asyncio.wait_for(_second_done.wait(), timeout=5)
    return f"first:{name}"


@tool(read_only=True)
async def read_second(name: str) -> str:
    """Read the second note.

    Args:
        name: The note's name.
    """
    _second_done.set()
    return f"second:{name}"


@tool(read_only=True, idempotent=True)
def echo(text: str) -> str:
    """Return the text unchanged.

    Args:
        text: Any text.
    """
    return text


@tool(requires_approval=True)
def make_file(name: str) -> str:
    """Create a file named `name` in the working directory.

    Args:
        name: A plain file name.
    """
    Path(name).write_text("made by heron\n", encoding="utf-8")
    return f"created {name}"


@tool(read_only=True)
async def wait_forever() -> str:
    """Wait for an event that never fires; only cancellation ends it."""
    await _never.wait()
    return "unreachable"


@tool(read_only=True)
async def slow_to_stop() -> str:
    """Wait forever; on cancellation announce it and keep waiting (a slow cleanup)."""
    try:
        await _never.wait()
    except asyncio.CancelledError:
        sys.stderr.write("slow_to_stop: cancel received\n")
        sys.stderr.flush()
        await _never.wait()
    return "unreachable"


@tool(read_only=True)
def block_thread() -> str:
    """Block a worker thread for a minute; a thread cannot be cancelled."""
    sys.stderr.write("block_thread started\n")
    sys.stderr.flush()
    threading.Event().wait(60)
    return "unblocked"
