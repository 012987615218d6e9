"""OCR through Debian's tesseract (via `pytesseract`): `Tesseract` and the `ocr_image` tool.

`Tesseract` runs the `tesseract` program on a Pillow image and returns the recognised text with
its word count and mean word confidence. Every way OCR can fail is an `OcrError` with a stable
`reason` — above all `unavailable` when the program is missing, so a machine without tesseract
never yields a silent empty result. An image in which tesseract finds no words is a success
whose text is empty, and the tool says so in words.

`pytesseract` keeps the program's path in a module global, so calls that set it hold one lock;
OCR calls therefore run one at a time in a process (tesseract uses several cores itself).
The language list and version are read from the program directly, per `Tesseract` instance,
because `pytesseract` caches them once per process whatever program is configured.
"""

from __future__ import annotations

import io
import re
import subprocess
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

from heron.errors import HeronError
from heron.safety.workspace import Workspace, WorkspaceError
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool

if TYPE_CHECKING:
    from PIL.Image import Image

__all__ = [
    "MAX_IMAGE_FILE_BYTES",
    "OcrError",
    "OcrText",
    "Tesseract",
    "load_image",
    "ocr_tools",
    "read_image",
]

OcrReason = Literal[
    "unavailable", "missing_dependency", "language", "bad_image", "too_large", "timeout", "failed"
]
_LANG = re.compile(r"^[A-Za-z0-9_]{2,40}(\+[A-Za-z0-9_]{2,40}){0,4}$")
_CMD_LOCK = threading.Lock()
_INSTALL_HINT = "install Debian's `tesseract-ocr` package (and `tesseract-ocr-<lang>` per language)"
LangArg = Annotated[str, Field(pattern=_LANG.pattern)]


class OcrError(HeronError):
    """OCR could not run or failed. `reason` is stable; the message says what to do."""

    def __init__(self, reason: OcrReason, message: str) -> None:
        super().__init__(message)
        self.reason: OcrReason = reason

    def to_data(self) -> dict[str, Any]:
        """The structured form, for a tool result's `data`."""
        return {"error": self.reason, "message": str(self)}


@dataclass(frozen=True, kw_only=True, slots=True)
class OcrText:
    """What tesseract read from one image."""

    text: str
    """Lines as tesseract grouped them; paragraphs separated by a blank line."""
    words: int
    confidence: float | None
    """Mean word confidence, 0-100; None when no word was found."""
    lang: str
    engine: str
    """E.g. `tesseract 5.3.0`."""
    width: int
    height: int

    def summary(self) -> str:
        """One line: engine, language, word count and confidence."""
        conf = f", mean confidence {self.confidence:.0f}%" if self.confidence is not None else ""
        return f"{self.engine}, lang {self.lang}: {self.words} words{conf}"


class Tesseract:
    """The tesseract OCR program, as configured for one agent."""

    def __init__(
        self,
        *,
        command: str = "tesseract",
        default_lang: str = "eng",
        timeout_s: float = 60.0,
        max_pixels: int = 40_000_000,
    ) -> None:
        self.command = command
        self.default_lang = default_lang
        self.timeout_s = timeout_s
        self.max_pixels = max_pixels
        """Larger images are refused before they are decoded."""
        self._facts: tuple[str, frozenset[str]] | None = None

    def __repr__(self) -> str:
        return f"Tesseract(command={self.command!r}, default_lang={self.default_lang!r})"

    def _probe(self) -> tuple[str, frozenset[str]]:
        """(`tesseract X.Y.Z`, installed languages), asked once from the program itself."""
        if self._facts is None:
            version = self._run("--version").splitlines()
            languages = self._run("--list-langs").splitlines()[1:]  # line 1 is a heading
            head = version[0].strip() if version else "tesseract"
            self._facts = (head, frozenset(lang.strip() for lang in languages if lang.strip()))
        return self._facts

    def _run(self, flag: str) -> str:
        try:
            done = subprocess.run(
                [self.command, flag], capture_output=True, text=True, timeout=30, check=False
            )
        except FileNotFoundError:
            raise OcrError(
                "unavailable",
                f"OCR is unavailable: `{self.command}` was not found; {_INSTALL_HINT}",
            ) from None
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise OcrError("unavailable", f"OCR is unavailable: `{self.command}`: {exc}") from None
        # Older versions print the version to stderr.
        return done.stdout or done.stderr

    def version(self) -> str:
        """`tesseract X.Y.Z`; raises `OcrError("unavailable")` when the program is missing."""
        return self._probe()[0]

    def languages(self) -> frozenset[str]:
        """The installed language packs (e.g. `eng`, `osd`)."""
        return self._probe()[1]

    def check_lang(self, lang: str) -> None:
        """Refuse a malformed language or one that is not installed, naming what is."""
        if not _LANG.match(lang):
            raise OcrError(
                "language", f"{lang!r} is no tesseract language, e.g. 'eng' or 'eng+deu'"
            )
        installed = self.languages()
        missing = [part for part in lang.split("+") if part not in installed]
        if missing:
            have = ", ".join(sorted(installed - {"osd"})) or "none"
            raise OcrError(
                "language",
                f"OCR language {'+'.join(missing)} is not installed (installed: {have}); install "
                f"Debian's tesseract-ocr-{missing[0]} package",
            )

    def recognize(self, image: Image, *, lang: str | None = None) -> OcrText:
        """OCR one image. Palette, alpha and CMYK images are converted to RGB first."""
        lang = lang or self.default_lang
        self.check_lang(lang)
        engine = self.version()
        pytesseract = _pytesseract()
        if image.width * image.height > self.max_pixels:
            raise OcrError("too_large", _too_large(image.width, image.height, self.max_pixels))
        if image.mode not in ("RGB", "L", "1"):
            image = image.convert("RGB")
        with _CMD_LOCK:
            pytesseract.pytesseract.tesseract_cmd = self.command
            try:
                data = pytesseract.image_to_data(
                    image, lang=lang, output_type=pytesseract.Output.DICT, timeout=self.timeout_s
                )
            except pytesseract.TesseractNotFoundError:
                raise OcrError(
                    "unavailable", f"`{self.command}` vanished; {_INSTALL_HINT}"
                ) from None
            except pytesseract.TesseractError as exc:
                raise OcrError("failed", f"tesseract failed: {exc.message}") from None
            except RuntimeError as exc:  # pytesseract's way of reporting its timeout
                if "timeout" not in str(exc).lower():
                    raise
                raise OcrError("timeout", f"OCR took longer than {self.timeout_s:g} s") from None
        text, words, confidence = _layout(data)
        return OcrText(
            text=text,
            words=words,
            confidence=confidence,
            lang=lang,
            engine=engine,
            width=image.width,
            height=image.height,
        )

    def recognize_file(
        self, source: Path | bytes, *, lang: str | None = None, name: str = "the image"
    ) -> OcrText:
        """OCR an image file, or its bytes as read (`name` in messages): PNG, JPEG, GIF, BMP,
        TIFF, WebP; the first frame."""
        self.check_lang(lang or self.default_lang)
        image = load_image(source, max_pixels=self.max_pixels, name=name)
        return self.recognize(image, lang=lang)


def _pytesseract() -> Any:
    try:
        import pytesseract  # type: ignore[import-untyped]  # optional extra, no type stubs
    except ImportError:
        raise OcrError(
            "missing_dependency", "OCR needs the pytesseract package: install heron[connectors]"
        ) from None
    return pytesseract


def _too_large(width: int, height: int, cap: int) -> str:
    return f"the image is {width}×{height} pixels; OCR handles up to {cap:,} pixels"


def _layout(data: dict[str, list[Any]]) -> tuple[str, int, float | None]:
    """Rebuild lines and paragraphs from tesseract's word table; count words and confidence."""
    lines: dict[tuple[int, int, int], list[str]] = {}
    confidences: list[float] = []
    for index, word in enumerate(data["text"]):
        word = str(word).strip()
        confidence = float(data["conf"][index])
        if not word or confidence < 0:
            continue
        key = (int(data["block_num"][index]), int(data["par_num"][index]))
        lines.setdefault((*key, int(data["line_num"][index])), []).append(word)
        confidences.append(confidence)
    out: list[str] = []
    previous: tuple[int, int] | None = None
    for (block, paragraph, _line), words in lines.items():
        if previous is not None and previous != (block, paragraph):
            out.append("")
        out.append(" ".join(words))
        previous = (block, paragraph)
    mean = sum(confidences) / len(confidences) if confidences else None
    return "\n".join(out), len(confidences), mean


def load_image(source: Path | bytes, *, max_pixels: int, name: str = "the image") -> Image:
    """Open and decode an image file, or its bytes as read (`name` in messages), refusing
    unreadable files and oversize images."""
    shown = source.name if isinstance(source, Path) else name
    try:
        from PIL import Image as PILImage
        from PIL import UnidentifiedImageError
    except ImportError:
        raise OcrError(
            "missing_dependency", "images need Pillow: install heron[connectors]"
        ) from None
    try:
        with warnings.catch_warnings():
            # Pillow warns about "decompression bombs" above its own limit; ours is lower.
            warnings.simplefilter("error", PILImage.DecompressionBombWarning)
            image = PILImage.open(io.BytesIO(source) if isinstance(source, bytes) else source)
            if image.width * image.height > max_pixels:
                raise OcrError("too_large", _too_large(image.width, image.height, max_pixels))
            image.load()
    except (UnidentifiedImageError, PILImage.DecompressionBombError) as exc:
        raise OcrError("bad_image", f"{shown} is not a readable image: {exc}") from None
    except PILImage.DecompressionBombWarning:
        raise OcrError("too_large", f"{shown} has too many pixels to decode safely") from None
    except (OSError, SyntaxError, ValueError) as exc:  # truncated or damaged image data
        raise OcrError("bad_image", f"{shown} is damaged: {exc}") from None
    return image


MAX_IMAGE_FILE_BYTES = 50_000_000
"""The largest image file the workspace tools read (the pixel limit applies after)."""


def read_image(ws: Workspace, target: Path, purpose: str) -> bytes:
    """The resolved workspace file `target` read once for `purpose`, through the workspace's
    checked open (a regular file, at most `MAX_IMAGE_FILE_BYTES`): decoding works on these
    bytes, never on the path, which a background command could swap meanwhile."""
    return ws.read_bytes(target, limit=MAX_IMAGE_FILE_BYTES, purpose=purpose)


def ocr_tools(ws: Workspace, ocr: Tesseract, *, max_chars: int = 40_000) -> list[Tool]:
    """The `ocr_image` tool over `ws`, using `ocr`."""

    @tool(
        read_only=True,
        idempotent=True,
        owner="builtin",
        examples=[{"path": "scans/receipt.png"}, {"path": "photos/sign.jpg", "lang": "eng+deu"}],
    )
    def ocr_image(path: str, lang: LangArg | None = None) -> ToolResult:
        """Read the printed text in an image file with OCR (tesseract). Use it for screenshots,
        scanned pages and photos of documents; for PDFs, Word or slides use read_document, which
        runs OCR itself on scanned PDF pages; to ask about a chart's shapes or colours use
        analyze_image.

        Cannot read handwriting reliably, does not describe pictures, and keeps no layout
        beyond lines and paragraphs. Refuses non-image files, images over the pixel limit and
        languages that are not installed (the error lists the installed ones). Images with
        transparency or a palette are converted to RGB before OCR. Cost: about 0.2-2 s per
        image on the local CPU; nothing leaves the machine.

        Args:
            path: Image path relative to the workspace root (PNG, JPEG, GIF, BMP, TIFF, WebP).
            lang: Tesseract language code(s), e.g. `eng`, `deu`, `eng+fra`; default: the
                configured language.

        Returns:
            A header with the engine, language, word count and mean confidence (0-100), then
            the text. An image without recognisable text says so explicitly.
        """
        try:
            target = ws.resolve(path, must_exist=True)
            if target.suffix.lower() == ".pdf":
                return ToolResult.fail("for PDFs use read_document: it runs OCR on scanned pages")
            found = ocr.recognize_file(read_image(ws, target, "ocr_image"), lang=lang, name=path)
        except (WorkspaceError, OcrError) as exc:
            return ToolResult.fail(str(exc), data=exc.to_data())
        rel = ws.relative(target)
        head = f"OCR of {rel} ({found.width}×{found.height} px) — {found.summary()}"
        data: dict[str, Any] = {"path": rel, "words": found.words, "lang": found.lang}
        data |= {"confidence": found.confidence, "engine": found.engine, "chars": len(found.text)}
        if not found.words:
            return ToolResult.ok(f"{head}\n\nOCR found no text in this image.", data=data)
        text = found.text
        if len(text) > max_chars:
            text = text[:max_chars] + f"\n[… cut: {len(found.text) - max_chars:,} more characters]"
        return ToolResult.ok(f"{head}\n\n{text}", data=data)

    return [ocr_image]
