"""`HttpFront` against senders that are slow or many on purpose: real uvicorn on loopback, real
sockets, small deadlines. Each slow sender is waited on until the server ends it; the client's
own read timeout only turns a hang into a failure."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from heron.always_on.http import HttpFront

HEAD_S = 0.3
BODY_S = 0.3
CLIENT_WAIT_S = 10.0
"""Far past every deadline under test: reaching it means the server held the connection."""

released = asyncio.Event()


async def ok(request: Request) -> Response:
    return JSONResponse({"ok": True, "body": len(await request.body())})


async def stream(_request: Request) -> Response:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"first\n"
        await released.wait()
        yield b"last\n"

    return StreamingResponse(chunks(), media_type="text/plain")


@pytest.fixture
async def front() -> AsyncIterator[HttpFront]:
    released.clear()
    server = HttpFront(
        [Route("/ok", ok, methods=["GET", "POST"]), Route("/stream", stream)],
        addresses=[("127.0.0.1", 0)],
        head_timeout=HEAD_S,
        body_timeout=BODY_S,
        max_connections=4,
        websockets=False,
    )
    await server.start()
    yield server
    released.set()
    await server.aclose()


async def connect(front: HttpFront) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(*front.addresses[0])


async def until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server writes until it closes the connection."""
    return await asyncio.wait_for(reader.read(), CLIENT_WAIT_S)


def answer(raw: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status, *lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines)
    return status, headers, body


async def get_ok(front: HttpFront) -> bytes:
    reader, writer = await connect(front)
    writer.write(b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    raw = await until_closed(reader)
    writer.close()
    return raw


async def test_a_head_that_never_ends_is_answered_408_and_closed(front: HttpFront) -> None:
    reader, writer = await connect(front)
    writer.write(b"GET /ok HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # and then a byte now and then
    await writer.drain()
    status, headers, body = answer(await until_closed(reader))
    assert status == "HTTP/1.1 408 Request Timeout"
    assert headers["connection"] == "close"
    assert json.loads(body) == {
        "status": "invalid",
        "error": f"the request's head did not arrive within {HEAD_S:g} s",
    }
    writer.close()
    assert answer(await get_ok(front))[0] == "HTTP/1.1 200 OK"  # the front goes on


async def test_a_connection_that_sends_nothing_is_closed(front: HttpFront) -> None:
    reader, writer = await connect(front)
    assert answer(await until_closed(reader))[0] == "HTTP/1.1 408 Request Timeout"
    writer.close()


async def test_a_kept_alive_connection_is_timed_again_for_its_next_head(front: HttpFront) -> None:
    reader, writer = await connect(front)
    writer.write(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
    assert await asyncio.wait_for(reader.readline(), CLIENT_WAIT_S) == b"HTTP/1.1 200 OK\r\n"
    await asyncio.wait_for(reader.readuntil(b'"body":0}'), CLIENT_WAIT_S)
    writer.write(b"GET /ok HTTP/1.1\r\nHo")  # the next request's head, never finished
    assert answer(await until_closed(reader))[0] == "HTTP/1.1 408 Request Timeout"
    writer.close()


async def test_a_body_that_stops_arriving_is_answered_408_and_closed(front: HttpFront) -> None:
    reader, writer = await connect(front)
    writer.write(b"POST /ok HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    await writer.drain()  # and then nothing more, the connection left open
    status, headers, body = answer(await until_closed(reader))
    assert status == "HTTP/1.1 408 Request Timeout"
    assert headers["connection"] == "close"
    assert json.loads(body)["error"] == f"the body did not arrive within {BODY_S:g} s"
    writer.close()


async def test_the_rest_of_a_body_answered_413_must_arrive_in_time(front: HttpFront) -> None:
    reader, writer = await connect(front)
    writer.write(b"POST /ok HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n{")
    assert await asyncio.wait_for(reader.readline(), CLIENT_WAIT_S) == (
        b"HTTP/1.1 413 Request Entity Too Large\r\n"
    )
    writer.write(b"x" * 100)  # the rest comes a little at a time, never all of it
    await writer.drain()
    await until_closed(reader)  # closed by the server once the body's deadline passed
    writer.close()


async def test_a_response_that_streams_is_not_cut_by_the_body_deadline(front: HttpFront) -> None:
    reader, writer = await connect(front)
    writer.write(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
    await asyncio.wait_for(reader.readuntil(b"first\n"), CLIENT_WAIT_S)
    # A slow body sent after the stream began: its 408 says the stream's deadline passed too.
    slow_reader, slow_writer = await connect(front)
    slow_writer.write(b"POST /ok HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n{")
    assert answer(await until_closed(slow_reader))[0] == "HTTP/1.1 408 Request Timeout"
    released.set()
    assert await asyncio.wait_for(reader.readuntil(b"last\n"), CLIENT_WAIT_S)
    writer.close()
    slow_writer.close()


async def test_past_the_cap_a_connection_is_answered_503_and_a_freed_slot_serves_again() -> None:
    server = HttpFront(
        [Route("/ok", ok)],
        addresses=[("127.0.0.1", 0)],
        head_timeout=CLIENT_WAIT_S * 3,  # the idle ones stay for the whole test
        max_connections=3,
        websockets=False,
    )
    await server.start()
    try:
        idle = [await connect(server) for _ in range(3)]
        for _, writer in idle:
            writer.write(b"GET /ok HTTP/1.1\r\n")
            await writer.drain()
        status, headers, body = answer(await get_ok(server))
        assert status == "HTTP/1.1 503 Service Unavailable"
        assert (headers["retry-after"], headers["connection"]) == ("1", "close")
        assert json.loads(body)["error"] == "too many open connections; retry later"

        _, first = idle.pop()
        first.close()
        await first.wait_closed()
        # The server learns of the close on its next loop turn: ask until it has.
        async with asyncio.timeout(CLIENT_WAIT_S):
            while answer(raw := await get_ok(server))[0] != "HTTP/1.1 200 OK":
                assert answer(raw)[0] == "HTTP/1.1 503 Service Unavailable"
        for _, writer in idle:
            writer.close()
    finally:
        await server.aclose()
