"""The event stream's cursor as a client sends it (`Last-Event-ID`, `?after=`, over SSE and the
WebSocket) to a real `heron serve --http-port` subprocess: a cursor that is not ASCII digits
small enough for the store, or one ahead of what the store holds, is told to resync — the
stream goes on from now and is not cut, silent or closed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

import httpx
from websockets.sync.client import connect

from support.cli import Heron
from support.gateway import OPS, VIEWER, SseFrame, bearer, frames, start

TURNS = [{"text": "Hello."}] * 8
"""An answer to each message the tests send."""


@contextmanager
def stream(
    http: str, *, after: str | None = None, last_event_id: bytes | None = None
) -> Iterator[Iterator[SseFrame]]:
    """The frames of session `main`'s event stream, read as they come."""
    headers = {k.encode(): v.encode() for k, v in bearer(VIEWER).items()}
    if last_event_id is not None:
        headers[b"Last-Event-ID"] = last_event_id  # as bytes: the server reads latin-1
    params = {"after": after} if after is not None else None
    with httpx.stream(
        "GET",
        f"{http}/v1/sessions/main/events",
        headers=headers,
        params=params,
        timeout=10,
        trust_env=False,
    ) as response:
        assert response.status_code == 200, response.read()
        yield frames(response.iter_lines())


@contextmanager
def socket(http: str, after: str) -> Iterator[Iterator[SseFrame]]:
    """The same frames over `…/ws?after=`."""
    url = "ws://" + http.removeprefix("http://") + f"/v1/sessions/main/ws?after={quote(after)}"
    with connect(url, additional_headers=bearer(VIEWER), proxy=None, open_timeout=30) as ws:

        def messages() -> Iterator[SseFrame]:
            while True:
                message = json.loads(ws.recv(timeout=10))
                yield SseFrame(event=message["event"], data=message["data"], id=message["id"])

        yield messages()


def the_head(http: str) -> str:
    """The cursor of now, as a resync names it."""
    with stream(http, after="0123456789ab.1.1") as got:
        resync = next(got)
    assert resync.event == "resync" and resync.id is not None
    return str(resync.id)


def send(http: str, text: str) -> str:
    sent = httpx.post(
        f"{http}/v1/sessions/main/messages",
        json={"text": text},
        headers=bearer(OPS),
        trust_env=False,
    )
    assert sent.status_code == 202, sent.text
    event: str = sent.json()["event"]
    return event


def until_bus(got: Iterator[SseFrame], event: str) -> SseFrame:
    for frame in got:
        if frame.event == "bus" and frame.data["event"]["id"] == event:
            return frame
    raise AssertionError("the stream ended")


def test_a_cursor_that_is_not_small_ascii_numbers_is_told_to_resync(heron: Heron) -> None:
    running, _webhook, http = start(heron, TURNS)
    head = the_head(http)  # nothing happens in `main` meanwhile: the head stays
    epoch = head.split(".")[0]
    bad = [
        f"{epoch}.\u00b2.0",  # str.isdigit(), not int()
        f"{epoch}.\u0663.0",  # an Arabic-Indic 3: int() reads it
        f"{epoch}.{'9' * 5000}.0",  # beyond int()'s 4300 digits
        f"{epoch}.9223372036854775808.0",  # beyond a SQLite INTEGER
        f"{epoch}.0.9223372036854775808",
        f"{epoch}.{'1' * 19}.0",
        f"{epoch}.-1.0",
        f"{epoch}.1",
    ]
    for cursor in bad:
        with stream(http, after=cursor) as got:
            by_query = next(got)
        assert (by_query.event, by_query.id) == ("resync", head), cursor
        assert by_query.data == {"reason": "the cursor is not a cursor of this stream"}
        if all(ord(c) < 256 for c in cursor):  # a header's characters
            with stream(http, last_event_id=cursor.encode("latin-1")) as got:
                by_header = next(got)
            assert (by_header.event, by_header.id) == ("resync", head), cursor
    # Over the WebSocket: told to resync, and the socket stays open for what follows.
    with socket(http, f"{epoch}.9223372036854775808.0") as got:
        resync = next(got)
        assert (resync.event, resync.id) == ("resync", head)
        until_bus(got, send(http, "still there?"))
    running.proc.terminate()
    assert running.finish().code == 0


def test_a_cursor_ahead_of_the_store_is_told_to_resync_and_then_gets_what_comes(
    heron: Heron,
) -> None:
    running, _webhook, http = start(heron, TURNS)
    head = the_head(http)
    epoch = head.split(".")[0]
    for ahead in (f"{epoch}.99999999.99999999", f"{epoch}.0.99999999", f"{epoch}.99999999.0"):
        with stream(http, last_event_id=ahead.encode()) as got:
            resync = next(got)
            assert resync.event == "resync", ahead
            assert resync.data == {"reason": "the cursor is ahead of the store"}
            assert resync.id is not None and resync.id.split(".")[0] == epoch
            if ahead.endswith(".99999999.99999999"):
                assert resync.id == head  # nothing sent yet: the head of the start
            # From the cursor of now: the next message is sent, not waited past.
            until_bus(got, send(http, f"after {ahead}"))
        with socket(http, ahead) as got:
            resync = next(got)
            assert resync.event == "resync", ahead
            assert resync.data == {"reason": "the cursor is ahead of the store"}
            until_bus(got, send(http, f"over the socket after {ahead}"))
    running.proc.terminate()
    assert running.finish().code == 0
