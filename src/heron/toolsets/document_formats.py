"""The office and table formats of `read_document` as numbered units: a Word file's lines, a
PowerPoint file's slides, a workbook's sheets, a CSV file's rows — each a `Source` whose units
render within a character budget (`heron.toolsets.documents` windows them)."""

from __future__ import annotations

import contextlib
import csv
import io
import warnings
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Part",
    "Source",
    "csv_source",
    "docx_text",
    "lines_source",
    "pptx_source",
    "unpacked_problem",
    "xlsx_source",
]

MAX_UNPACKED_BYTES = 128 * 2**20
"""What the parts of one Office file (a zip archive) may unpack to, together: their XML is
parsed whole, so a small archive that unpacks to gigabytes (a zip bomb) would exhaust heron's
memory. The declared sizes bound it: Python's zip reader stops at a part's declared size."""
MAX_PARTS = 10_000


@dataclass(kw_only=True, slots=True)
class Part:
    text: str
    notes: list[str] = field(default_factory=list)
    ocr: bool = False
    ocr_failure: str | None = None
    cut: bool = False


@dataclass(kw_only=True, slots=True)
class Source:
    total: int
    part: Callable[[int, int], Part]
    """Unit `n` (1-based), rendered within a character budget (renderers may stop early)."""
    notes: list[str] = field(default_factory=list)
    label: Callable[[int], str] = lambda _: ""
    close: Callable[[], None] = lambda: None


def lines_source(text: str) -> Source:
    lines = text.splitlines()
    return Source(total=len(lines), part=lambda n, _budget: Part(text=lines[n - 1]))


def docx_text(data: bytes) -> str:
    import docx
    from docx.text.paragraph import Paragraph

    lines: list[str] = []
    for block in docx.Document(io.BytesIO(data)).iter_inner_content():
        if isinstance(block, Paragraph):
            style = (block.style.name if block.style is not None else "") or ""
            prefix = ""
            if style == "Title" or style.startswith("Heading "):
                level = style.removeprefix("Heading ")
                prefix = "#" * (int(level) if level.isdigit() else 1) + " "
            elif style.startswith("List"):
                prefix = "- "
            lines.append(prefix + block.text if block.text else "")
            continue
        for row in block.rows:
            cells: list[str] = []
            seen: list[object] = []
            for cell in row.cells:  # a merged cell repeats once per grid column it spans
                if seen and seen[-1] is cell._tc:
                    continue
                seen.append(cell._tc)
                cells.append(cell.text)
            lines.append(" | ".join(cells))
    return "\n".join(lines)


def pptx_source(data: bytes) -> Source:
    from pptx import Presentation

    slides = list(Presentation(io.BytesIO(data)).slides)

    def part(number: int, _budget: int) -> Part:
        slide = slides[number - 1]
        title = slide.shapes.title
        heading = title.text_frame.text if title is not None and title.has_text_frame else ""
        lines = [f"# {heading}"] if heading else []
        for shape in slide.shapes:
            if title is None or shape.shape_id != title.shape_id:
                lines += _shape_lines(shape)
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = slide.notes_slide.notes_text_frame.text.strip()
            lines += ["", "Speaker notes:", notes] if notes else []
        return Part(text="\n".join(lines))

    return Source(total=len(slides), part=part)


def _shape_lines(shape: Any) -> list[str]:
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    if hasattr(shape, "shapes"):  # a group: its members in order
        return [line for member in shape.shapes for line in _shape_lines(member)]
    if shape.has_text_frame:
        paragraphs = shape.text_frame.paragraphs
        return ["  " * p.level + p.text for p in paragraphs if p.text]
    if getattr(shape, "has_table", False):
        return [" | ".join(cell.text for cell in row.cells) for row in shape.table.rows]
    if getattr(shape, "has_chart", False):
        chart = shape.chart
        return [f"[chart: {chart.chart_title.text_frame.text if chart.has_title else 'untitled'}]"]
    return ["[picture]"] if shape.shape_type == MSO_SHAPE_TYPE.PICTURE else []


def _cell(value: object) -> str:
    if value is None:
        return ""
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _rows(rows: Sequence[tuple[int, Sequence[object]]]) -> list[str]:
    return [f"row {n}: " + " | ".join(map(_cell, values)) for n, values in rows if values]


_SHEET_RESERVE = 300
"""Characters a sheet leaves free of its budget for its marker and the cut note."""


def xlsx_source(data: bytes) -> Source:
    import openpyxl  # type: ignore[import-untyped]  # no type stubs are installed

    with warnings.catch_warnings():
        # openpyxl warns about workbook features it skips (data validation, slicers).
        warnings.simplefilter("ignore")
        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    names: list[str] = list(book.sheetnames)

    def part(number: int, budget: int) -> Part:
        sheet = book[names[number - 1]]
        if not hasattr(sheet, "iter_rows"):
            return Part(text="", notes=["a chart sheet: it holds no cells"])
        lines: list[str] = []
        used, cut = 0, False
        for index, row in enumerate(sheet.iter_rows(values_only=True), start=1):
            values = list(row)
            while values and values[-1] is None:
                values.pop()
            if not values:
                continue
            (line,) = _rows([(index, values)])
            if used + len(line) > budget - _SHEET_RESERVE:
                note = f"[… sheet cut at row {index} of about {sheet.max_row}: the rest does not"
                lines.append(f"{note} fit one read; use run_python with openpyxl for big sheets]")
                cut = True
                break
            lines.append(line)
            used += len(line) + 1
        return Part(text="\n".join(lines), notes=[] if lines else ["empty sheet"], cut=cut)

    notes = [
        "formula cells show the value cached by the program that last saved the file "
        "(possibly stale; empty if never computed)"
    ]
    return Source(
        total=len(names),
        part=part,
        notes=notes,
        label=lambda n: f": {names[n - 1]}",
        close=book.close,
    )


def csv_source(text: str, *, tab: bool) -> Source:
    delimiter = "\t" if tab else ","
    if not tab:
        # One column, or too irregular to tell: the comma stays.
        with contextlib.suppress(csv.Error):
            delimiter = csv.Sniffer().sniff(text[:8192], delimiters=",;\t|").delimiter
    rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter))
    shown = {",": "comma", ";": "semicolon", "\t": "tab", "|": "pipe"}[delimiter]
    note = f"CSV with {shown} delimiter; cells shown separated by ' | '"
    return Source(
        total=len(rows),
        part=lambda n, _budget: Part(text="\n".join(_rows([(n, rows[n - 1])]))),
        notes=[note],
    )


def unpacked_problem(data: bytes, limit: int = MAX_UNPACKED_BYTES) -> str | None:
    """Why the Office file (zip archive) `data` is refused before it is parsed, or None: more
    than `MAX_PARTS` parts, or parts that unpack to more than `limit` bytes."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            parts = archive.infolist()
    except (zipfile.BadZipFile, OSError):
        return None  # the parser says what is wrong with it
    if len(parts) > MAX_PARTS:
        return f"it holds {len(parts):,} parts (at most {MAX_PARTS:,} are read)"
    size = sum(part.file_size for part in parts)
    if size > limit:
        return (
            f"its parts unpack to {size:,} bytes, {size // max(len(data), 1):,} "
            f"times its size (at most {limit:,} are read)"
        )
    return None
