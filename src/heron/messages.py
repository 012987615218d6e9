"""Provider-neutral conversation history.

Provider adapters render these to their wire format (native tool messages, or the text protocol
for models without native tools). The history is append-only during a turn.
"""

from __future__ import annotations

import base64
import hashlib
import mimetypes
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

INLINE_MEDIA_LIMIT = 256 * 1024
"""Files up to this many bytes travel inline (base64) in the history; larger ones by reference."""


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MediaPart(_Message):
    """One image or PDF attached to a user message.

    Small files are held inline as base64; larger ones name a file on disk (`ref`) so stored
    histories stay small. `sha256` pins the content: a referenced file that changed since it
    was attached is an error when the adapter loads it, never silently different input.
    """

    kind: Literal["image", "pdf"]
    mime_type: str
    name: str
    """How the file is labelled to the model and in placeholders, e.g. `charts/q3.png`."""
    sha256: str
    data: str | None = None
    """The bytes as base64, for small files."""
    ref: str | None = None
    """The absolute path of the file, for large ones."""

    @model_validator(mode="after")
    def _one_source(self) -> MediaPart:
        if (self.data is None) == (self.ref is None):
            raise ValueError("a media part holds exactly one of data (inline) or ref (a file)")
        return self

    @classmethod
    def from_file(
        cls, path: Path, *, name: str | None = None, inline_limit: int = INLINE_MEDIA_LIMIT
    ) -> MediaPart:
        """Attach `path` (an image or a PDF, by its type); inline when small, else by
        reference. Raises `ValueError` for other file types."""
        path = path.expanduser().resolve()
        mime_type = mimetypes.guess_type(path.name)[0] or ""
        if mime_type == "application/pdf":
            kind: Literal["image", "pdf"] = "pdf"
        elif mime_type.startswith("image/"):
            kind = "image"
        else:
            raise ValueError(f"{path.name}: only images and PDFs can be attached")
        raw = path.read_bytes()
        inline = len(raw) <= inline_limit
        return cls(
            kind=kind,
            mime_type=mime_type,
            name=name or path.name,
            sha256=hashlib.sha256(raw).hexdigest(),
            data=base64.b64encode(raw).decode("ascii") if inline else None,
            ref=None if inline else str(path),
        )

    def base64(self) -> str:
        """The content as base64; raises `ValueError` when a referenced file changed."""
        if self.data is not None:
            return self.data
        assert self.ref is not None
        raw = Path(self.ref).read_bytes()
        if hashlib.sha256(raw).hexdigest() != self.sha256:
            raise ValueError(f"{self.name}: the attached file changed since it was attached")
        return base64.b64encode(raw).decode("ascii")

    def data_url(self) -> str:
        """The content as a `data:` URL."""
        return f"data:{self.mime_type};base64,{self.base64()}"

    def placeholder(self) -> str:
        """The text a model without vision input sees instead of the file."""
        return f"[{self.kind} {self.name} not shown: this model has no vision input]"


class SystemMessage(_Message):
    """The system prompt. heron puts it first; pass it as `Agent(system_prompt=...)`."""

    role: Literal["system"] = "system"
    content: str


class UserMessage(_Message):
    """A message from the user (or from heron itself, `source="runtime"`), with media."""

    role: Literal["user"] = "user"
    content: str
    source: str = "user"
    """Who this came from: `user`, or `runtime` for messages heron itself adds (retry hints,
    iteration-cap requests) — never confused with the operator's own words."""
    media: tuple[MediaPart, ...] = ()
    """Images and PDFs sent with the message, for models that read them."""


class ToolCallPart(_Message):
    """One tool call as the model emitted it (after id pinning)."""

    id: str
    name: str
    arguments: dict[str, Any]


class AssistantMessage(_Message):
    """A model response: visible text, the tool calls it made, and its thinking apart."""

    role: Literal["assistant"] = "assistant"
    text: str = ""
    tool_calls: tuple[ToolCallPart, ...] = ()
    reasoning: str | None = None
    """Thinking content, kept apart from visible text."""


class ToolResultMessage(_Message):
    """The result of one tool call as the model sees it (bounded, with markers), by `call_id`."""

    role: Literal["tool"] = "tool"
    call_id: str
    name: str
    content: str
    is_error: bool = False
    loaded_tools: tuple[str, ...] = ()
    """Tools this call loaded into the session; adapters with deferred loading reference them
    here (`ToolResult.loaded_tools`)."""
    keep: bool = False
    """Protected from history trimming (`ToolResult.keep_in_context`)."""


Message = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolResultMessage,
    Field(discriminator="role"),
]
"""One history entry: system, user, assistant or tool result (told apart by `role`)."""
