"""How the workspace file tools report failure: a refusal or an OS error becomes a failed
`ToolResult` with structured data the model can act on. Also the wording of counts they share,
and their judge of a change to heron's own configuration (`config_change`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ParamSpec

from heron._support.own_paths import config_files_touched
from heron.errors import HeronError
from heron.safety.workspace import Workspace, WorkspaceError
from heron.tools.definition import CallApproval, ToolResult

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


def config_change(root: Path, *fields: str) -> Callable[[Mapping[str, Any]], CallApproval | None]:
    """The `approval_for` of a tool whose `fields` name workspace paths it changes (the
    workspace at `root`): a call that writes, moves or deletes a configuration file heron reads
    (`heron.toml`, a tools module) is high risk — it changes what the agent may do on its next
    start — so an operator decides, whatever the autonomy; any other call is left to the usual
    rules."""

    def approval_for(arguments: Mapping[str, Any]) -> CallApproval | None:
        for name in fields:
            value = arguments.get(name)
            touched = config_files_touched(Path(os.path.join(root, value))) if value else ()
            if touched:
                return CallApproval(
                    risk="high",
                    unattended=False,
                    note=f"changes heron's own configuration ({touched[0].name}), which "
                    "decides what the agent may do on its next start",
                )
        return None

    return approval_for
