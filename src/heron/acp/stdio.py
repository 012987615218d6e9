"""The editor's pipe: JSON-RPC messages on standard input and output, one per line, bounded.

The SDK's own stdio reader drops a line that is not JSON without answering and reads a line
of any length into memory. Everything from the editor is outside input, so heron reads it
through `EditorPipe`, the SDK's message-level `Transport`:

- a line longer than `MAX_MESSAGE_BYTES` is skipped as it streams by (never held whole) and
  answered with a JSON-RPC `Invalid Request` error;
- a line that is not JSON gets `Parse error`; a JSON value that is not one JSON-RPC message
  (a batch, a number, a method that is not a string, an id that is neither a string nor an
  integer, nesting deeper than `MAX_DEPTH`) gets `Invalid Request`;
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

from heron.errors import HeronError

__all__ = [
    "MAX_DEPTH",
    "MAX_MESSAGE_BYTES",
    "EditorPipe",
    "protocol_streams",
]

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
"""The longest message line accepted from the editor (a prompt may embed attached files)."""

MAX_DEPTH = 64
"""The deepest nesting of arrays and objects accepted in a message."""

PARSE_ERROR = -32700
INVALID_REQUEST = -32600


class EditorPipe:
    """A JSON-RPC `Transport` (see the module docstring) over the editor's byte streams."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._max = max_message_bytes
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
                message = json.loads(line)
            except (ValueError, RecursionError):  # RecursionError: nesting past the C parser's
                await self._refuse(PARSE_ERROR, "Parse error: the line is not JSON")
                continue
            problem = _problem(message)
            if problem is not None:
                await self._refuse(INVALID_REQUEST, f"Invalid Request: {problem}")
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
    if _depth_exceeds(message, MAX_DEPTH):
        return f"nested deeper than {MAX_DEPTH} levels"
    return None


def _depth_exceeds(value: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(current, dict):
            stack.extend((v, depth + 1) for v in current.values())
        elif isinstance(current, list):
            stack.extend((v, depth + 1) for v in current)
    return False


async def protocol_streams(
    limit: int = MAX_MESSAGE_BYTES,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
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
