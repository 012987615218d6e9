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

Token estimates: text is counted by `heron.models.tokens` (its estimate for OpenAI's o200k
models unless a counter is given; a text model's request by the counter of its family). An
image follows OpenAI's published tile rule for high detail: fit within 2048×2048, then scale
the shorter side down to 768, and charge 85 + 170 per 512-pixel tile (low detail: 85). A PDF
page counts its text plus the image of the page at 96 DPI, as providers that read PDFs natively
send both.

Model services (vision, transcription) are operator-configured endpoints, like model
providers: their failures are `ProviderError`s with the providers' `kind`s (`rate_limit` with
`retry_after_s`, `connection`, `timeout`, `protocol` for answers heron cannot read, …).
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import io
import math
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import httpx

from heron.messages import UserMessage
from heron.models.base import Model, ModelError, ModelRequest, TextDelta, Usage
from heron.models.retry import ProviderError, error_message, status_error
from heron.models.tokens import EstimateCounter, TokenCounter, count_request, counter_for_model
from heron.safety.redact import scrub_text
from heron.safety.secrets import Secret
from heron.safety.workspace import Workspace, WorkspaceError
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool
from heron.toolsets.documents import DocumentError, DocumentLimits, document_tools, read_window
from heron.toolsets.ocr import OcrError, Tesseract, load_image, ocr_tools

__all__ = [
    "AUDIO_TYPES",
    "IMAGE_SUFFIXES",
    "Extracted",
    "FunctionVisionModel",
    "HttpTranscriber",
    "ImageInput",
    "MediaInput",
    "ModelAnswer",
    "MultimodalConfig",
    "MultimodalPath",
    "OpenAIVisionModel",
    "PdfInput",
    "Transcriber",
    "Transcript",
    "VisionModel",
    "VisionRequest",
    "ask_text_model",
    "extract_text",
    "file_kind",
    "image_tokens",
    "multimodal_tools",
    "text_tokens",
]

MultimodalPath = Literal["native", "extract", "tool"]
Detail = Literal["low", "high", "auto"]
FileKind = Literal["image", "audio", "document"]
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff", ".webp"})
AUDIO_TYPES = {".mp3": "audio/mpeg", ".mpga": "audio/mpeg", ".mpeg": "audio/mpeg"}
AUDIO_TYPES |= {".wav": "audio/wav", ".m4a": "audio/mp4", ".mp4": "audio/mp4"}
AUDIO_TYPES |= {".ogg": "audio/ogg", ".flac": "audio/flac", ".webm": "audio/webm"}
MAX_AUDIO_BYTES = 25 * 1024 * 1024
"""The upload limit of OpenAI's transcription API."""
_SENDABLE = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}
_HELPER_SYSTEM = (
    "You answer one question about one file, using only the file content you are given. "
    "Say so when the content does not answer the question. Answer briefly."
)


def file_kind(name: str) -> FileKind:
    """`image`, `audio` or `document`, by the file name's suffix."""
    suffix = Path(name).suffix.lower()
    return "image" if suffix in IMAGE_SUFFIXES else "audio" if suffix in AUDIO_TYPES else "document"


_TEXT_COUNTER = EstimateCounter("openai")


def text_tokens(text: str, counter: TokenCounter | None = None) -> int:
    """Tokens of `text` by `counter`; by default heron's estimate for OpenAI's o200k models
    (`heron.models.tokens.EstimateCounter`), the family the image tile rule comes from."""
    return (counter or _TEXT_COUNTER).count(text)


def image_tokens(width: float, height: float, detail: Detail = "auto") -> int:
    """Estimated tokens of one image by OpenAI's tile rule (`auto` is costed as `high`)."""
    if detail == "low":
        return 85
    scale = min(1.0, 2048 / max(width, height))
    width, height = width * scale, height * scale
    scale = min(1.0, 768 / min(width, height))
    tiles = math.ceil(width * scale / 512) * math.ceil(height * scale / 512)
    return 85 + 170 * tiles


@dataclass(frozen=True, kw_only=True, slots=True)
class ImageInput:
    """One image on its way to a vision model: the bytes as sent, their type and size."""

    data: bytes
    media_type: str
    width: int
    height: int
    label: str
    """Where it came from, e.g. `charts/q3.png`."""
    detail: Detail = "auto"
    converted_from: str | None = None
    """The original format when it was re-encoded as PNG (formats APIs do not accept)."""

    @classmethod
    def from_file(cls, path: Path, *, label: str, detail: Detail = "auto") -> ImageInput:
        """Load an image; PNG, JPEG, GIF and WebP go as they are, other formats as PNG."""
        image = load_image(path, max_pixels=40_000_000)
        kind = image.format or "unknown"
        if kind in _SENDABLE:
            data, media_type, converted = path.read_bytes(), _SENDABLE[kind], None
        else:
            buffer = io.BytesIO()
            image.save(buffer, format="PNG")
            data, media_type, converted = buffer.getvalue(), "image/png", kind
        return cls(
            data=data,
            media_type=media_type,
            width=image.width,
            height=image.height,
            label=label,
            detail=detail,
            converted_from=converted,
        )

    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{base64.b64encode(self.data).decode()}"

    def tokens(self) -> int:
        return image_tokens(self.width, self.height, self.detail)


@dataclass(frozen=True, kw_only=True, slots=True)
class PdfInput:
    """A whole PDF for a model that reads PDFs natively (each page: its text and its image)."""

    data: bytes
    label: str
    page_sizes: tuple[tuple[float, float], ...]
    """Width and height of each page, in points (1/72 inch)."""
    page_chars: tuple[int, ...]
    """Characters of extracted text per page."""
    page_tokens: tuple[int, ...]
    """Tokens of each page's extracted text (`text_tokens`), for the estimate."""

    @classmethod
    def from_file(cls, path: Path, *, label: str) -> PdfInput:
        from pypdf import PdfReader

        try:
            reader = PdfReader(path)
            sizes = tuple((float(p.mediabox.width), float(p.mediabox.height)) for p in reader.pages)
            texts = [page.extract_text() or "" for page in reader.pages]
        except Exception as exc:  # pypdf raises many types on damaged or encrypted files
            raise ValueError(f"{label} cannot be read as a PDF: {exc}") from None
        return cls(
            data=path.read_bytes(),
            label=label,
            page_sizes=sizes,
            page_chars=tuple(len(text) for text in texts),
            page_tokens=tuple(text_tokens(text) for text in texts),
        )

    def data_url(self) -> str:
        return f"data:application/pdf;base64,{base64.b64encode(self.data).decode()}"

    def tokens(self) -> int:
        pages = zip(self.page_sizes, self.page_tokens, strict=True)
        return sum(image_tokens(w * 96 / 72, h * 96 / 72) + t for (w, h), t in pages)


MediaInput = ImageInput | PdfInput


@dataclass(frozen=True, kw_only=True, slots=True)
class VisionRequest:
    """A question about media for a vision-capable model."""

    question: str
    media: tuple[MediaInput, ...]
    system: str = ""

    def estimated_tokens(self) -> int:
        return text_tokens(self.system + self.question) + sum(m.tokens() for m in self.media)


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelAnswer:
    """A model's answer and the usage its provider reported, when it did."""

    text: str
    usage: Usage | None = None


@runtime_checkable
class VisionModel(Protocol):
    """A model that answers questions about images and PDFs."""

    @property
    def name(self) -> str: ...

    async def ask(self, request: VisionRequest) -> ModelAnswer: ...


class FunctionVisionModel:
    """A `VisionModel` whose answers a Python callable decides (tests, demos, adapters)."""

    def __init__(
        self, fn: Callable[[VisionRequest], str | Awaitable[str]], *, name: str = "function-vision"
    ) -> None:
        self._fn = fn
        self._name = name
        self.requests: list[VisionRequest] = []

    @property
    def name(self) -> str:
        return self._name

    async def ask(self, request: VisionRequest) -> ModelAnswer:
        self.requests.append(request)
        answer = self._fn(request)
        return ModelAnswer(text=await answer if inspect.isawaitable(answer) else answer)


@dataclass(frozen=True, kw_only=True, slots=True)
class _Endpoint:
    """An operator-configured HTTP model service (OpenAI-compatible)."""

    base_url: str
    api_key_env: str | None = None
    timeout_s: float = 120.0
    transport: httpx.AsyncBaseTransport | None = None

    async def post(self, path: str, what: str, **request: Any) -> dict[str, Any]:
        """POST and return the JSON object answered; every failure is a `ProviderError`."""
        url = f"{self.base_url.rstrip('/')}/{path}"
        secret = None
        if self.api_key_env:
            value = os.environ.get(self.api_key_env)
            if not value:
                raise ProviderError(f"{what} needs an API key: set {self.api_key_env}", kind="auth")
            secret = Secret(value)
        headers = {"Authorization": f"Bearer {secret.reveal()}"} if secret else {}
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s, transport=self.transport) as http:
                response = await http.post(url, headers=headers, **request)
        except httpx.TimeoutException:
            message = f"{what}: no answer from {url} within {self.timeout_s:g} s"
            raise ProviderError(message, kind="timeout") from None
        except httpx.TransportError as exc:
            raise ProviderError(f"{what}: cannot reach {url}: {exc}", kind="connection") from None
        try:
            body = response.json()
        except ValueError:
            body = None
        scrub = secret.scrub if secret else scrub_text
        if response.status_code >= 400:
            said = error_message(body, response.text[:300] or response.reason_phrase)
            raise status_error(response.status_code, scrub(f"{what}: {said}"), response.headers)
        if not isinstance(body, dict):
            start = scrub(response.text[:120])
            message = f"{what}: {url} answered something that is no JSON object: {start!r}"
            raise ProviderError(message, kind="protocol")
        return body


class OpenAIVisionModel:
    """A vision model behind an OpenAI-compatible `/chat/completions` endpoint (OpenAI, vLLM,
    llama.cpp server, Ollama, LM Studio). Images go as `image_url` data URLs with their detail;
    PDFs as `file` parts, which servers without PDF support refuse."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key_env: str | None = None,
        timeout_s: float = 120.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.model = model
        self._endpoint = _Endpoint(
            base_url=base_url, api_key_env=api_key_env, timeout_s=timeout_s, transport=transport
        )

    @property
    def name(self) -> str:
        return self.model

    async def ask(self, request: VisionRequest) -> ModelAnswer:
        content: list[dict[str, Any]] = [{"type": "text", "text": request.question}]
        for item in request.media:
            if isinstance(item, ImageInput):
                image = {"url": item.data_url(), "detail": item.detail}
                content.append({"type": "image_url", "image_url": image})
            else:
                pdf = {"filename": item.label, "file_data": item.data_url()}
                content.append({"type": "file", "file": pdf})
        messages: list[dict[str, Any]] = []
        messages += [{"role": "system", "content": request.system}] if request.system else []
        messages.append({"role": "user", "content": content})
        body = {"model": self.model, "messages": messages}
        data = await self._endpoint.post(
            "chat/completions", f"vision model {self.model}", json=body
        )
        try:
            text = data["choices"][0]["message"]["content"]
            if not isinstance(text, str):
                raise TypeError(type(text).__name__)
        except (KeyError, IndexError, TypeError) as exc:
            message = f"vision model {self.model}: the answer has no message text ({exc!r})"
            raise ProviderError(message, kind="protocol") from None
        raw = data.get("usage")
        if not isinstance(raw, dict):
            return ModelAnswer(text=text)
        counts = {key: value for key, value in raw.items() if isinstance(value, int)}
        usage = Usage(
            input_tokens=counts.get("prompt_tokens", 0),
            output_tokens=counts.get("completion_tokens", 0),
        )
        return ModelAnswer(text=text, usage=usage)


@dataclass(frozen=True, kw_only=True, slots=True)
class Transcript:
    """What a speech model heard."""

    text: str
    language: str | None = None
    duration_s: float | None = None


@runtime_checkable
class Transcriber(Protocol):
    """Speech to text for one audio file."""

    @property
    def name(self) -> str: ...

    async def transcribe(self, audio: Path) -> Transcript: ...


class HttpTranscriber:
    """The OpenAI-compatible `POST {base_url}/audio/transcriptions` API (OpenAI, whisper.cpp
    server, faster-whisper servers, vLLM): multipart upload, `response_format=json`."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str = "whisper-1",
        api_key_env: str | None = None,
        language: str | None = None,
        timeout_s: float = 300.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.model = model
        self.language = language
        self._endpoint = _Endpoint(
            base_url=base_url, api_key_env=api_key_env, timeout_s=timeout_s, transport=transport
        )

    @property
    def name(self) -> str:
        return self.model

    async def transcribe(self, audio: Path) -> Transcript:
        """Raises `ValueError` for formats and sizes the API refuses, `ProviderError` else."""
        media_type = AUDIO_TYPES.get(audio.suffix.lower())
        if media_type is None:
            raise ValueError(f"{audio.name}: audio must be one of {', '.join(sorted(AUDIO_TYPES))}")
        size = (await asyncio.to_thread(audio.stat)).st_size
        if size > MAX_AUDIO_BYTES:
            raise ValueError(f"{audio.name} is {size:,} bytes; transcription takes up to 25 MB")
        form = {"model": self.model, "response_format": "json"}
        form |= {"language": self.language} if self.language else {}
        files = {"file": (audio.name, await asyncio.to_thread(audio.read_bytes), media_type)}
        what = f"transcription model {self.model}"
        body = await self._endpoint.post("audio/transcriptions", what, data=form, files=files)
        text = body.get("text")
        if not isinstance(text, str):
            raise ProviderError(f"{what}: the answer has no `text` field", kind="protocol")
        language, duration = body.get("language"), body.get("duration")
        return Transcript(
            text=text,
            language=language if isinstance(language, str) else None,
            duration_s=float(duration) if isinstance(duration, int | float) else None,
        )


async def ask_text_model(model: Model, prompt: str, *, system: str = "") -> ModelAnswer:
    """One request without tools to a heron `Model`; the streamed text and reported usage."""
    request = ModelRequest(system=system, messages=[UserMessage(content=prompt)], tools=())
    parts: list[str] = []
    usage: Usage | None = None
    async for part in model.stream(request):
        if isinstance(part, TextDelta):
            parts.append(part.text)
        elif isinstance(part, Usage):
            usage = part
    return ModelAnswer(text="".join(parts), usage=usage)


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
        found = await asyncio.to_thread(config.ocr.recognize_file, target)
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
                image = await asyncio.to_thread(ImageInput.from_file, target, label=path)
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
