"""A workspace file swapped between heron's check and its read, as a command the model runs
in the background could swap it: a reader must refuse what it then finds, never wait on it
(a FIFO) or read it without end (a file grown past the limit)."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from heron import Tool, ToolContext, ToolResult
from heron.safety.workspace import Workspace

WAIT_S = 10.0
"""Bound for a call that must return at once; a blocked call never reaches it when heron works."""


def into_fifo(target: Path) -> None:
    target.unlink()
    os.mkfifo(target)


def change_after_first_look(
    monkeypatch: pytest.MonkeyPatch, target: Path, change: Callable[[Path], object]
) -> None:
    """Run `change(target)` right after the first stat of `target` that is not part of
    `Workspace.resolve`: the reader's own check, however it makes it (`is_file`, `stat`)."""
    real_stat = Path.stat
    changed: list[object] = []

    def stat_then_change(self: Path, **kwargs: Any) -> os.stat_result:
        info = real_stat(self, **kwargs)
        caller = sys._getframe(1)  # `Path.exists` inside `Workspace.resolve`, say
        names = {
            caller.f_code.co_qualname,
            caller.f_back.f_code.co_qualname if caller.f_back else "",
        }
        if self == target and "Workspace.resolve" not in names and not changed:
            changed.append(change(target))
        return info

    monkeypatch.setattr(Path, "stat", stat_then_change)


def change_after_resolve(
    monkeypatch: pytest.MonkeyPatch, ws: Workspace, change: Callable[[Path], object]
) -> None:
    """Run `change(path)` right after `ws.resolve` first returns `path` (its existence checked)."""
    real_resolve = Workspace.resolve
    changed: list[object] = []

    def resolve_then_change(self: Workspace, path: str, **kwargs: Any) -> Path:
        resolved = real_resolve(self, path, **kwargs)
        if self is ws and not changed:
            changed.append(change(resolved))
        return resolved

    monkeypatch.setattr(Workspace, "resolve", resolve_then_change)


def returns_promptly(fn: Callable[[], Any], fifo: Path | None = None) -> Any:
    """`fn()` run in a thread; fails the test when it has not returned within `WAIT_S`."""
    blocked, value = _in_a_thread(fn, fifo)
    if blocked:
        pytest.fail(f"blocked for more than {WAIT_S} s")
    return value


def call_in_a_thread(tool: Tool, fifo: Path | None = None, **arguments: Any) -> ToolResult | None:
    """`tool` called on an event loop of its own thread, so a call that blocks cannot block the
    test's; None when it has not returned within `WAIT_S`."""
    ctx = ToolContext(call_id="c1", turn_id="t1")
    blocked, result = _in_a_thread(
        lambda: asyncio.run(tool.execute(tool.validate(arguments), ctx)), fifo
    )
    return None if blocked else result


def _in_a_thread(fn: Callable[[], Any], fifo: Path | None) -> tuple[bool, Any]:
    """(True, None) when `fn()`, on a thread of its own, has not returned within `WAIT_S`;
    else (False, its value), its exception re-raised here. A call blocked opening `fifo` is
    released by opening its other end, so no thread outlives the test."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the test's thread
            box["error"] = exc

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(WAIT_S)
    if thread.is_alive():
        if fifo is not None:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(WAIT_S)
        return True, None
    if "error" in box:
        raise box["error"]
    return False, box["value"]
