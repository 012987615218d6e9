"""How the workspace file tools report failure: a refusal or an OS error becomes a failed
`ToolResult` with structured data the model can act on. Also the wording of counts they share.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec

from heron.errors import HeronError
from heron.safety.workspace import Workspace, WorkspaceError
from heron.tools.definition import ToolResult

P = ParamSpec("P")


class Refused(HeronError):
    """A clear, structured refusal inside a tool; becomes a failed `ToolResult`."""

    def __init__(self, reason: str, message: str, **data: Any) -> None:
        super().__init__(message)
        self.data = {"error": reason, "message": message, **data}


def guarded(ws: Workspace, fn: Callable[P, ToolResult]) -> Callable[P, ToolResult]:
    """Turn refusals and OS errors into failed results the model can act on."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> ToolResult:
        try:
            return fn(*args, **kwargs)
        except WorkspaceError as exc:
            return ToolResult.fail(str(exc), data=exc.to_data())
        except Refused as exc:
            return ToolResult.fail(str(exc), data=exc.data)
        except OSError as exc:
            where = _display(ws, exc.filename)
            message = f"{exc.strerror or exc}{f': {where}' if where else ''}"
            return ToolResult.fail(message, data={"error": "os_error", "message": message})

    return wrapper


def _display(ws: Workspace, filename: object) -> str:
    if not isinstance(filename, str | Path):
        return ""
    try:
        return ws.relative(Path(filename))
    except WorkspaceError:
        return "(a path outside the workspace)"


def plural(count: int, one: str, many: str = "") -> str:
    """`count` with the noun that fits it: `1 file`, `2 files`, `3 entries` (given `many`)."""
    return f"{count:,} {one if count == 1 else many or one + 's'}"
