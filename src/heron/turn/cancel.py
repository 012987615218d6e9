"""Cancellation scopes for turns and nested (sub-agent) turns.

A scope is cancelled once, with a reason and a mode: `cancel` stops running tools, `detach`
leaves them running in the background (their results arrive later as events). Child scopes
are cancelled with their parent. The loop checks `cancelled` at its safe points and waits on
`future` while a model streams or tools run.

Plain asyncio cancellation of the task running a turn (`task.cancel()`, `asyncio.timeout`,
`asyncio.wait_for`, a failing `TaskGroup` sibling) takes the same path: where the engine waits
(`run_task`, `stop_task`), the `CancelledError` is *absorbed* into the turn's scope
(`absorb`), the turn closes every call as a scope cancellation would, and the loop re-raises the
`CancelledError` once the history is whole. Only the task that runs the turn's loop absorbs
(`bind_task`): a tool calling a tool inside a cancelled tool task gets its `CancelledError` as
usual, so one timed-out tool never cancels the whole turn.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any, Literal, TypeVar, cast

CancelMode = Literal["cancel", "detach"]


class CancelScope:
    """Cancels a whole turn from outside (Ctrl-C, a new message, a parent run); once only.

    `cancel(reason, mode="cancel")` stops running tools; `mode="detach"` leaves them running in
    the background. `child()` makes a scope cancelled together with this one. Not to be
    confused with the hook decision `Cancel`, which skips one tool call and lets the turn go on.
    """

    __slots__ = ("_absorbed", "_children", "_future", "_task", "mode", "reason")

    def __init__(self) -> None:
        self.reason: str | None = None
        self.mode: CancelMode = "cancel"
        self._future: asyncio.Future[None] | None = None
        self._children: list[CancelScope] = []
        self._absorbed: asyncio.CancelledError | None = None
        self._task: asyncio.Task[Any] | None = None

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


def bind_task(scope: CancelScope, task: asyncio.Task[Any] | None) -> asyncio.Task[Any] | None:
    """Make `task` the one running `scope`'s turn (the one that absorbs); returns the previous."""
    previous, scope._task = scope._task, task
    return previous


def take_absorbed(scope: CancelScope) -> asyncio.CancelledError | None:
    """The task cancellation `absorb` recorded for `scope` (once; the loop re-raises it)."""
    absorbed, scope._absorbed = scope._absorbed, None
    return absorbed


TASK_CANCELLED = "the task running the turn was cancelled"
"""The scope's reason when a plain asyncio cancellation stopped the turn."""


def absorb(scope: CancelScope, exc: asyncio.CancelledError) -> None:
    """Turn a cancellation of the task running a turn into a cancellation of its scope.

    Called where the engine catches the `CancelledError`; the turn then closes its calls like
    any `mode="cancel"` interrupt and the loop re-raises `exc` at its end. In any other task
    (a tool's own task) `exc` is raised again at once.
    """
    if scope._task is None or asyncio.current_task() is not scope._task:
        raise exc
    if scope._absorbed is None:
        scope._absorbed = exc
    detail = ", ".join(str(arg) for arg in exc.args if arg)
    scope.cancel(f"{TASK_CANCELLED} ({detail})" if detail else TASK_CANCELLED)


async def stop_task(task: asyncio.Future[Any], scope: CancelScope, grace_s: float) -> bool:
    """Cancel `task` and wait up to `grace_s` for it to unwind; True when it ended.

    A cancellation of the waiting task is absorbed into `scope`: the caller finishes its
    bookkeeping and the loop re-raises it.
    """
    task.cancel()
    try:
        await asyncio.wait((task,), timeout=grace_s)
    except asyncio.CancelledError as exc:
        absorb(scope, exc)
    return task.done()


WaitOutcome = Literal["done", "cancelled", "timeout"]

T = TypeVar("T")


async def run_task(
    coro: Coroutine[Any, Any, T], scope: CancelScope, limit_s: float | None = None
) -> tuple[asyncio.Task[T], WaitOutcome]:
    """Start `coro` as a task and wait until it finishes, `scope` is cancelled or `limit_s`
    seconds pass; returns the task and which of the three happened.

    Leaves the task running in the last two cases: the caller decides to cancel or detach it.
    A cancellation of the waiting task itself is absorbed into `scope` (see `absorb`) and
    reported as `cancelled` (or `done`, when the task finished in the same step). Cheaper than
    `asyncio.wait` on the hot path (one plain future, no task sets), and the task wakes the
    waiter itself as it ends, so the caller resumes one event-loop iteration sooner than
    through a done callback (this is every model call and every tool call). The task starts
    eagerly (`eager_task`): one that ends without suspending (a quick tool, a scripted model)
    costs no event-loop iteration at all. Should the waiting task be cancelled without
    absorbing it (not the turn's own task), the started task is cancelled too and the
    `CancelledError` propagates.
    """
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[WaitOutcome] = loop.create_future()
    if scope.cancelled:  # never started: the caller cancels it before its first step
        return loop.create_task(_signalling(coro, waiter)), "cancelled"
    # The limit counts from the start, the eager first step included.
    deadline = loop.time() + limit_s if limit_s is not None else None
    task = eager_task(loop, _signalling(coro, waiter))
    if task.done():
        return task, "done"
    try:
        return task, await _race(task, waiter, scope, deadline)
    except asyncio.CancelledError:
        task.cancel()
        raise


def eager_task(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """A task of `coro` whose first step has already run, as that task (Python 3.12's eager
    tasks: `current_task()` is the new task, its context a copy). A coroutine that ends without
    suspending is done on return and never costs a trip through the event loop.

    On Python 3.11 the task's scheduled first step is taken off the loop's ready queue and run
    at once between leaving and re-entering the calling task, which is what 3.12 does; on a
    loop without that queue (uvloop), or when the last ready callback is not that step, the
    task starts at the loop's next iteration, as with `create_task`.
    """
    if _EAGER_START:
        start: Any = asyncio.Task  # `eager_start` is 3.12+; typing checks against 3.11
        return cast("asyncio.Task[T]", start(coro, loop=loop, eager_start=True))
    task = loop.create_task(coro)
    ready = getattr(loop, "_ready", None)
    current = asyncio.current_task(loop)
    if not ready or current is None:
        return task
    step = ready[-1]
    owner: object = getattr(getattr(step, "_callback", None), "__self__", None)
    if owner is not task:
        return task
    ready.pop()
    _leave_task(loop, current)
    try:
        step._run()
    finally:
        _enter_task(loop, current)
    return task


_EAGER_START = sys.version_info >= (3, 12)
if not _EAGER_START:  # the 3.11 swap; later versions need neither
    _enter_task = asyncio.tasks._enter_task
    _leave_task = asyncio.tasks._leave_task


async def _signalling(coro: Coroutine[Any, Any, T], waiter: asyncio.Future[WaitOutcome]) -> T:
    try:
        return await coro
    finally:
        if not waiter.done():
            waiter.set_result("done")


async def _race(
    task: asyncio.Future[Any],
    waiter: asyncio.Future[WaitOutcome],
    scope: CancelScope,
    deadline: float | None,
) -> WaitOutcome:
    def settle(outcome: WaitOutcome) -> None:
        if not waiter.done():
            waiter.set_result(outcome)

    def on_cancel(_: object) -> None:
        settle("cancelled")

    scope_future = scope.future
    scope_future.add_done_callback(on_cancel)
    timer = (
        asyncio.get_running_loop().call_at(deadline, settle, "timeout")
        if deadline is not None
        else None
    )
    try:
        return await waiter
    except asyncio.CancelledError as exc:
        absorb(scope, exc)
        return "done" if task.done() else "cancelled"
    finally:
        scope_future.remove_done_callback(on_cancel)
        if timer is not None:
            timer.cancel()
