"""The editor's pipe: JSON-RPC messages on standard input and output, one per line, bounded.

The SDK's own stdio reader drops a line that is not JSON without answering and reads a line
of any length into memory. Everything from the editor is outside input, so heron reads it
through `EditorPipe`, the SDK's message-level `Transport`:

- a line longer than `[limits] max_bytes` is skipped as it streams by (never held whole) and
  answered with a JSON-RPC `Invalid Request` error;
- every line is parsed by `heron._support.limits.parse_json`, the one check of outside JSON:
  a line that is not JSON (or not UTF-8) gets `Parse error`; one nested deeper than
  `[limits] max_depth` (measured before parsing), or holding a number no double holds or a
  lone surrogate, gets `Invalid Request`;
- a JSON value that is not one JSON-RPC message (a batch, a number, a method that is not a
  string, an id that is neither a string nor an integer) gets `Invalid Request`;
- a notification has no id to answer, so one heron does not take (a method it has no
  notification for, or `session/cancel` with params that do not fit) is dropped with one
  line on standard error, where the SDK would log a traceback;
- the agent goes on with the next line in every case.

`protocol_streams` takes file descriptors 0 and 1 for the protocol alone, so a tool that
prints, or a child process that inherits them, can neither corrupt the protocol nor swallow the
editor's messages.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from acp.meta import AGENT_METHODS
from acp.schema import CancelNotification
from pydantic import BaseModel, ValidationError

from heron._support.limits import InputLimits, InputRejected, input_limits, parse_json
from heron.errors import HeronError

__all__ = ["EditorPipe", "protocol_streams"]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600

_NOTIFICATIONS: dict[str, type[BaseModel]] = {AGENT_METHODS["session_cancel"]: CancelNotification}
"""The notifications an editor may send heron, by method; `_`-prefixed extensions are
ignored by the SDK."""


class EditorPipe:
    """A JSON-RPC `Transport` (see the module docstring) over the editor's byte streams."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        limits: InputLimits | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._limits = limits or input_limits()
        self._max = self._limits.max_bytes
        self._lock = asyncio.Lock()  # one whole line at a time on the way out
        self._log = log or _stderr

    async def send(self, message: dict[str, Any]) -> None:
        # `default=str`: a validation error's details may hold an exception object, and its
        # response must still go out.
        line = json.dumps(message, separators=(",", ":"), default=str) + "\n"
        async with self._lock:
            self._writer.write(line.encode("utf-8"))
            await self._writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        while True:
            try:
                line = await self._read_line()
            except _TooLong:
                await self._refuse(
                    INVALID_REQUEST, f"Invalid Request: message longer than {self._max} bytes"
                )
                continue
            if line is None:
                return None
            if not line.strip():
                continue
            try:
                message = parse_json(line, limits=self._limits)
            except InputRejected as exc:
                where = exc.problem_at("message")
                if exc.kind == "syntax":
                    await self._refuse(PARSE_ERROR, f"Parse error: {where}")
                else:
                    await self._refuse(INVALID_REQUEST, f"Invalid Request: {where}")
                continue
            problem = _problem(message)
            if problem is not None:
                await self._refuse(INVALID_REQUEST, f"Invalid Request: {problem}")
                continue
            if "id" not in message and (problem := _notification_problem(message)) is not None:
                self._log(f"dropped a notification from the editor: {problem}")
                continue
            return dict(message)

    async def close(self) -> None:
        self._writer.close()  # every send was drained already

    async def _refuse(self, code: int, message: str) -> None:
        self._log(f"refused a message from the editor: {message}")
        await self.send({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}})

    async def _read_line(self) -> bytes | None:
        """The next line, or `None` at the end of input; `_TooLong` for a line past the bound
        (read to its end and dropped)."""
        too_long = False
        while True:
            try:
                line = await self._reader.readuntil(b"\n")
            except asyncio.LimitOverrunError as exc:
                # Drop what is buffered so far and keep reading to the line's end.
                too_long = True
                await self._reader.readexactly(exc.consumed)
                continue
            except asyncio.IncompleteReadError as exc:
                if too_long or not exc.partial:
                    return None
                line = exc.partial
            if too_long or len(line) > self._max:
                raise _TooLong
            return line


class _TooLong(HeronError):
    """A line past the bound was read and dropped."""


def _problem(message: Any) -> str | None:
    """Why `message` is not one JSON-RPC message heron can handle, or `None`."""
    if not isinstance(message, dict):
        kind = "a batch" if isinstance(message, list) else type(message).__name__
        return f"expected one JSON-RPC object, got {kind}"
    if "method" in message and not isinstance(message["method"], str):
        return "the method must be a string"
    if "method" not in message and "id" not in message:
        return "a message needs a method or an id"
    msg_id = message.get("id")
    if msg_id is not None and (isinstance(msg_id, bool) or not isinstance(msg_id, str | int)):
        return "the id must be a string or an integer"
    return None


def _notification_problem(message: dict[str, Any]) -> str | None:
    """Why heron cannot take the notification `message`, or `None`."""
    method = message["method"]
    if method.startswith("_"):
        return None
    model = _NOTIFICATIONS.get(method)
    if model is None:
        return f"heron takes no notification {json.dumps(method)[:80]}"
    try:
        model.model_validate(message.get("params"))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "params"
        return f"{method}: {where}: {first['msg']}"
    return None


async def protocol_streams(limit: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The editor's messages in, heron's out, on private copies of file descriptors 0 and 1.

    Afterwards descriptor 0 reads nothing (`/dev/null`) and descriptor 1 is standard error.
    The reader buffers at most about `limit` bytes of a line before `EditorPipe` drops it."""
    loop = asyncio.get_running_loop()
    sys.stdout.flush()
    incoming = os.fdopen(os.dup(0), "rb", buffering=0)
    outgoing = os.fdopen(os.dup(1), "wb", buffering=0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    reader = asyncio.StreamReader(limit=limit)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), incoming)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, outgoing)
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


def _stderr(text: str) -> None:
    sys.stderr.write(f"heron acp: {text}\n")
    sys.stderr.flush()
