"""`notify_user`: the agent tells the user something, on the console and/or a signed webhook.

Every notification is recorded first (write before show) in a `NotificationStore`
(`heron.collaboration.sqlite_store.SqliteNotificationStore` by default) with its delivery
outcome per channel and a read/unread state the user's front ends update
(`NotificationStore.mark_read`). The priority picks channels when the model names none: the
console always, the webhook too from `webhook_min_priority` up (default `high`).

The webhook receives `{"id", "text", "priority", "created"}` as JSON, signed with heron's
scheme (`X-Heron-Timestamp`, `X-Heron-Signature`; see `heron.safety.signing`), with the secret
read from an environment variable at sending time — it never appears in results.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from typing import IO, Any, Literal, Protocol

import httpx

from heron.safety import signing
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool

__all__ = ["Notification", "NotificationStore", "NotifyConfig", "notify_tools"]

Priority = Literal["low", "normal", "high", "urgent"]
NotifyChannel = Literal["console", "webhook", "all"]
_RANK: dict[str, int] = {"low": 0, "normal": 1, "high": 2, "urgent": 3}


@dataclass(frozen=True, kw_only=True, slots=True)
class Notification:
    """One recorded notification."""

    id: str
    created: float
    text: str
    priority: str
    delivered: dict[str, str]
    """Channel -> `ok` or `failed: <why>`."""
    read: bool


class NotificationStore(Protocol):
    """Durable notifications and their read state (synchronous; a back-end failure raises
    `heron.errors.StoreError`)."""

    def record(self, text: str, priority: str) -> str:
        """Store a new, unread, not yet delivered notification; returns its new id."""
        ...

    def delivered(self, note_id: str, outcomes: dict[str, str]) -> None:
        """Record the delivery outcome per channel (replacing what was recorded)."""
        ...

    def mark_read(self, note_id: str) -> bool:
        """Mark one notification read; `False` if unknown or already read."""
        ...

    def notifications(self, *, unread_only: bool = False) -> list[Notification]:
        """Notifications, oldest first."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class NotifyConfig:
    """Where notifications go."""

    console: IO[str] | None = None
    """Default: standard error (standard output may carry machine-readable events)."""
    webhook_url: str | None = None
    webhook_secret_env: str | None = None
    """Environment variable holding the signing secret; unsigned without one."""
    webhook_min_priority: Priority = "high"
    timeout_s: float = 10.0


async def _post(config: NotifyConfig, payload: dict[str, Any]) -> str:
    assert config.webhook_url is not None  # callers only pick the webhook when one is set
    body = json.dumps(payload, ensure_ascii=False).encode()
    headers = {"Content-Type": "application/json"}
    if config.webhook_secret_env:
        secret = os.environ.get(config.webhook_secret_env, "")
        if not secret:
            return f"failed: ${config.webhook_secret_env} is not set; nothing was sent"
        headers.update(signing.signed_headers(secret.encode(), body, time.time()))
    try:
        async with httpx.AsyncClient(timeout=config.timeout_s) as client:
            response = await client.post(config.webhook_url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        return f"failed: {type(exc).__name__}: {exc}"
    if response.is_success:
        return "ok"
    return f"failed: HTTP {response.status_code}"


def notify_tools(config: NotifyConfig, store: NotificationStore) -> list[Tool]:
    """`notify_user`, recording into `store`."""

    @tool(
        owner="builtin",
        examples=[{"text": "A customer complaint needs your attention.", "priority": "high"}],
    )
    async def notify_user(
        text: str, priority: Priority = "normal", channel: NotifyChannel | None = None
    ) -> Any:
        """Notify the user (who may be away) about something that needs their attention or
        that finished. Keep it short and self-contained. Every notification is kept, unread,
        until the user reads it.

        Args:
            text: The message for the user.
            priority: `low`, `normal`, `high` or `urgent`; from `high` up it also goes to the
                user's webhook (phone, chat) when one is configured.
            channel: Force `console`, `webhook` or `all`; default: chosen by priority.
        """
        if not text.strip():
            return ToolResult.fail("the notification text is empty")
        if channel in ("webhook", "all") and config.webhook_url is None:
            return ToolResult.fail("no notification webhook is configured; use the console")
        channels = ["console"] if channel in (None, "console", "all") else []
        by_priority = _RANK[priority] >= _RANK[config.webhook_min_priority]
        wants_webhook = channel in ("webhook", "all") or (channel is None and by_priority)
        if wants_webhook and config.webhook_url is not None:
            channels.append("webhook")
        note_id = store.record(text, priority)
        outcomes: dict[str, str] = {}
        for name in channels:
            if name == "console":
                out = config.console or sys.stderr
                out.write(f"[heron notification {note_id} • {priority}] {text}\n")
                out.flush()
                outcomes[name] = "ok"
            else:
                payload = {"id": note_id, "text": text, "priority": priority}
                outcomes[name] = await _post(config, {**payload, "created": time.time()})
        store.delivered(note_id, outcomes)
        result = {"id": note_id, "priority": priority, "delivered": outcomes}
        if all(o != "ok" for o in outcomes.values()):
            return ToolResult.fail(
                "the notification could not be delivered", output=json.dumps(result), data=result
            )
        return result

    return [notify_user]
