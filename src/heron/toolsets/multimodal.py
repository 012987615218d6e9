"""Images, PDFs and audio for agents, three ways (experiment 4-2), selectable per agent.

1. **native** — the file itself goes to a vision-capable model as an `ImageInput` (or a
   `PdfInput`) through the `VisionModel` protocol. Best fidelity (layout, charts, colours);
   costs image tokens on every request that carries it. In an agent, the files ride on the
   user message: `Agent.run(prompt, media=[path, ...])` stores them as `MediaPart`s on the
   `UserMessage`, and each provider adapter renders them as image / file content parts (a
   labelled text placeholder for a model without vision input). `VisionModel.ask` is the
   direct route outside an agent.
2. **extract** — the file becomes text first (document text, OCR, a transcript) and a text model
   reads it: `read_document`, `ocr_image` and `transcribe_audio`. Cheap for text-heavy files;
   loses what OCR cannot see (bar heights, colours).
3. **tool** — `analyze_image`, `analyze_document`, `analyze_audio` take a file and a question;
   a configured helper model answers, so only the short answer reaches the main model's
   context. The helper pays the content's tokens on every question.

The inputs, their token estimates and the helper model services live in
`heron.toolsets.media`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from heron.messages import UserMessage
from heron.models.base import Model, ModelError
from heron.models.retry import ProviderError
from heron.models.tokens import count_request, counter_for_model
from heron.safety.workspace import Workspace, WorkspaceError
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool
from heron.toolsets.documents import DocumentError, DocumentLimits, document_tools, read_window
from heron.toolsets.media import (
    FileKind,
    ImageInput,
    ModelAnswer,
    MultimodalPath,
    Transcriber,
    VisionModel,
    VisionRequest,
    ask_text_model,
    file_kind,
)
from heron.toolsets.ocr import OcrError, Tesseract, ocr_tools, read_image

__all__ = [
    "Extracted",
    "MultimodalConfig",
    "analysis_tools",
    "extract_text",
    "multimodal_tools",
    "transcription_tool",
]

_HELPER_SYSTEM = (
    "You answer one question about one file, using only the file content you are given. "
    "Say so when the content does not answer the question. Answer briefly."
)


@dataclass(frozen=True, kw_only=True, slots=True)
class MultimodalConfig:
    """The models and limits behind the three paths; pick a path per agent with
    `multimodal_tools`."""

    helper: Model | None = None
    """Text model answering `analyze_*` questions (path 3)."""
    vision: VisionModel | None = None
    """Vision-capable model: path 1, and `analyze_image` in path 3 (else OCR text + helper)."""
    transcriber: Transcriber | None = None
    ocr: Tesseract | None = field(default_factory=Tesseract)
    limits: DocumentLimits = field(default_factory=DocumentLimits)
    max_content_chars: int = 100_000
    """Most extracted text put into one prompt; longer content is cut and the cut reported."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Extracted:
    """A file as text, and where the text came from."""

    text: str
    source: str
    """E.g. `document text, pages 1–12 of 12`, `OCR (tesseract 5.3.0, lang eng: 40 words)`."""
    complete: bool = True


async def extract_text(ws: Workspace, path: str, config: MultimodalConfig) -> Extracted:
    """Any supported file as text: documents as read_document reads them, images by OCR,
    audio by the transcriber. Raises the underlying errors (`DocumentError`, `OcrError`, …)."""
    target = ws.resolve(path, must_exist=True)
    kind = file_kind(target.name)
    if kind == "audio":
        if config.transcriber is None:
            raise ValueError("no speech-to-text model is configured, so audio cannot be read")
        heard = await config.transcriber.transcribe(target)
        return Extracted(text=heard.text, source=f"transcript by {config.transcriber.name}")
    if kind == "image":
        if config.ocr is None:
            raise ValueError("OCR is switched off, so the text of images cannot be read")
        data = await asyncio.to_thread(read_image, ws, target, "analyze_image")
        found = await asyncio.to_thread(config.ocr.recognize_file, data, name=path)
        return Extracted(text=found.text, source=f"OCR ({found.summary()})")
    window = await asyncio.to_thread(
        read_window,
        ws,
        path,
        offset=1,
        limit=10**9,
        ocr=config.ocr,
        limits=DocumentLimits(
            max_file_bytes=config.limits.max_file_bytes, max_chars=config.max_content_chars
        ),
    )
    shown = f"{window.unit}s {window.first}–{window.last} of {window.total}"
    return Extracted(
        text=window.render(), source=f"document text, {shown}", complete=window.next_offset is None
    )


def multimodal_tools(path: MultimodalPath, ws: Workspace, config: MultimodalConfig) -> list[Tool]:
    """The tools an agent gets for the chosen path: `extract` → read_document, ocr_image and
    transcribe_audio (those configured); `tool` → analyze_image / _document / _audio.

    `native` gives no tools: the files travel with the prompt, `Agent.run(prompt, media=[...])`,
    and the model adapter sends them as image / document parts.
    """
    if path == "native":
        return []
    if path == "tool":
        return analysis_tools(ws, config)
    tools = document_tools(ws, ocr=config.ocr, limits=config.limits)
    tools += ocr_tools(ws, config.ocr) if config.ocr is not None else []
    return tools + ([transcription_tool(ws, config.transcriber)] if config.transcriber else [])


def _failure(exc: Exception) -> ToolResult:
    if isinstance(exc, DocumentError | WorkspaceError | OcrError):
        return ToolResult.fail(str(exc), data=exc.to_data())
    if isinstance(exc, ProviderError):
        data = {"error": exc.kind, "status": exc.status, "retry_after_s": exc.retry_after_s}
        return ToolResult.fail(str(exc), data=data)
    return ToolResult.fail(str(exc), data={"error": type(exc).__name__})


_ERRORS = (DocumentError, WorkspaceError, OcrError, ModelError, ValueError, OSError)


def transcription_tool(ws: Workspace, transcriber: Transcriber, *, max_chars: int = 40_000) -> Tool:
    """`transcribe_audio`: the extract path for audio."""

    @tool(read_only=True, open_world=True, owner="builtin", examples=[{"path": "calls/a.mp3"}])
    async def transcribe_audio(path: str) -> ToolResult:
        """Turn speech in an audio file into text with the configured speech model. Use it to
        read recordings, voice notes and calls; use analyze_audio to ask one question instead.

        Accepts mp3, mp4, mpeg, mpga, m4a, wav, ogg, flac and webm files up to 25 MB. The audio
        is sent to the configured transcription service; cost: roughly 1/10 of the audio's
        length in wall time.

        Args:
            path: Audio path relative to the workspace root, e.g. `calls/2024-03-15.mp3`.
        """
        try:
            heard = await transcriber.transcribe(ws.resolve(path, must_exist=True))
        except _ERRORS as exc:
            return _failure(exc)
        text, size = heard.text[:max_chars], len(heard.text)
        head = f"Transcript of {path} by {transcriber.name} ({size:,} characters)"
        if size > max_chars:
            head += f"; the first {max_chars:,} shown, use analyze_audio to ask about the rest"
        return ToolResult.ok(f"{head}\n\n{text}", data={"chars": size, "cut": size > max_chars})

    return transcribe_audio


def analysis_tools(ws: Workspace, config: MultimodalConfig) -> list[Tool]:
    """`analyze_image`, `analyze_document` and `analyze_audio` (path 3), answered by the
    configured helper (and vision) models."""

    async def analyze(path: str, question: str, kind: FileKind) -> ToolResult:
        try:
            target = ws.resolve(path, must_exist=True)
            if (found := file_kind(target.name)) != kind:
                return ToolResult.fail(f"{path} is no {kind} file; use analyze_{found} for it")
            if kind == "image" and config.vision is not None:
                data = await asyncio.to_thread(read_image, ws, target, "analyze_image")
                image = await asyncio.to_thread(ImageInput.from_file, data, label=path)
                request = VisionRequest(question=question, media=(image,), system=_HELPER_SYSTEM)
                answer = await config.vision.ask(request)
                source = f"the image itself ({image.width}×{image.height} px)"
                return _answered(answer, config.vision.name, source, request.estimated_tokens())
            if config.helper is None:
                return ToolResult.fail("no helper model is configured to answer about files")
            content = await extract_text(ws, path, config)
            cut = "" if content.complete else " (cut: the rest did not fit the helper's budget)"
            prompt = f"Question: {question}\n\nContent of {path} ({content.source}{cut}):\n"
            prompt += f"<file>\n{content.text}\n</file>"
            answer = await ask_text_model(config.helper, prompt, system=_HELPER_SYSTEM)
            spent = count_request(
                counter_for_model(config.helper.name),
                system=_HELPER_SYSTEM,
                messages=[UserMessage(content=prompt)],
            )
            return _answered(answer, config.helper.name, f"{content.source}{cut}", spent)
        except _ERRORS as exc:
            return _failure(exc)

    common: dict[str, Any] = {"read_only": True, "open_world": True, "owner": "builtin"}

    @tool(**common, examples=[{"path": "charts/q3.png", "question": "Which bar is highest?"}])
    async def analyze_image(path: str, question: str) -> ToolResult:
        """Ask one question about an image file (chart, screenshot, photo, scan); a helper
        model answers and only its short answer comes back. Use it instead of reading a whole
        image into the conversation; use ocr_image when you need the full text.

        With a vision model configured the helper sees the image; otherwise it reads the
        image's OCR text and cannot see shapes, colours or bar heights (the result says which).
        Cost: one helper-model call, about 100-1,500 image tokens plus the question.

        Args:
            path: Image path relative to the workspace root (PNG, JPEG, GIF, BMP, TIFF, WebP).
            question: One specific question, e.g. `Which month has the highest revenue?`.
        """
        return await analyze(path, question, "image")

    @tool(**common, examples=[{"path": "reports/q3.pdf", "question": "What was Q3 revenue?"}])
    async def analyze_document(path: str, question: str) -> ToolResult:
        """Ask one question about a document (PDF, Word, PowerPoint, Excel, CSV, HTML,
        Markdown, text); a helper model reads it and only the answer comes back. Use it for a
        single fact from a long file; use read_document to read the file yourself.

        The helper reads the text read_document would show (scanned pages by OCR), up to the
        configured size; the result says when the document was cut. Cost: one helper call
        whose input is the document text (about 1 token per 4 characters).

        Args:
            path: Document path relative to the workspace root, e.g. `reports/q3.pdf`.
            question: One specific question, e.g. `Which risks does section 4 name?`.
        """
        return await analyze(path, question, "document")

    @tool(**common, examples=[{"path": "calls/standup.mp3", "question": "Who owns the bug?"}])
    async def analyze_audio(path: str, question: str) -> ToolResult:
        """Ask one question about a recording; it is transcribed by the configured speech
        model and a helper model answers from the transcript. Use transcribe_audio for the
        whole text. Hears words only: no tone, speaker identity or background sounds.

        Accepts mp3, mp4, mpeg, mpga, m4a, wav, ogg, flac and webm up to 25 MB. Cost: one
        transcription plus one helper call with the transcript.

        Args:
            path: Audio path relative to the workspace root, e.g. `calls/standup.mp3`.
            question: One specific question, e.g. `What deadline was agreed?`.
        """
        return await analyze(path, question, "audio")

    return [analyze_image, analyze_document, analyze_audio]


def _answered(answer: ModelAnswer, model: str, source: str, estimate: int) -> ToolResult:
    reported = answer.usage.input_tokens if answer.usage else None
    note = f"[answered by {model} from {source}; about {estimate:,} input tokens]"
    data: dict[str, Any] = {"answer": answer.text, "model": model, "source": source}
    data |= {"input_tokens_estimate": estimate, "reported_input_tokens": reported}
    return ToolResult.ok(f"{answer.text}\n\n{note}", data=data)
