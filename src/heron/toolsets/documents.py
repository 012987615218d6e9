"""`read_document`: one read tool for PDF, Word, PowerPoint, Excel, CSV, HTML, Markdown and text.

Paging is by the document's own unit, and `offset` / `limit` count in it: PDF pages, slides and
worksheets for the paged formats (each opens with a marker such as `--- page 3 of 12 ---`);
rows for CSV; lines for Word (which has no fixed pages), HTML, Markdown and text. Each call also
stops at a character budget, between whole units. The first line of every result states the
window and how to continue (`pages 1–10 of 12 shown; pass offset=11 to continue`); a single
unit larger than the budget is cut with a marker saying how much was left out.

PDF pages without a text layer (scans) go through OCR of their embedded images when a
`Tesseract` is configured; the page then says so, and an OCR failure (tesseract missing, say)
is reported on the page, never an empty page. Encrypted and damaged files are refused with a
`DocumentError` whose `reason` is stable. Parsers are imported on first use, so the optional
`connectors` extra is only needed when such a file is read.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

from heron.errors import HeronError
from heron.safety.workspace import (
    MAX_READ_BYTES,
    Workspace,
    WorkspaceError,
    binary_kind,
    text_file,
)
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool
from heron.toolsets.document_formats import (
    Part,
    Source,
    csv_source,
    docx_text,
    lines_source,
    pptx_source,
    unpacked_problem,
    xlsx_source,
)
from heron.toolsets.ocr import OcrError, Tesseract
from heron.toolsets.web import html_to_text

if TYPE_CHECKING:
    from pypdf import PageObject

__all__ = [
    "DocumentError",
    "DocumentLimits",
    "DocumentWindow",
    "FileType",
    "detect_type",
    "document_tools",
    "read_window",
]

FileType = Literal["pdf", "docx", "pptx", "xlsx", "csv", "html", "markdown", "text"]
Unit = Literal["page", "slide", "sheet", "row", "line"]
DocumentReason = Literal[
    "is_image",
    "encrypted",
    "legacy_format",
    "corrupt",
    "wrong_type",
    "too_large",
    "offset_past_end",
    "missing_dependency",
    "not_regular_file",
]

UNITS: dict[FileType, Unit] = {"pdf": "page", "pptx": "slide", "xlsx": "sheet", "csv": "row"}
_LABELS: dict[FileType, str] = {
    "pdf": "PDF",
    "docx": "Word document",
    "pptx": "PowerPoint deck",
    "xlsx": "Excel workbook",
    "csv": "CSV table",
    "html": "HTML page",
    "markdown": "Markdown",
    "text": "text",
}
_SUFFIX_TABLE: tuple[tuple[FileType, str], ...] = (
    ("pdf", ".pdf"),
    ("docx", ".docx .docm"),
    ("pptx", ".pptx .pptm"),
    ("xlsx", ".xlsx .xlsm"),
    ("csv", ".csv .tsv"),
    ("html", ".html .htm .xhtml"),
    ("markdown", ".md .markdown"),
)
_SUFFIXES = {suffix: kind for kind, suffixes in _SUFFIX_TABLE for suffix in suffixes.split()}
_LEGACY = {".doc": "Word 97-2003", ".xls": "Excel 97-2003", ".ppt": "PowerPoint 97-2003"}
_IMAGES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff", ".webp"})
_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # compound file: legacy Office or encrypted OOXML
_ZIP_PARTS: tuple[tuple[bytes, FileType], ...] = ((b"word/", "docx"), (b"ppt/", "pptx"))
_ZIP_PARTS += ((b"xl/", "xlsx"),)


class DocumentError(HeronError):
    """A document read_document refuses or cannot read; `reason` is stable."""

    def __init__(self, reason: DocumentReason, path: str, message: str) -> None:
        super().__init__(message)
        self.reason: DocumentReason = reason
        self.path = path

    def to_data(self) -> dict[str, Any]:
        """The structured form, for a tool result's `data`."""
        return {"error": self.reason, "path": self.path, "message": str(self)}


@dataclass(frozen=True, kw_only=True, slots=True)
class DocumentLimits:
    """Caps for one read_document call."""

    max_file_bytes: int = 50_000_000
    max_chars: int = 40_000
    """Output budget per call; the window ends before the unit that would pass it."""
    default_units: int = 10
    """Pages, slides or sheets shown when no `limit` is given."""
    default_lines: int = 200
    """Lines or rows shown when no `limit` is given."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DocumentWindow:
    """One window of a document: which units were shown, their text and how to go on."""

    path: str
    file_type: FileType
    unit: Unit
    total: int
    first: int
    last: int
    text: str
    """The units as shown, with their markers and notes."""
    next_offset: int | None
    budget_hit: bool = False
    notes: tuple[str, ...] = ()
    ocr_pages: tuple[int, ...] = ()
    ocr_failures: tuple[str, ...] = ()
    cut_units: tuple[int, ...] = ()
    """Units shown only in part (each says so where it was cut)."""

    def header(self) -> str:
        """`<path> — <kind>, <units> a–b of n shown; pass offset=… to continue`."""
        units = f"{self.unit}s"
        head = f"{self.path} — {_LABELS[self.file_type]}"
        if self.total == 0:
            return f"{head}, empty (0 {units})"
        head += f", {units} {self.first}–{self.last} of {self.total} shown"
        if self.budget_hit:
            head += " (the output size limit was reached)"
        if self.next_offset is None:
            head += " (end of document)"
        else:
            head += f"; pass offset={self.next_offset} to continue"
        if self.cut_units:
            cut = ", ".join(map(str, self.cut_units))
            head += f"; {self.unit} {cut} shown only in part (see the note where it was cut)"
        return head

    def render(self) -> str:
        """The header, document notes in brackets, then the text."""
        return "\n".join([self.header(), *(f"[{note}]" for note in self.notes), "", self.text])

    def to_data(self) -> dict[str, Any]:
        """Every field but the text, for a tool result's `data`."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "text"}
        return {key: list(v) if isinstance(v, tuple) else v for key, v in data.items()}


def detect_type(target: Path, data: bytes) -> FileType:
    """The file type from the name, else from the content; refuses images and legacy Office."""
    head = data[:8192]
    suffix = target.suffix.lower()
    if suffix in _IMAGES or (binary_kind(head) or "").endswith(" image"):
        hint = "use ocr_image for its text or analyze_image to ask about what it shows"
        raise DocumentError("is_image", target.name, f"{target.name} is an image; {hint}")
    if suffix in _LEGACY:
        message = f"{target.name} is in the binary {_LEGACY[suffix]} format, which "
        message += "read_document cannot read; save it as .docx/.xlsx/.pptx"
        raise DocumentError("legacy_format", target.name, message)
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    if b"%PDF-" in head[:1024]:
        return "pdf"
    if head.startswith(b"PK\x03\x04"):
        for marker, kind in _ZIP_PARTS:
            if marker in data:
                return kind
    lowered = head[:512].lstrip().lower()
    return "html" if lowered.startswith((b"<!doctype html", b"<html")) else "text"


def _check_content(data: bytes, rel: str, kind: FileType) -> None:
    """Refuse encrypted Office files and content that does not fit the (given) type."""
    head = data[:8192]
    if head.startswith(_OLE):
        # Office encrypts .docx/.xlsx/.pptx into a compound file holding this stream.
        if "EncryptedPackage".encode("utf-16-le") in data:
            raise DocumentError("encrypted", rel, _encrypted(rel, "Office file"))
        message = f"{rel} is a binary Office 97-2003 file (.doc/.xls/.ppt); read_document "
        raise DocumentError("legacy_format", rel, message + "reads only .docx/.xlsx/.pptx")
    zipped = head.startswith(b"PK")
    expected = {"pdf": b"%PDF-" in head[:1024], "docx": zipped, "pptx": zipped, "xlsx": zipped}
    if not expected.get(kind, True):
        message = (
            f"{rel} is no {_LABELS[kind]}: its content looks like {binary_kind(head) or 'text'}"
        )
        raise DocumentError("wrong_type", rel, message)
    if zipped and kind in ("docx", "pptx", "xlsx"):
        problem = unpacked_problem(data)
        if problem is not None:
            raise DocumentError("too_large", rel, f"{rel} is refused: {problem}")


def _encrypted(rel: str, what: str) -> str:
    return f"{rel} is a password-protected {what}; read_document cannot open encrypted files"


def read_window(
    ws: Workspace,
    path: str,
    *,
    file_type: FileType | None = None,
    offset: int = 1,
    limit: int | None = None,
    ocr: Tesseract | None = None,
    limits: DocumentLimits | None = None,
) -> DocumentWindow:
    """Read one window of a workspace document (see the module docstring for the units)."""
    limits = limits or DocumentLimits()
    target = ws.resolve(path, must_exist=True)
    rel = ws.relative(target)
    # Read once, through the workspace's checked open: the parsers get these bytes, never
    # the path, which a background command could have swapped meanwhile.
    data = ws.read_bytes(target, limit=limits.max_file_bytes, purpose="read_document")
    kind = file_type or detect_type(target, data)
    _check_content(data, rel, kind)
    source = _open(data, target, rel, kind, ocr)
    try:
        return _window(source, rel, kind, offset, limit, limits)
    finally:
        source.close()


def _window(
    source: Source, rel: str, kind: FileType, offset: int, limit: int | None, lim: DocumentLimits
) -> DocumentWindow:
    unit = UNITS.get(kind, "line")
    paged = unit in ("page", "slide", "sheet")
    count = limit or (lim.default_units if paged else lim.default_lines)
    if offset > source.total > 0:
        message = f"offset {offset} is past the end: {rel} has {source.total} {unit}s"
        raise DocumentError("offset_past_end", rel, message)
    blocks: list[str] = []
    used, last, budget_hit = 0, offset - 1, False
    ocr_pages: list[int] = []
    failures: list[str] = []
    cut: list[int] = []
    for number in range(offset, min(source.total, offset + count - 1) + 1):
        part = source.part(number, lim.max_chars - used)
        lines = [f"[{note}]" for note in part.notes]
        if paged:
            name = source.label(number)
            lines.insert(0, f"--- {unit} {number} of {source.total}{name} ---")
        block = "\n".join([*lines, part.text] if part.text or not lines else lines)
        if blocks and (part.cut or used + len(block) > lim.max_chars):  # next call shows it whole
            budget_hit = True
            break
        if len(block) > lim.max_chars:
            more = len(block) - lim.max_chars
            block = (
                f"{block[: lim.max_chars]}\n[… {unit} {number} cut here: {more:,} more characters "
                "are not shown; read_document cannot show the rest of this "
                f"{unit} — use analyze_document or run_python for it]"
            )
            budget_hit = number < source.total
            part.cut = True
        blocks.append(block)
        used += len(block) + 1
        last = number
        ocr_pages += [number] if part.ocr else []
        failures += [part.ocr_failure] if part.ocr_failure else []
        cut += [number] if part.cut else []
        if budget_hit:
            break
    return DocumentWindow(
        path=rel,
        file_type=kind,
        unit=unit,
        total=source.total,
        first=offset if source.total else 0,
        last=last if source.total else 0,
        text=("\n\n" if paged else "\n").join(blocks),
        next_offset=last + 1 if last < source.total else None,
        budget_hit=budget_hit,
        notes=tuple(source.notes),
        ocr_pages=tuple(ocr_pages),
        ocr_failures=tuple(failures),
        cut_units=tuple(cut),
    )


def _open(data: bytes, target: Path, rel: str, kind: FileType, ocr: Tesseract | None) -> Source:
    """Open `data` (the file `target`) as `kind`; parser failures on damaged input become
    `corrupt` errors."""
    try:
        if kind == "pdf":
            return _pdf(data, rel, ocr)
        if kind == "docx":
            return lines_source(docx_text(data))
        if kind == "pptx":
            return pptx_source(data)
        if kind == "xlsx":
            return xlsx_source(data)
        if len(data) > MAX_READ_BYTES:
            message = f"{rel} is {len(data):,} bytes; read_document reads text files up to "
            raise DocumentError("too_large", rel, message + f"{MAX_READ_BYTES // 2**20} MB")
        text = text_file(rel, data, purpose=f"read_document (as {_LABELS[kind]})").text
        if kind == "csv":
            return csv_source(text, tab=target.suffix.lower() == ".tsv")
        if kind == "html":
            title, body, links = html_to_text(text)
            listed = [f"[{n}] {link}" for n, link in enumerate(links, 1)]
            source = lines_source("\n".join([body, *(["", "Links:", *listed] if listed else [])]))
            source.notes.append(
                "HTML shown as text: scripts, styles and navigation dropped, "
                "headings as #, links as [n] listed at the end"
            )
            source.notes += [f"title: {title}"] if title else []
            return source
        return lines_source(text)
    except (DocumentError, WorkspaceError):
        raise
    except ImportError as exc:
        raise DocumentError(
            "missing_dependency",
            rel,
            f"reading {_LABELS[kind]} files needs {exc.name}: install heron[connectors]",
        ) from None
    except Exception as exc:  # parsers raise many exception types on damaged input
        raise DocumentError(
            "corrupt",
            rel,
            f"{rel} cannot be read as a {_LABELS[kind]}; the file looks damaged "
            f"({type(exc).__name__}: {exc})",
        ) from None


def _pdf(data: bytes, rel: str, ocr: Tesseract | None) -> Source:
    from pypdf import PdfReader
    from pypdf.errors import DependencyError

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        try:
            opened = bool(reader.decrypt(""))  # an owner password alone still lets anyone read
        except (DependencyError, NotImplementedError):
            opened = False
        if not opened:
            raise DocumentError("encrypted", rel, _encrypted(rel, "PDF"))
    pages = reader.pages
    return Source(total=len(pages), part=lambda n, _budget: _pdf_page(pages[n - 1], ocr))


def _pdf_page(page: PageObject, ocr: Tesseract | None) -> Part:
    try:
        text = page.extract_text() or ""
    except Exception as exc:  # one damaged page must not hide the others
        return Part(text="", notes=[f"text extraction failed on this page: {exc}"])
    if text.strip():
        return Part(text=text.rstrip())
    try:
        images = [found.image for found in page.images if found.image is not None]
    except Exception as exc:
        return Part(text="", notes=[f"no text layer, and its images cannot be decoded: {exc}"])
    if not images:
        return Part(text="", notes=["this page has no text"])
    what = f"no text layer, only {len(images)} image(s)"
    if ocr is None:
        return Part(text="", notes=[f"{what}; OCR is switched off, so no text is shown"])
    texts: list[str] = []
    summary = ""
    for image in images:
        try:
            found = ocr.recognize(image)
        except OcrError as exc:
            return Part(text="", notes=[f"{what}; OCR failed: {exc}"], ocr_failure=exc.reason)
        texts += [found.text] if found.words else []
        summary = found.summary()
    if not texts:
        return Part(text="", notes=[f"{what}; OCR found no text in them ({summary})"], ocr=True)
    note = f"{what}: the text below is OCR output ({summary}), so it may contain misreadings"
    return Part(text="\n\n".join(texts), notes=[note], ocr=True)


Offset = Annotated[int, Field(ge=1)]
Limit = Annotated[int, Field(ge=1, le=2000)]


def document_tools(
    ws: Workspace, *, ocr: Tesseract | None = None, limits: DocumentLimits | None = None
) -> list[Tool]:
    """The `read_document` tool over `ws`. `ocr` reads scanned PDF pages (None: no OCR)."""
    lim = limits or DocumentLimits()

    @tool(
        read_only=True,
        idempotent=True,
        owner="builtin",
        examples=[
            {"path": "reports/q3.pdf"},
            {"path": "reports/q3.pdf", "offset": 11, "limit": 5},
            {"path": "exports/data.txt", "file_type": "csv"},
        ],
    )
    def read_document(
        path: str, file_type: FileType | None = None, offset: Offset = 1, limit: Limit | None = None
    ) -> ToolResult:
        """Read a document of the workspace as text: PDF, Word (.docx), PowerPoint (.pptx),
        Excel (.xlsx), CSV, HTML, Markdown or plain text. Use it to read reports, slides and
        tables; use read_file for source code you want to edit.

        Paging unit by format: PDF pages, slides and sheets (each starts with a marker like
        `--- page 3 of 12 ---`); CSV rows; lines for Word, HTML, Markdown and text. `offset` and
        `limit` count in that unit. The first line states what was shown and how to continue,
        e.g. `pages 1–10 of 12 shown; pass offset=11 to continue`. Scanned PDF pages without a
        text layer are read with OCR and marked as such. Spreadsheet rows show as
        `row 12: a | b | c`; Excel formulas show their cached value. HTML loses scripts,
        styles and navigation. Cannot read images (use ocr_image), legacy .doc/.xls/.ppt,
        password-protected or damaged files (each refused with the reason). Cost: parses the
        file on every call (large PDFs take seconds; OCR about 1 s per scanned page).

        Args:
            path: Document path relative to the workspace root, e.g. `reports/q3.pdf`.
            file_type: Override detection from the file name and content.
            offset: First page/slide/sheet/row/line to show, 1-based.
            limit: How many units to show (default 10 pages/slides/sheets or 200 rows/lines).

        Returns:
            The window header, bracketed notes, then the text with unit markers.
        """
        try:
            window = read_window(
                ws, path, file_type=file_type, offset=offset, limit=limit, ocr=ocr, limits=lim
            )
        except (DocumentError, WorkspaceError) as exc:
            return ToolResult.fail(str(exc), data=exc.to_data())
        except OSError as exc:
            return ToolResult.fail(f"{path}: {exc.strerror or exc}")
        return ToolResult.ok(window.render(), data=window.to_data())

    return [read_document]
