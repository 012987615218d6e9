"""The gateway in tests and benches: a `heron serve --http-port` set-up with an approval, and
a Server-Sent Events reader over httpx."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from heron.gateway.auth import hash_token
from heron.safety.signing import signed_headers
from support.cli import Heron, Running


@dataclass
class SseFrame:
    event: str = "message"
    data: Any = None
    id: str | None = None


def frames(lines: Iterator[str]) -> Iterator[SseFrame]:
    """SSE frames from the lines of a response (comments skipped)."""
    frame = SseFrame()
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                frame.data = json.loads("\n".join(data))
                yield frame
            frame, data = SseFrame(), []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                frame.event = value
            elif name == "id":
                frame.id = value
            elif name == "data":
                data.append(value)


@dataclass
class Stream:
    """Reads one session's event stream until a frame satisfies `until`."""

    url: str
    headers: dict[str, str]
    seen: list[SseFrame] = field(default_factory=list)

    def read(
        self,
        until: Callable[[SseFrame], bool],
        *,
        last_event_id: str | None = None,
        timeout: float = 30.0,
    ) -> list[SseFrame]:
        headers = dict(self.headers)
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        got: list[SseFrame] = []
        with httpx.stream(
            "GET", self.url, headers=headers, timeout=timeout, trust_env=False
        ) as response:
            assert response.status_code == 200, response.read()
            for frame in frames(response.iter_lines()):
                got.append(frame)
                if until(frame):
                    break  # leaving the block drops the connection: a cut stream
        self.seen += got
        return got


def is_turn(type_: str, **fields: Any) -> Callable[[SseFrame], bool]:
    def check(frame: SseFrame) -> bool:
        data = frame.data if isinstance(frame.data, dict) else {}
        return (
            frame.event == "turn"
            and data.get("type") == type_
            and all(data.get(k) == v for k, v in fields.items())
        )

    return check


def durable(got: list[SseFrame]) -> list[tuple[str | None, str, Any]]:
    """The frames that carry an id (what a replay must reproduce)."""
    return [(f.id, f.event, f.data) for f in got if f.id is not None]


SECRET = "gateway-test-webhook-secret"
ADMIN = "admin-token-for-the-gateway-test"
OPS = "operator-token-ops"
VIEWER = "viewer-token-val"
PAY_TOOL = '''
import heron


@heron.tool(requires_approval=True)
def pay(to: str, amount: int) -> str:
    """Pay an invoice.

    Args:
        to: The payee.
        amount: How much, in whole euros.
    """
    return f"paid {amount} to {to}"
'''
CONFIG = f"""
[approvals.approvers]
console = ["alice"]
gateway = ["ops", "admin"]

[[gateway.tokens]]
principal = "ops"
role = "operator"
sha256 = "{hash_token(OPS)}"

[[gateway.tokens]]
principal = "val"
role = "viewer"
sha256 = "{hash_token(VIEWER)}"

[gateway.limits]
max_body = 4096
"""


PAY_TURNS: list[dict[str, Any]] = [
    {
        "tool_calls": [{"id": "c_pay", "name": "pay", "arguments": {"to": "ACME", "amount": 120}}],
        "expect": {"last_message_contains": "pay ACME"},
    },
    {"text": "I asked for approval to pay ACME."},
    {"text": "Paid ACME 120.", "expect": {"last_message_contains": "approved by"}},
    {"text": "You are welcome.", "expect": {"last_message_contains": "thanks"}},
]
"""The agent of `start`: asks to pay ACME (an approval), and says so once it is paid."""


BUILD_COMMAND = "echo build started; sleep 120"
BUILD_TURNS: list[dict[str, Any]] = [
    {
        "tool_calls": [
            {"id": "c_job", "name": "start_job", "arguments": {"command": BUILD_COMMAND}},
            {
                "id": "c_timer",
                "name": "set_timer",
                "arguments": {"message": "check the build", "after_s": 3600},
            },
        ],
        "expect": {"last_message_contains": "start the build"},
    },
    {"text": "The build runs; I will check it in an hour."},
    {"text": "The build was stopped.", "expect": {"last_message_contains": "job"}},
]
"""An agent (with `--autonomy full`) that starts a background job and sets a timer."""


def start(
    heron: Heron, turns: list[dict[str, Any]] = PAY_TURNS, *flags: str
) -> tuple[Running, str, str]:
    """`heron serve` with the gateway on a free port; `(process, webhook URL, gateway URL)`."""
    heron.env["HERON_WEBHOOK_SECRET"] = SECRET
    heron.env["HERON_GATEWAY_TOKEN"] = ADMIN
    heron.write("pay.py", PAY_TOOL)
    heron.write("heron.toml", CONFIG)
    script = heron.script("s.yaml", turns)
    running = heron.start(
        "serve",
        "--model",
        script,
        "--session",
        "main",
        "--webhook-port",
        "0",
        "--http-port",
        "0",
        "--subscribe",
        "webhook",
        "--poll-interval",
        "0.1",
        "--tools",
        "pay.py",
        *flags,
    )
    started = running.wait_for_event("serve_started")
    return running, started["webhook"], started["http"]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def post_webhook(url: str, event_id: str, text: str) -> None:
    """A signed generic webhook (`/webhook`): an event that wakes the subscribed session."""
    body = json.dumps({"id": event_id, "text": text}).encode()
    headers = signed_headers(SECRET.encode(), body, time.time())
    response = httpx.post(f"{url}/webhook", content=body, headers=headers, trust_env=False)
    assert response.status_code == 202, response.text


def approve_the_pending_payment(http: str) -> None:
    """Answer the one pending approval of `PAY_TURNS` with yes, as the operator `ops`."""
    pending = httpx.get(f"{http}/v1/approvals", headers=bearer(VIEWER), trust_env=False)
    [request] = pending.json()["requests"]
    assert request["tool"] == "pay", request
    approved = httpx.post(
        f"{http}/v1/approvals/{request['id']}",
        json={"decision": "yes"},
        headers=bearer(OPS),
        trust_env=False,
    )
    assert approved.status_code == 200, approved.text
