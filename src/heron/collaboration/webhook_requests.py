"""Signed webhooks as a channel of the durable requests to a human: a request goes out as
heron's signed JSON to each webhook approver.

An approver `webhook:<name>` is a person of `[user]`/`[people.NAME]` with a `webhook` URL (a
chat bridge, a pager, an operations tool). One POST per approver, signed as every webhook heron
sends (`[channels.webhook] secret_env`, the `X-Heron-Signature` scheme) and with the request id
and the approver as its `Idempotency-Key`, so a receiver that sees a retry sees it once:

```json
{"type": "approval.request", "to": "ops", "request": {"id": "apr-…", "kind": "approval",
 "tool": "pay", "question": "…", "arguments": {…redacted…}, "options": [], "urgency": "high",
 "risk": null, "deadline": "2026-…Z", "session": "main"},
 "answer_token": "h1.webanswer.…", "answer_path": "/approval"}
```

The answer comes back to `heron serve`'s `/approval` webhook, signed like every webhook, with
the `answer_token` (`heron.always_on.channels.answers.RequestAnswerAdapter`). The token is
minted for this request and this approver and lasts until the request's deadline: it is what
makes the answer this approver's — whoever holds the receiver's secret and the token answers
as `webhook:<name>`, and for nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from heron._support.clock import Clock, RealClock
from heron._support.timefmt import utc_rfc3339
from heron.collaboration.channels import post_signed
from heron.collaboration.tokens import TokenSigner
from heron.humans.store import HumanRequest

if TYPE_CHECKING:
    import httpx

__all__ = ["ANSWER_PURPOSE", "WebhookRequestChannel"]

ANSWER_PURPOSE = "webanswer"
"""The purpose of the answer tokens (`heron.collaboration.tokens`)."""


class WebhookRequestChannel:
    """The desk's `webhook` channel (see the module docstring). `addresses`: each person's
    webhook URL, by name."""

    name = "webhook"

    def __init__(
        self,
        addresses: Mapping[str, str],
        *,
        signer: TokenSigner,
        secret_env: str | None = None,
        timeout_s: float = 10.0,
        clock: Clock | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.addresses = dict(addresses)
        self.signer = signer
        self.secret_env = secret_env
        self.timeout_s = timeout_s
        self.clock: Clock = clock or RealClock()
        self._transport = transport

    async def deliver(self, request: HumanRequest) -> str:
        names = [a.removeprefix("webhook:") for a in request.approvers if a.startswith("webhook:")]
        if not names:
            return "failed: no webhook approver"
        now = self.clock.time()
        ttl = max((request.deadline or now + 86_400.0) - now, 1.0)
        outcomes = []
        for name in names:
            url = self.addresses.get(name)
            if url is None:
                outcomes.append(f"failed: {name} has no webhook URL ([people.{name}] webhook)")
                continue
            outcomes.append(
                await post_signed(
                    url,
                    {
                        **_payload(request, name),
                        "answer_token": self.signer.mint(
                            ANSWER_PURPOSE, (request.id, f"webhook:{name}"), ttl_s=ttl
                        ),
                        "answer_path": "/approval",
                    },
                    idempotency_key=f"{request.id}:{name}",
                    secret_env=self.secret_env,
                    timeout_s=self.timeout_s,
                    clock=self.clock,
                    transport=self._transport,
                )
            )
        if any(o == "ok" for o in outcomes):
            return "ok"
        return "; ".join(outcomes)


def _payload(request: HumanRequest, name: str) -> dict[str, Any]:
    return {
        "type": f"{request.kind}.request",
        "to": name,
        "request": {
            "id": request.id,
            "kind": request.kind,
            "tool": request.tool,
            "question": request.question,
            "arguments": dict(request.display_arguments),
            "options": list(request.options),
            "urgency": request.urgency,
            "risk": request.risk,
            "deadline": None if request.deadline is None else utc_rfc3339(request.deadline),
            "session": request.session,
        },
    }
