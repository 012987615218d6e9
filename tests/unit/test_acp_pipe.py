"""`EditorPipe`, the bounded JSON-RPC reader of `heron acp`, at its edges: lines at and past the
bound, a last line without its newline, the answers to what is not one message. The reader is
a real `asyncio.StreamReader` fed bytes; the answers go out through a real pipe."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from heron._support.limits import InputLimits
from heron.acp.stdio import EditorPipe

LIMIT = 256


@dataclass
class Wired:
    pipe: EditorPipe
    reader: asyncio.StreamReader
    answers: asyncio.StreamReader
    logged: list[str]

    async def answer(self) -> dict[str, Any]:
        line = await asyncio.wait_for(self.answers.readline(), 5)
        data: dict[str, Any] = json.loads(line)
        return data


@pytest.fixture
async def wired() -> AsyncIterator[Wired]:
    loop = asyncio.get_running_loop()
    read_fd, write_fd = os.pipe()
    incoming = os.fdopen(read_fd, "rb", buffering=0)
    outgoing = os.fdopen(write_fd, "wb", buffering=0)
    answers = asyncio.StreamReader()
    read_side, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(answers), incoming
    )
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, outgoing)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    reader = asyncio.StreamReader(limit=LIMIT)
    logged: list[str] = []
    limits = InputLimits(max_bytes=LIMIT, max_depth=8)
    pipe = EditorPipe(reader, writer, limits=limits, log=logged.append)
    yield Wired(pipe=pipe, reader=reader, answers=answers, logged=logged)
    await pipe.close()
    read_side.close()


def _line(size: int) -> bytes:
    """A JSON-RPC request of exactly `size` bytes, its newline included."""
    head, tail = b'{"jsonrpc":"2.0","id":1,"method":"m","params":"', b'"}\n'
    return head + b"x" * (size - len(head) - len(tail)) + tail


async def test_a_line_of_exactly_the_bound_is_read_and_one_byte_more_is_refused(
    wired: Wired,
) -> None:
    wired.reader.feed_data(_line(LIMIT + 1) + _line(LIMIT))
    wired.reader.feed_eof()

    message = await wired.pipe.receive()

    assert message is not None and len(json.dumps(message, separators=(",", ":"))) == LIMIT - 1
    refused = await wired.answer()
    assert refused == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": f"Invalid Request: message longer than {LIMIT} bytes"},
    }
    assert await wired.pipe.receive() is None
    assert wired.logged == [f"refused a message from the editor: {refused['error']['message']}"]


async def test_a_long_line_arriving_in_pieces_is_dropped_whole_and_the_next_one_read(
    wired: Wired,
) -> None:
    receiving = asyncio.ensure_future(wired.pipe.receive())
    for _ in range(10):  # ten times the bound, never buffered whole
        wired.reader.feed_data(b"y" * LIMIT)
        await asyncio.sleep(0)  # a bare yield: the pipe reads each piece as it comes
    wired.reader.feed_data(b'\n{"jsonrpc":"2.0","id":7,"method":"ok"}\n')

    assert await asyncio.wait_for(receiving, 5) == {"jsonrpc": "2.0", "id": 7, "method": "ok"}
    assert (await wired.answer())["error"]["code"] == -32600


async def test_the_last_line_needs_no_newline_but_an_oversized_one_just_ends_the_input(
    wired: Wired,
) -> None:
    wired.reader.feed_data(b'{"jsonrpc":"2.0","id":1,"method":"last"}')
    wired.reader.feed_eof()

    assert await wired.pipe.receive() == {"jsonrpc": "2.0", "id": 1, "method": "last"}
    assert await wired.pipe.receive() is None


@pytest.mark.parametrize(
    ("line", "code", "why"),
    [
        (b"{nope\n", -32700, "Parse error"),
        (b"42\n", -32600, "expected one JSON-RPC object, got int"),
        (b'{"jsonrpc":"2.0","method":7}\n', -32600, "the method must be a string"),
        (b'{"jsonrpc":"2.0"}\n', -32600, "a message needs a method or an id"),
        (b'{"jsonrpc":"2.0","id":true,"method":"m"}\n', -32600, "string or an integer"),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"m"}\n', -32600, "string or an integer"),
        (b'{"id":1,"params":' + b"[" * 9 + b"]" * 9 + b"}\n", -32600, "more than 8 levels deep"),
        (b'{"id":1,"method":"m","params":1e400}\n', -32600, "expected a finite number"),
        (b'{"id":1,"method":"\\ud800"}\n', -32600, "method: text holds a lone surrogate"),
        (b'{"id":1,"method":"\xff"}\n', -32700, "not UTF-8"),
    ],
)
async def test_what_is_not_one_message_is_answered_and_skipped(
    wired: Wired, line: bytes, code: int, why: str
) -> None:
    wired.reader.feed_data(b"\n" + line + b'{"jsonrpc":"2.0","id":"next","method":"m"}\n')

    assert await wired.pipe.receive() == {"jsonrpc": "2.0", "id": "next", "method": "m"}
    answer = await wired.answer()
    assert (answer["id"], answer["error"]["code"]) == (None, code)
    assert why in answer["error"]["message"]
