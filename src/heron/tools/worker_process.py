"""Running a sync tool function in a worker process heron can kill (`@tool(runs_in="process")`).

Each call runs in a fresh Python process (`sys.executable`, heron's `sys.path`, its working
directory and environment), in a session of its own. The worker finds the function by module
and qualified name: it imports the module, or loads it from its file when it was loaded from one
(a `--tools` file, the main script). So the function must be defined at module level, and its
arguments and return value must be picklable; `process_target` refuses at definition time what
can be known to fail, and what cannot (a value that will not pickle) fails the call with a clear
error. Nothing else of the caller is imported: unlike `multiprocessing`, the main script is not
re-run in the worker, except when the tool itself is defined there (then keep the script's work
under `if __name__ == "__main__":`).

A timeout or a cancel kills the worker's process group with SIGKILL, so the work really stops
(whatever it had already done stays done). On Linux the worker also dies when heron does. What
the tool prints goes to heron's stderr, never into the result or heron's stdout. Each call pays
an interpreter start plus importing the tool's module (half a second or more with heron and
pydantic): the mode is for slow work that must be stoppable, not for quick helpers.

This module imports only the standard library and `heron.errors`, so the worker starts light.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import os
import pickle
import signal
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from heron.errors import HeronError

__all__ = [
    "ProcessTarget",
    "ToolWorkerError",
    "process_target",
    "run_in_process",
    "unpicklable_types",
]

_REAP_S = 1.0
MAIN_ALIAS = "__heron_main__"
"""The name the worker loads the caller's main script under (so its `__main__` guard holds)."""

_BOOT = (
    "import pickle, sys\n"
    "sys.path[:] = pickle.load(sys.stdin.buffer)\n"
    "from heron.tools.worker_process import worker_main\n"
    "worker_main()\n"
)
"""The worker's first statements: heron's `sys.path` comes first, on stdin, then the call."""


class ToolWorkerError(HeronError, RuntimeError):
    """A worker process could not run the call: unpicklable data, or the worker died."""


@dataclass(frozen=True, slots=True)
class ProcessTarget:
    """Where the worker finds the function: module, qualified name, and the module's file."""

    module: str
    qualname: str
    path: str | None


def process_target(fn: Callable[..., Any]) -> tuple[ProcessTarget | None, list[str]]:
    """The target for `fn`, or the reasons a worker process could never find it."""
    qualname = str(getattr(fn, "__qualname__", ""))
    module_name = str(getattr(fn, "__module__", ""))
    problems = []
    if not qualname or "<" in qualname:
        problems.append(
            f"runs_in='process' needs a function defined at module level (the worker imports it "
            f"by name), not {qualname or fn!r}"
        )
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    if module is None or (module_name == "__main__" and path is None):
        problems.append(
            f"runs_in='process': module {module_name!r} has no file the worker could import "
            "(an interactive session?)"
        )
    if problems:
        return None, problems
    return ProcessTarget(module=module_name, qualname=qualname, path=path), []


async def run_in_process(target: ProcessTarget, kwargs: dict[str, Any]) -> Any:
    """Call the function in a fresh worker process; kill it if this call is cancelled."""
    try:
        request = pickle.dumps(list(sys.path)) + pickle.dumps((target, kwargs))
    except Exception as exc:
        raise ToolWorkerError(
            f"the arguments cannot be sent to the worker process: {exc}"
        ) from None
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _BOOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        start_new_session=True,  # its own process group: a kill reaches all it started
    )
    try:
        answer, _ = await worker.communicate(request)
    except BaseException:
        _kill(worker.pid)
        with contextlib.suppress(BaseException):  # reaped at once after SIGKILL
            await asyncio.wait_for(worker.wait(), _REAP_S)
        raise
    if not answer:
        raise ToolWorkerError(
            f"the worker process exited (code {worker.returncode}) without a result"
        )
    try:
        kind, value = pickle.loads(answer)
    except Exception as exc:
        raise ToolWorkerError(f"the worker's answer cannot be read: {exc}") from None
    if kind == "raised":
        raise value
    return value


def _kill(pid: int) -> None:
    """SIGKILL the worker and everything it started (its process group)."""
    sigkill = getattr(signal, "SIGKILL", signal.SIGTERM)
    killpg = getattr(os, "killpg", None)
    if killpg is not None:
        with contextlib.suppress(OSError):
            killpg(pid, sigkill)
    with contextlib.suppress(OSError):
        os.kill(pid, sigkill)


# -- in the worker ------------------------------------------------------------------------------


def worker_main() -> None:
    """The worker: read the call from stdin, run it, write the pickled outcome to stdout."""
    answer = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what the tool prints goes to stderr, never into the answer
    _die_with_parent()
    message: tuple[str, Any]
    try:
        target, kwargs = _load_call()
        message = ("ok", _resolve(target)(**kwargs))
    except BaseException as exc:  # the parent reports it like any tool exception
        message = ("raised", _portable(exc))
    try:
        data = pickle.dumps(message)
    except Exception as exc:
        error = ToolWorkerError(f"the result cannot be sent back from the worker process: {exc}")
        data = pickle.dumps(("raised", error))
    with answer:
        answer.write(data)


def _load_call() -> tuple[ProcessTarget, dict[str, Any]]:
    loaded: tuple[ProcessTarget, dict[str, Any]] = pickle.load(sys.stdin.buffer)
    return loaded


def _resolve(target: ProcessTarget) -> Callable[..., Any]:
    name = MAIN_ALIAS if target.module == "__main__" else target.module
    module = sys.modules.get(name)
    if module is None:
        try:
            if name == MAIN_ALIAS:
                raise ModuleNotFoundError(name)
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            if target.path is None:
                raise
            spec = importlib.util.spec_from_file_location(name, target.path)
            if spec is None or spec.loader is None:
                raise
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
    found: Any = module
    for part in target.qualname.split("."):
        found = getattr(found, part)
    fn: Callable[..., Any] = getattr(found, "fn", found)  # a FunctionTool keeps it as `.fn`
    return fn


def _portable(exc: BaseException) -> Exception:
    """`exc` if it is an ordinary exception that survives pickling, else a `ToolWorkerError`
    naming it (a `SystemExit` in the worker must not become one in heron)."""
    if isinstance(exc, Exception):
        try:
            pickle.loads(pickle.dumps(exc))
        except Exception:
            pass
        else:
            return exc
    return ToolWorkerError(f"{type(exc).__name__}: {exc}")


def _die_with_parent() -> None:
    """On Linux, have the kernel kill the worker when heron goes away."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def unpicklable_types(hint: Any, seen: set[int]) -> list[str]:
    """Classes in `hint` (nested models included) that the worker and heron cannot both find
    by name: defined inside a function, or in the main script."""
    if hint is None or id(hint) in seen:
        return []
    seen.add(id(hint))
    found: list[str] = []
    for arg in typing.get_args(hint):
        found += unpicklable_types(arg, seen)
    if isinstance(hint, type):
        if "<locals>" in hint.__qualname__:
            found.append(f"{hint.__qualname__} is defined inside a function")
        elif hint.__module__ == "__main__":
            found.append(f"{hint.__qualname__} is defined in the main script")
        if issubclass(hint, BaseModel):
            for info in hint.model_fields.values():
                found += unpicklable_types(info.annotation, seen)
        elif issubclass(hint, dict) and hasattr(hint, "__required_keys__"):  # a TypedDict
            for value in typing.get_type_hints(hint).values():
                found += unpicklable_types(value, seen)
    return found
