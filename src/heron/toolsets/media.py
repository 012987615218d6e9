"""The media of the multimodal paths and the helper models that read them: images, PDFs and
audio as inputs (`ImageInput`, `PdfInput`), their token estimates, and the operator-configured
model services — vision (`VisionModel`: `OpenAIVisionModel`, `FunctionVisionModel`) and
transcription (`HttpTranscriber`). `heron.toolsets.multimodal` builds the tools on them.

Token estimates: text is counted by `heron.models.tokens` (its estimate for OpenAI's o200k
models unless a counter is given; a text model's request by the counter of its family). An
image follows OpenAI's published tile rule for high detail: fit within 2048×2048, then scale
the shorter side down to 768, and charge 85 + 170 per 512-pixel tile (low detail: 85). A PDF
page counts its text plus the image of the page at 96 DPI, as providers that read PDFs natively
send both.

Model services are operator-configured endpoints, like model providers: their failures are
`ProviderError`s with the providers' `kind`s (`rate_limit` with `retry_after_s`, `connection`,
`timeout`, `protocol` for answers heron cannot read, …).
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import io
import math
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import httpx

from heron._support.folder_files import (
    FileRefused,
    FileTooLarge,
    open_regular,
    read_at_most,
    real_path,
)
from heron.messages import UserMessage
from heron.models.base import Model, ModelRequest, TextDelta, Usage
from heron.models.retry import ProviderError, error_message, status_error
from heron.models.tokens import EstimateCounter, TokenCounter
from heron.safety.redact import scrub_text
from heron.safety.secrets import Secret
from heron.toolsets.ocr import load_image

__all__ = [
    "AUDIO_TYPES",
    "IMAGE_SUFFIXES",
    "Detail",
    "FileKind",
    "FunctionVisionModel",
    "HttpTranscriber",
    "ImageInput",
    "MediaInput",
    "ModelAnswer",
    "MultimodalPath",
    "OpenAIVisionModel",
    "PdfInput",
    "Transcriber",
    "Transcript",
    "VisionModel",
    "VisionRequest",
    "ask_text_model",
    "file_kind",
    "image_tokens",
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
    def from_file(cls, source: Path | bytes, *, label: str, detail: Detail = "auto") -> ImageInput:
        """Load an image file, or its bytes as read; PNG, JPEG, GIF and WebP go as they are,
        other formats as PNG."""
        read = source if isinstance(source, bytes) else source.read_bytes()
        image = load_image(read, max_pixels=40_000_000, name=label)
        kind = image.format or "unknown"
        if kind in _SENDABLE:
            data, media_type, converted = read, _SENDABLE[kind], None
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


def _audio_bytes(audio: Path) -> bytes:
    """The audio file read once through a checked open: a regular file (its links resolved
    first, so one swapped in after is refused), at most `MAX_AUDIO_BYTES` as read."""
    try:
        with open_regular(real_path(audio), shown=audio.name) as (handle, size):
            return read_at_most(handle, size, MAX_AUDIO_BYTES)
    except FileTooLarge as exc:
        message = f"{audio.name} is {exc.size:,} bytes; transcription takes up to 25 MB"
        raise ValueError(message) from None
    except FileRefused as exc:
        raise ValueError(str(exc)) from None


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
        data = await asyncio.to_thread(_audio_bytes, audio)
        form = {"model": self.model, "response_format": "json"}
        form |= {"language": self.language} if self.language else {}
        files = {"file": (audio.name, data, media_type)}
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
