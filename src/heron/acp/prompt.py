"""The editor's prompt blocks as the user's message: its text, and the images and PDFs that
travel with it as `MediaPart`s (the model adapter sends them, or a labelled placeholder to a
model without vision).

- text as it is;
- an embedded text resource (a file the editor attached) as a fenced block under its
  workspace path;
- an image, or an embedded image or PDF, as media: inline when small
  (`heron.messages.INLINE_MEDIA_LIMIT`), else stored once under its SHA-256 in the state
  directory's `acp-media/` and referenced, so the stored history stays small;
- any other binary resource, a link to a resource, or audio as a one-line note (the model can
  read a workspace file with its tools).

Media that is not valid base64 raises `ValueError`; the agent answers it as invalid params.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import mimetypes
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlparse

from acp.schema import (
    AudioContentBlock,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    ResourceContentBlock,
    TextContentBlock,
    TextResourceContents,
)

from heron.messages import INLINE_MEDIA_LIMIT, MediaPart

__all__ = ["MEDIA_DIR", "Prompt", "PromptBlock", "user_prompt"]

_BACKTICKS = re.compile("`+")

PromptBlock = (
    TextContentBlock
    | ImageContentBlock
    | AudioContentBlock
    | ResourceContentBlock
    | EmbeddedResourceContentBlock
)

MEDIA_DIR = "acp-media"
"""Where, in the state directory, attachments too large to keep inline are stored."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Prompt:
    """The user's message: `text` and the `media` attached to it."""

    text: str
    media: tuple[MediaPart, ...] = ()


def user_prompt(blocks: Sequence[PromptBlock], *, workspace: Path, state_dir: Path) -> Prompt:
    """The user's message from the editor's blocks (see the module docstring)."""
    parts: list[str] = []
    media: list[MediaPart] = []
    for block in blocks:
        if isinstance(block, TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, ImageContentBlock):
            name = f"image-{len(media) + 1}{mimetypes.guess_extension(block.mime_type) or ''}"
            media.append(_media(block.data, block.mime_type, name=name, state_dir=state_dir))
        elif isinstance(block, EmbeddedResourceContentBlock):
            resource = block.resource
            where = _where(resource.uri, workspace)
            if isinstance(resource, TextResourceContents):
                parts.append(f"Attached {where}:\n{_fenced(resource.text)}")
            elif _kind(resource.mime_type) is not None:
                name = where.removeprefix("file ")
                media.append(
                    _media(resource.blob, resource.mime_type, name=name, state_dir=state_dir)
                )
            else:
                mime = resource.mime_type or "binary"
                parts.append(f"[attached {where} ({mime}): binary content not included]")
        elif isinstance(block, ResourceContentBlock):
            parts.append(f"[the user refers to {_where(block.uri, workspace)}]")
        else:
            parts.append("[audio was attached; heron's ACP agent does not read audio]")
    return Prompt(text="\n\n".join(p for p in parts if p), media=tuple(media))


def _kind(mime_type: str | None) -> Literal["image", "pdf"] | None:
    if mime_type == "application/pdf":
        return "pdf"
    if mime_type is not None and mime_type.startswith("image/"):
        return "image"
    return None


def _media(data: str, mime_type: str | None, *, name: str, state_dir: Path) -> MediaPart:
    kind = _kind(mime_type)
    if kind is None or mime_type is None:
        raise ValueError(f"{name}: only images and PDFs can be attached, not {mime_type}")
    try:
        raw = base64.b64decode(data, validate=True)
    except binascii.Error:
        raise ValueError(f"{name}: the attachment is not valid base64") from None
    digest = hashlib.sha256(raw).hexdigest()
    if len(raw) <= INLINE_MEDIA_LIMIT:
        data = base64.b64encode(raw).decode("ascii")
        return MediaPart(kind=kind, mime_type=mime_type, name=name, sha256=digest, data=data)
    folder = state_dir / MEDIA_DIR
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / f"{digest}{mimetypes.guess_extension(mime_type) or ''}"
    if not path.exists():  # content-addressed: the same bytes are stored once
        partial = path.with_suffix(path.suffix + f".{os.getpid()}.part")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(raw)
        partial.replace(path)
    return MediaPart(kind=kind, mime_type=mime_type, name=name, sha256=digest, ref=str(path))


def _where(uri: str, workspace: Path) -> str:
    """`file notes/todo.md` for a file in the workspace, else the URI."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return uri
    path = Path(unquote(parsed.path))
    try:
        return f"file {path.relative_to(workspace).as_posix()}"
    except ValueError:
        return f"file {path}"


def _fenced(text: str) -> str:
    # One longer than the longest run of backticks in the text, found in one pass (growing
    # the fence until it is absent searched the text once per backtick: quadratic).
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text.rstrip(chr(10))}\n{fence}"
