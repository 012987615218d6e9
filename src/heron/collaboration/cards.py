"""`Card`: one structured message — a title, a summary, blocks and typed actions — that every
channel can show.

A card always has a plain-text rendering (`Card.plain_text`): it is what the console prints,
the `text/plain` body of a mail, the `text` of a webhook and the `text` of an incoming-webhook
chat message, so a card is never lost on a channel that shows only text. Channels that can do
more map the blocks (`im_blocks`: the block shape chat services accept). An `html` block is
generative UI for the web console only (docs/gateway.md): the console draws it in a sandboxed
frame with a content-security policy that allows no script and no request, so it can neither
reach the console, its cookie nor the API, and it never carries controls — the card's buttons
are drawn by the console itself, outside the frame. Every other channel shows its `fallback`.

Actions are typed: a `button` (an id, a label, a style) comes back as a `card.action` event when
someone presses it — on a chat service through heron's `/card` webhook with the action's signed
token (`heron.collaboration.tokens`), by mail as a reply whose first line is the label, on the
console with `heron messages act`; a `link` only opens a URL.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "Action",
    "Block",
    "ButtonAction",
    "Card",
    "DividerBlock",
    "FieldItem",
    "FieldsBlock",
    "FileBlock",
    "HtmlBlock",
    "LinkAction",
    "TextBlock",
    "im_blocks",
]

ACTION_ID = r"^[a-z0-9][a-z0-9_-]{0,39}$"


class _Part(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TextBlock(_Part):
    """A paragraph of text (plain, or light Markdown where the channel shows it)."""

    type: Literal["text"] = "text"
    text: str = Field(min_length=1, max_length=4000)


class FieldItem(_Part):
    label: str = Field(min_length=1, max_length=100)
    value: str = Field(min_length=1, max_length=500)


class FieldsBlock(_Part):
    """Label/value pairs, e.g. `Service: web-1`, `Errors: 0`."""

    type: Literal["fields"] = "fields"
    fields: list[FieldItem] = Field(min_length=1, max_length=20)


class DividerBlock(_Part):
    type: Literal["divider"] = "divider"


class FileBlock(_Part):
    """A file of the agent's workspace, shown by its path (never inlined)."""

    type: Literal["file"] = "file"
    path: str = Field(min_length=1, max_length=1024)
    caption: str = Field(default="", max_length=300)


class HtmlBlock(_Part):
    """A fragment of HTML and CSS drawn only by the web console, in a sandboxed frame that runs
    no script and loads nothing; other channels show `fallback`. Never put buttons in it:
    the card's `actions` are the only controls, drawn by the console."""

    type: Literal["html"] = "html"
    html: str = Field(min_length=1, max_length=20_000)
    fallback: str = Field(min_length=1, max_length=1000, description="what text channels show")


Block = Annotated[
    TextBlock | FieldsBlock | DividerBlock | FileBlock | HtmlBlock, Field(discriminator="type")
]


class ButtonAction(_Part):
    """Pressing it sends a `card.action` event naming `id` back to the agent."""

    type: Literal["button"] = "button"
    id: str = Field(pattern=ACTION_ID, description="a short id: lowercase letters, digits, _ -")
    label: str = Field(min_length=1, max_length=60)
    style: Literal["default", "primary", "danger"] = "default"


class LinkAction(_Part):
    """Opens `url`; nothing comes back."""

    type: Literal["link"] = "link"
    label: str = Field(min_length=1, max_length=60)
    url: str = Field(min_length=8, max_length=2000)

    @field_validator("url")
    @classmethod
    def _web_url(cls, url: str) -> str:
        if not url.startswith(("https://", "http://")) or any(c.isspace() for c in url):
            raise ValueError("a link must be an http(s) URL without spaces")
        return url


Action = Annotated[ButtonAction | LinkAction, Field(discriminator="type")]


class Card(_Part):
    """A structured message. `title` and `summary` are required: with the blocks and actions
    they make the plain-text rendering every channel can show."""

    title: str = Field(min_length=1, max_length=200)
    summary: str = Field(min_length=1, max_length=1000, description="one or two sentences")
    blocks: list[Block] = Field(default_factory=list, max_length=20)
    actions: list[Action] = Field(default_factory=list, max_length=10)

    @model_validator(mode="after")
    def _distinct_actions(self) -> Card:
        ids = [a.id for a in self.actions if isinstance(a, ButtonAction)]
        labels = [a.label.casefold() for a in self.actions]
        if len(set(ids)) != len(ids) or len(set(labels)) != len(labels):
            raise ValueError("actions need distinct ids and labels")
        return self

    @property
    def buttons(self) -> list[ButtonAction]:
        return [a for a in self.actions if isinstance(a, ButtonAction)]

    def button(self, id_or_label: str) -> ButtonAction | None:
        """The button with this id or (any case) label."""
        wanted = id_or_label.strip().casefold()
        return next(
            (b for b in self.buttons if wanted in (b.id, b.label.casefold())),
            None,
        )

    def files(self) -> list[str]:
        return [b.path for b in self.blocks if isinstance(b, FileBlock)]

    def plain_text(self) -> str:
        """The card as text: title, summary, blocks, then the actions."""
        lines = [self.title, self.summary]
        for block in self.blocks:
            if isinstance(block, TextBlock):
                lines += ["", block.text]
            elif isinstance(block, FieldsBlock):
                lines += ["", *(f"{f.label}: {f.value}" for f in block.fields)]
            elif isinstance(block, DividerBlock):
                lines += ["", "----"]
            elif isinstance(block, HtmlBlock):
                lines += ["", block.fallback]
            else:
                caption = f" — {block.caption}" if block.caption else ""
                lines += ["", f"File: {block.path}{caption}"]
        if self.actions:
            shown = [
                f"[{a.label}]" if isinstance(a, ButtonAction) else f"{a.label}: {a.url}"
                for a in self.actions
            ]
            lines += ["", "Actions: " + "  ".join(shown)]
        return "\n".join(lines)


def im_blocks(card: Card, tokens: dict[str, str], *, context: str) -> list[dict[str, Any]]:
    """The card in the block shape of chat services' incoming webhooks (header, sections,
    fields, dividers, an actions row, a context line). A button's `value` is its signed token
    (`tokens[action id]`), which the chat bridge posts back to heron's `/card` webhook."""
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": card.title[:150]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": card.summary}},
    ]
    for block in card.blocks:
        if isinstance(block, TextBlock):
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": block.text}})
        elif isinstance(block, FieldsBlock):
            fields = [{"type": "mrkdwn", "text": f"*{f.label}*\n{f.value}"} for f in block.fields]
            blocks.append({"type": "section", "fields": fields[:10]})
        elif isinstance(block, DividerBlock):
            blocks.append({"type": "divider"})
        elif isinstance(block, HtmlBlock):
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": block.fallback}})
        else:
            caption = f" — {block.caption}" if block.caption else ""
            text = f"File: `{block.path}`{caption}"
            blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": text}]})
    elements: list[dict[str, Any]] = []
    for action in card.actions:
        button: dict[str, Any] = {
            "type": "button",
            "text": {"type": "plain_text", "text": action.label},
        }
        if isinstance(action, ButtonAction):
            button |= {"action_id": action.id, "value": tokens[action.id]}
            if action.style != "default":
                button["style"] = action.style
        else:
            button["url"] = action.url
        elements.append(button)
    if elements:
        blocks.append({"type": "actions", "elements": elements})
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": context}]})
    return blocks
