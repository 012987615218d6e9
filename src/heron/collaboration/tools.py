"""The model's tools for reaching people: `send_message`, `send_card`, `send_notification`.

In `heron serve` the assistant's own text is private — it is the session's history, not a
message to anyone; these tools are the only way the agent speaks to a person. Each records the
message in the `MessageStore` first, then delivers it through the `Outbox` (channels by urgency
and the person's preferences, quiet hours, recall of unread urgent messages).

Attachments are paths in the agent's workspace, passed by reference: the file is checked to be
inside the workspace and to exist, and only its path (and size) travels.

`alias_tools` adds the names of the seed's experiment 4-4 (`send_email_notification`,
`send_im_notification`, `send_slack_message`), for the `collaboration` MCP profile only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from heron._support.vocabulary import Urgency
from heron.collaboration.cards import Card
from heron.collaboration.outbox import Outbox, OutboxError
from heron.collaboration.store import Attachment, MessageKind, StoredMessage
from heron.safety.workspace import Workspace, WorkspaceError
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool

__all__ = ["MESSAGE_TOOLS", "alias_tools", "messaging_tools"]

MESSAGE_TOOLS: frozenset[str] = frozenset(
    {
        "send_message",
        "send_card",
        "send_notification",
        "send_email_notification",
        "send_im_notification",
        "send_slack_message",
    }
)
"""Every tool that reaches a person: a turn that called one successfully has spoken."""

MAX_ATTACHMENTS = 10


def _result(message: StoredMessage) -> ToolResult:
    """What the model reads: the message id and thread, and per channel what happened (JSON)."""
    data: dict[str, Any] = {
        "id": message.id,
        "thread": message.thread,
        "to": message.to,
        "urgency": message.urgency,
        "delivered": message.delivered(),
    }
    if message.pending:
        data["pending"] = list(message.pending)
        data["due_at"] = message.due_at
    return ToolResult.ok(json.dumps(data, ensure_ascii=False), data=data)


# The decorators are made once: each session's closures reuse their definitions.
_SEND_MESSAGE = tool(
    owner="builtin",
    examples=[
        {
            "text": "The Q3 report is ready; the charts are attached.",
            "attachments": ["reports/q3-charts.png"],
        },
    ],
)
_SEND_CARD = tool(
    owner="builtin",
    examples=[
        {
            "card": {
                "title": "Deploy web-2?",
                "summary": "Build 1432 passed; web-2 is ready to deploy.",
                "blocks": [
                    {
                        "type": "fields",
                        "fields": [
                            {"label": "Build", "value": "1432"},
                            {"label": "Tests", "value": "812 passed"},
                        ],
                    }
                ],
                "actions": [
                    {"type": "button", "id": "deploy", "label": "Deploy", "style": "primary"},
                    {"type": "button", "id": "wait", "label": "Wait"},
                ],
            }
        }
    ],
)
_SEND_NOTIFICATION = tool(
    owner="builtin",
    examples=[
        {"text": "db-1's disk is 95% full; writes fail within the hour.", "urgency": "urgent"}
    ],
)


def messaging_tools(
    outbox: Outbox, *, session: str | None = None, workspace: Path | None = None
) -> list[Tool]:
    """`send_message`, `send_card` and `send_notification` over `outbox`, writing the
    messages of `session`. `workspace`: where attachments must be (default: the identity's
    workspace; without either, attachments are refused)."""
    root = workspace or outbox.identity.workspace
    files = Workspace(root) if root is not None and root.is_dir() else None

    def attach(paths: Sequence[str]) -> list[Attachment]:
        if not paths:
            return []
        if files is None:
            raise OutboxError("no workspace is configured, so nothing can be attached")
        if len(paths) > MAX_ATTACHMENTS:
            raise OutboxError(f"at most {MAX_ATTACHMENTS} attachments")
        found = []
        for path in dict.fromkeys(paths):
            try:
                real = files.resolve(path, must_exist=True)
            except WorkspaceError as exc:
                raise OutboxError(f"attachment {path!r}: {exc}") from None
            if not real.is_file():
                raise OutboxError(f"attachment {path!r} is not a file")
            found.append(Attachment(path=files.relative(real), bytes=real.stat().st_size))
        return found

    async def send(kind: MessageKind, text: str, **options: Any) -> ToolResult:
        attachments = options.pop("attachments", None) or []
        try:
            message = await outbox.send(
                kind=kind,
                text=text,
                attachments=attach(attachments),
                session=session,
                **options,
            )
        except OutboxError as exc:
            return ToolResult.fail(str(exc))
        return _result(message)

    @_SEND_MESSAGE
    async def send_message(
        text: str, attachments: list[str] | None = None, to: str | None = None
    ) -> ToolResult:
        """Send a message to the user (or to a configured person): the only way your words
        reach anyone — your own replies are not shown to them. Keep it self-contained: they
        may read it hours later, on their phone. Files are attached by their workspace path,
        never pasted in.

        Args:
            text: The message.
            attachments: Workspace paths of files to attach by reference, e.g.
                `["reports/q3.csv"]`.
            to: A configured person's name; default: the user.
        """
        if not text.strip():
            return ToolResult.fail("the message is empty")
        return await send("message", text, attachments=attachments, to=to)

    @_SEND_CARD
    async def send_card(
        card: Card, to: str | None = None, urgency: Urgency = "normal"
    ) -> ToolResult:
        """Send a structured card: a title, a one- or two-sentence summary, blocks (text,
        label/value fields, dividers, workspace files) and up to ten actions. A `button`'s
        press comes back to you later as a `card.action` event naming its id; a `link` only
        opens a URL. Every channel shows the card at least as plain text.

        Args:
            card: The card.
            to: A configured person's name; default: the user.
            urgency: `low`, `normal`, `high` or `urgent` (see send_notification).
        """
        return await send(
            "card",
            card.plain_text(),
            card=card,
            to=to,
            urgency=urgency,
            attachments=card.files(),
        )

    @_SEND_NOTIFICATION
    async def send_notification(
        text: str, urgency: Urgency = "normal", to: str | None = None
    ) -> ToolResult:
        """Notify the user (who may be away) of something that needs their attention or that
        finished. Short and self-contained. Urgency chooses the channels: `low` only waits on
        the console, `normal` goes to their first channel, `high` is pushed (chat, mail), and
        `urgent` is pushed, breaks quiet hours, and moves on to their next channel while
        unread.

        Args:
            text: The notification.
            urgency: `low`, `normal`, `high` or `urgent`.
            to: A configured person's name; default: the user.
        """
        if not text.strip():
            return ToolResult.fail("the notification text is empty")
        return await send("notification", text, urgency=urgency, to=to)

    return [send_message, send_card, send_notification]


def alias_tools(outbox: Outbox, *, session: str | None = None) -> list[Tool]:
    """The seed's names, each forcing one channel: `send_email_notification` (mail),
    `send_im_notification` and `send_slack_message` (the IM incoming webhook)."""

    async def forced(channel: str, text: str, urgency: Urgency, to: str | None) -> ToolResult:
        if not text.strip():
            return ToolResult.fail("the text is empty")
        try:
            message = await outbox.send(
                kind="notification",
                text=text,
                urgency=urgency,
                to=to,
                session=session,
                only=channel,
            )
        except OutboxError as exc:
            return ToolResult.fail(str(exc))
        return _result(message)

    @tool(owner="builtin")
    async def send_email_notification(
        text: str, urgency: Urgency = "normal", to: str | None = None
    ) -> ToolResult:
        """Notify the user by e-mail (and on the console). Same as send_notification, on the
        mail channel only.

        Args:
            text: The notification.
            urgency: `low`, `normal`, `high` or `urgent`.
            to: A configured person's name; default: the user.
        """
        return await forced("mail", text, urgency, to)

    @tool(owner="builtin")
    async def send_im_notification(
        text: str, urgency: Urgency = "normal", to: str | None = None
    ) -> ToolResult:
        """Notify the user in their chat (the IM incoming webhook) and on the console.

        Args:
            text: The notification.
            urgency: `low`, `normal`, `high` or `urgent`.
            to: A configured person's name; default: the user.
        """
        return await forced("im", text, urgency, to)

    @tool(owner="builtin")
    async def send_slack_message(text: str, to: str | None = None) -> ToolResult:
        """Post a message to the user's chat (any service that accepts incoming webhooks:
        Slack, Mattermost, Rocket.Chat, …) and the console.

        Args:
            text: The message.
            to: A configured person's name; default: the user.
        """
        return await forced("im", text, "normal", to)

    return [send_email_notification, send_im_notification, send_slack_message]
