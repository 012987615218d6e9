"""`call_webhook`: POST a JSON payload to a webhook, signed, deduplicated, policy-checked.

**What the receiver gets** (the contract to verify against; `heron.safety.signing.check`
implements it):

- body: the payload as compact UTF-8 JSON (`separators=(",", ":")`, non-ASCII kept), sent with
  `Content-Type: application/json`;
- `X-Heron-Timestamp`: the Unix time of sending, in whole seconds;
- `X-Heron-Signature: sha256=<hex>`: HMAC-SHA256 with the shared secret over the bytes
  `<timestamp>.<body>`. Signing the timestamp lets a receiver refuse replays: recompute, compare
  in constant time, and reject timestamps more than five minutes off;
- `Idempotency-Key`: the same for every attempt of one logical call, for receivers that
  deduplicate.

**On the sending side** each call runs once per idempotency key (`IdempotencyStore.run_once`):
a retry with the same key and payload returns the first result and sends nothing; the same key
with another payload is refused. Without a key the tool makes one and names it in the result.
A call that certainly delivered nothing (refused address, connection refused, a rate limit, an
HTTP error status from the receiver) releases the key, so the same key may be sent again — with
the same `Idempotency-Key` header. A call that was sent but got no complete answer records
"outcome unknown" and is never resent under that key.

Addresses go through `UrlPolicy` (via `HttpApi`) and, when `allowed_urls` is set, must start
with one of those prefixes: an open webhook tool is an outbound channel for any data the agent
holds. The secret is read from an environment variable at call time and never shown.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field

from heron.connectors.http_api import ApiError, ApiSource, HttpApi, Sleep
from heron.safety import signing
from heron.safety.idempotency import OUTCOME_UNKNOWN, IdempotencyStore, NotPerformed
from heron.safety.url_policy import UrlPolicy
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool

__all__ = ["WebhookConfig", "webhook_tools"]

_Scalar = str | int | float | bool | None
_Json1 = _Scalar | list[_Scalar] | dict[str, _Scalar]
_Json2 = _Scalar | list[_Json1] | dict[str, _Json1]
_Json3 = _Scalar | list[_Json2] | dict[str, _Json2]
# Failures after which nothing was delivered (the receiver refused, or nothing was sent).
_NOT_DELIVERED = frozenset({"refused", "unreachable", "rate_limited", "auth", "not_found"})
_NOT_DELIVERED |= {"rejected", "http"}


@dataclass(frozen=True, kw_only=True, slots=True)
class WebhookConfig:
    """Where webhooks may go and how they are signed."""

    secret_env: str
    """The environment variable holding the shared HMAC secret."""
    policy: UrlPolicy = field(default_factory=UrlPolicy)
    allowed_urls: tuple[str, ...] = ()
    """URL prefixes calls must start with, e.g. `https://hooks.example.com/heron/`; empty
    allows any URL the policy allows."""
    timeout_s: float = 15.0
    max_wait_s: float = 10.0
    max_payload_bytes: int = 1_000_000
    user_agent: str = "heron-agent/1.0 (webhooks)"

    def __post_init__(self) -> None:
        # A prefix without a path ("https://hooks.example.com") would also match
        # "https://hooks.example.com.evil.example/".
        for prefix in self.allowed_urls:
            if urlsplit(prefix).scheme not in ("http", "https") or not prefix.endswith("/"):
                raise ValueError(
                    f"allowed_urls entry {prefix!r} must be an http(s) URL ending in /"
                )


def webhook_tools(
    config: WebhookConfig,
    store: IdempotencyStore,
    *,
    sleep: Sleep = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
) -> list[Tool]:
    """`call_webhook` under `config`, deduplicated through `store`."""
    source = ApiSource(
        name="webhook",
        base_url="",
        timeout_s=config.timeout_s,
        max_wait_s=config.max_wait_s,
        user_agent=config.user_agent,
    )
    api = HttpApi(source, policy=config.policy, sleep=sleep, clock=clock, wall_clock=wall_clock)

    @tool(
        open_world=True,
        owner="builtin",
        examples=[
            {
                "url": "https://hooks.example.com/heron/deploy",
                "payload": {"event": "build.failed", "build": 1432, "log": "step 7"},
                "idempotency_key": "build-1432-failed",
            }
        ],
    )
    async def call_webhook(
        url: Annotated[str, Field(min_length=1, max_length=2000)],
        payload: dict[str, _Json3],
        idempotency_key: Annotated[
            str, Field(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")
        ]
        | None = None,
    ) -> ToolResult:
        """Send a JSON payload to a webhook URL (HTTP POST), signed so the receiver can check
        it came from this agent. Use it to trigger an outside system or notify a service.
        Refuses URLs that are not http(s), private addresses, and URLs outside the configured
        allow-list. The payload is sent exactly as given, as compact JSON (nesting up to three
        levels below the top object).

        Retries are safe with an idempotency_key: the same key and payload return the first
        result without sending again. Without a key one is made up and named in the result —
        pass it on a retry. After "outcome unknown" do not resend with a new key before
        checking with the receiver.

        Returns: the receiver's HTTP status and the start of its answer.

        Args:
            url: The webhook URL, e.g. `https://hooks.example.com/heron/deploy`.
            payload: A JSON object, e.g. `{"event": "build.failed", "build": 1432}`.
            idempotency_key: A unique name for this one call, e.g. `build-1432-failed`.
        """
        key = idempotency_key or f"heron-{uuid.uuid4()}"
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        problem = None
        if config.allowed_urls and not url.startswith(config.allowed_urls):
            problem = (
                f"{url} is not under an allowed webhook URL ({', '.join(config.allowed_urls)})"
            )
        elif len(body) > config.max_payload_bytes:
            problem = f"the payload is {len(body):,} bytes; at most {config.max_payload_bytes:,}"
        elif not os.environ.get(config.secret_env):
            problem = f"the signing secret ${config.secret_env} is not set"
        if problem:
            return ToolResult.fail(f"not sent: {problem}", data={"error": "not_performed"})

        async def deliver() -> ToolResult:
            secret = os.environ.get(config.secret_env, "").encode("utf-8")
            headers = {
                "Content-Type": "application/json",
                **signing.signed_headers(secret, body, wall_clock()),
                "Idempotency-Key": key,
            }
            try:
                response = await api.send("POST", url, content=body, headers=headers)
            except ApiError as exc:
                if exc.kind in _NOT_DELIVERED:
                    raise NotPerformed(f"not delivered: {exc} (idempotency_key {key!r})") from None
                check = f"ask the receiver whether Idempotency-Key {key} arrived"
                text = OUTCOME_UNKNOWN.format(detail=str(exc), check=f" ({check})")
                return ToolResult.fail(
                    text, data={"error": "outcome_unknown", "idempotency_key": key}
                )
            answer = response.text()[:500]
            lines = [f"delivered to {url}: HTTP {response.status} (idempotency_key {key!r})"]
            data: dict[str, object] = {"status": response.status, "idempotency_key": key}
            if "json" in response.headers.get("Content-Type", ""):
                try:
                    data["response"] = response.json()
                except ApiError as exc:
                    lines.append(f"Note: the receiver's answer is not valid JSON ({exc}).")
            if answer:
                lines.append(
                    f"Answer: {answer}"
                    + (" [cut at 500 characters]" if len(response.body) > 500 else "")
                )
            return ToolResult.ok("\n".join(lines), data=data)

        arguments = {"url": url, "payload": payload}
        return await store.run_once("call_webhook", key, arguments, deliver)

    return [call_webhook]
