"""Cancellation scopes for turns and nested (sub-agent) turns.

A scope is cancelled once, with a reason and a mode: `cancel` stops running tools, `detach`
leaves them running in the background (their results arrive later as events). Child scopes
are cancelled with their parent. The loop checks `cancelled` at its safe points and waits on
`future` while a model streams or tools run.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

CancelMode = Literal["cancel", "detach"]


class CancelScope:
    """Cancels a whole turn from outside (Ctrl-C, a new message, a parent run); once only.

    `cancel(reason, mode="cancel")` stops running tools; `mode="detach"` leaves them running in
    the background. `child()` makes a scope cancelled together with this one. Not to be
    confused with the hook decision `Cancel`, which skips one tool call and lets the turn go on.
    """

    __slots__ = ("_children", "_future", "mode", "reason")

    def __init__(self) -> None:
        self.reason: str | None = None
        self.mode: CancelMode = "cancel"
        self._future: asyncio.Future[None] | None = None
        self._children: list[CancelScope] = []

    @property
    def cancelled(self) -> bool:
        return self.reason is not None

    def cancel(self, reason: str = "cancelled by user", *, mode: CancelMode = "cancel") -> None:
        """Cancel this scope and its children. A second call keeps the first reason."""
        if self.reason is not None:
            return
        self.reason = reason
        self.mode = mode
        if self._future is not None and not self._future.done():
            self._future.set_result(None)
        for child in self._children:
            child.cancel(reason, mode=mode)

    def child(self) -> CancelScope:
        """A scope cancelled together with this one (a nested run's own scope)."""
        scope = CancelScope()
        if self.cancelled:
            scope.cancel(self.reason or "", mode=self.mode)
        else:
            self._children.append(scope)
        return scope

    @property
    def future(self) -> asyncio.Future[None]:
        """Done once the scope is cancelled; created lazily on the running loop."""
        if self._future is None:
            self._future = asyncio.get_running_loop().create_future()
            if self.cancelled:
                self._future.set_result(None)
        return self._future


WaitOutcome = Literal["done", "cancelled", "timeout"]


async def wait_task(
    task: asyncio.Future[Any], scope: CancelScope, limit_s: float | None = None
) -> WaitOutcome:
    """Wait until `task` finishes, `scope` is cancelled or `limit_s` seconds pass.

    Leaves `task` running in the last two cases: the caller decides to cancel or detach it.
    Cheaper than `asyncio.wait` on the hot path (one plain future, no task sets).
    """
    if task.done():
        return "done"
    if scope.cancelled:
        return "cancelled"
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[WaitOutcome] = loop.create_future()

    def settle(outcome: WaitOutcome) -> None:
        if not waiter.done():
            waiter.set_result(outcome)

    def on_task(_: object) -> None:
        settle("done")

    def on_cancel(_: object) -> None:
        settle("cancelled")

    task.add_done_callback(on_task)
    scope_future = scope.future
    scope_future.add_done_callback(on_cancel)
    timer = loop.call_later(limit_s, settle, "timeout") if limit_s is not None else None
    try:
        return await waiter
    finally:
        task.remove_done_callback(on_task)
        scope_future.remove_done_callback(on_cancel)
        if timer is not None:
            timer.cancel()
