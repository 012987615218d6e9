"""read_document over real PDF, Word, PowerPoint, Excel, CSV, HTML and Markdown files made here."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import docx
import openpyxl
import pytest
from pptx import Presentation
from pypdf import PdfReader, PdfWriter
from reportlab.pdfgen import canvas

from heron import ToolContext, ToolResult
from heron.safety.workspace import Workspace
from heron.tools.definition import Tool
from heron.toolsets.documents import DocumentLimits, DocumentWindow, document_tools, read_window


def make_pdf(path: Path, pages: list[str]) -> Path:
    sheet = canvas.Canvas(str(path))
    for text in pages:
        for number, line in enumerate(text.splitlines()):
            sheet.drawString(72, 760 - 14 * number, line)
        sheet.showPage()
    sheet.save()
    return path


def encrypt(source: Path, target: Path, *, user: str, owner: str) -> Path:
    writer = PdfWriter(clone_from=PdfReader(source))
    writer.encrypt(user_password=user, owner_password=owner, algorithm="AES-256")
    with target.open("wb") as handle:
        writer.write(handle)
    return target


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


@pytest.fixture
def read_document(ws: Workspace) -> Tool:
    (tool,) = document_tools(ws, ocr=None)
    return tool


async def run(tool: Tool, **arguments: Any) -> ToolResult:
    return await tool.execute(tool.validate(arguments), ToolContext(call_id="c1", turn_id="t1"))


async def test_pdf_pages_carry_markers_and_the_header_says_how_to_continue(
    ws: Workspace, read_document: Tool
) -> None:
    make_pdf(ws.root / "report.pdf", [f"Page {n} speaks of topic {n * 7}" for n in range(1, 13)])

    first = await run(read_document, path="report.pdf", limit=5)
    rest = await run(read_document, path="report.pdf", offset=11)

    assert first.success
    assert first.output.splitlines()[0] == (
        "report.pdf — PDF, pages 1–5 of 12 shown; pass offset=6 to continue"
    )
    assert "--- page 3 of 12 ---\nPage 3 speaks of topic 21" in first.output
    assert "--- page 6 of 12 ---" not in first.output
    assert first.data["next_offset"] == 6
    assert (
        rest.output.splitlines()[0] == "report.pdf — PDF, pages 11–12 of 12 shown (end of document)"
    )
    assert "Page 12 speaks of topic 84" in rest.output
    assert rest.data["next_offset"] is None


async def test_word_documents_read_as_lines_with_headings_lists_and_table_rows(
    ws: Workspace, read_document: Tool
) -> None:
    document = docx.Document()
    document.add_heading("Quarterly review", level=1)
    document.add_paragraph("Revenue grew in every region.")
    document.add_paragraph("Hire two engineers", style="List Bullet")
    table = document.add_table(rows=2, cols=3)
    for col, value in enumerate(["region", "q2", "q3"]):
        table.cell(0, col).text = value
    table.cell(1, 0).text = "north"
    table.cell(1, 1).merge(table.cell(1, 2)).text = "12 (merged)"
    document.save(str(ws.root / "review.docx"))

    whole = await run(read_document, path="review.docx")
    window = await run(read_document, path="review.docx", offset=2, limit=2)

    assert whole.output.splitlines()[2:] == [
        "# Quarterly review",
        "Revenue grew in every region.",
        "- Hire two engineers",
        "region | q2 | q3",
        "north | 12 (merged)",
    ]
    assert window.output.splitlines()[0] == (
        "review.docx — Word document, lines 2–3 of 5 shown; pass offset=4 to continue"
    )
    assert "Quarterly" not in window.output


async def test_slides_show_title_body_table_and_speaker_notes_one_unit_each(
    ws: Workspace, read_document: Tool
) -> None:
    deck = Presentation()
    for number in (1, 2, 3):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = f"Slide title {number}"
        slide.placeholders[1].text = f"Point {number}"
        slide.notes_slide.notes_text_frame.text = f"Say hello {number}"
    deck.save(str(ws.root / "deck.pptx"))

    result = await run(read_document, path="deck.pptx", offset=2, limit=1)

    assert result.output.splitlines()[0] == (
        "deck.pptx — PowerPoint deck, slides 2–2 of 3 shown; pass offset=3 to continue"
    )
    body = result.output.split("\n\n", 1)[1]
    assert body.splitlines() == [
        "--- slide 2 of 3 ---",
        "# Slide title 2",
        "Point 2",
        "",
        "Speaker notes:",
        "Say hello 2",
    ]


async def test_each_sheet_is_one_unit_with_its_name_and_numbered_rows(
    ws: Workspace, read_document: Tool
) -> None:
    book = openpyxl.Workbook()
    sales = book.active
    sales.title = "Sales"
    sales.append(["name", "units"])
    sales.append(["ana", 3])
    sales.append([None, None])
    sales.append(["bo", 4.5])
    book.create_sheet("Notes")["B2"] = "remember"
    book.save(str(ws.root / "book.xlsx"))

    result = await run(read_document, path="book.xlsx")

    assert result.output.splitlines()[0] == (
        "book.xlsx — Excel workbook, sheets 1–2 of 2 shown (end of document)"
    )
    assert (
        "--- sheet 1 of 2: Sales ---\nrow 1: name | units\nrow 2: ana | 3\nrow 4: bo | 4.5"
        in result.output
    )
    assert "--- sheet 2 of 2: Notes ---\nrow 2:  | remember" in result.output


async def test_csv_pages_by_row_and_keeps_a_quoted_line_break_inside_its_row(
    ws: Workspace, read_document: Tool
) -> None:
    lines = ["id;comment"] + [f'{n};"note {n}"' for n in range(1, 300)]
    lines[3] = '3;"first line\nsecond line"'
    (ws.root / "notes.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")

    result = await run(read_document, path="notes.csv", limit=4)

    assert result.output.splitlines()[0] == (
        "notes.csv — CSV table, rows 1–4 of 300 shown; pass offset=5 to continue"
    )
    assert "[CSV with semicolon delimiter; cells shown separated by ' | ']" in result.output
    assert "row 4: 3 | first line\nsecond line" in result.output


async def test_html_becomes_text_without_scripts_and_lists_its_links(
    ws: Workspace, read_document: Tool
) -> None:
    page = (
        "<html><head><title>Release</title><script>track()</script></head><body>"
        "<h1>Version 2</h1><p>Read the <a href='https://example.org/guide'>guide</a>.</p>"
        "</body></html>"
    )
    (ws.root / "page.html").write_text(page, encoding="utf-8")

    result = await run(read_document, path="page.html")

    assert "# Version 2" in result.output
    assert "Read the guide [1]." in result.output
    assert "Links:\n[1] https://example.org/guide" in result.output
    assert "[title: Release]" in result.output
    assert "track()" not in result.output


async def test_markdown_pages_by_line(ws: Workspace, read_document: Tool) -> None:
    text = "\n".join(f"line {n}" for n in range(1, 451)) + "\n"
    (ws.root / "notes.md").write_text(text, encoding="utf-8")

    first = await run(read_document, path="notes.md")
    last = await run(read_document, path="notes.md", offset=401)

    assert first.output.splitlines()[0] == (
        "notes.md — Markdown, lines 1–200 of 450 shown; pass offset=201 to continue"
    )
    assert first.output.splitlines()[-1] == "line 200"
    assert (
        last.output.splitlines()[0]
        == "notes.md — Markdown, lines 401–450 of 450 shown (end of document)"
    )


def test_the_output_budget_ends_the_window_between_whole_pages(ws: Workspace) -> None:
    make_pdf(ws.root / "long.pdf", ["\n".join([f"p{n} " + "x" * 60] * 20) for n in range(1, 7)])

    window = read_window(ws, "long.pdf", limits=DocumentLimits(max_chars=3000))

    assert (window.first, window.last, window.next_offset) == (1, 2, 3)
    assert window.header().endswith(
        "pages 1–2 of 6 shown (the output size limit was reached); pass offset=3 to continue"
    )
    assert "p3 " not in window.text


def test_a_page_larger_than_the_budget_is_cut_with_a_marker(ws: Workspace) -> None:
    make_pdf(ws.root / "dense.pdf", ["\n".join(["y" * 80] * 40), "second page"])

    window = read_window(ws, "dense.pdf", limits=DocumentLimits(max_chars=1000))

    assert window.last == 1 and window.next_offset == 2
    assert window.cut_units == (1,)
    assert "[… page 1 cut here: " in window.text
    assert "more characters are not shown" in window.text


async def test_file_type_overrides_detection_and_unknown_names_are_sniffed(
    ws: Workspace, read_document: Tool
) -> None:
    (ws.root / "export.txt").write_text("a,b\n1,2\n", encoding="utf-8")
    make_pdf(ws.root / "scan.bin", ["hidden pdf text"])

    as_csv = await run(read_document, path="export.txt", file_type="csv")
    as_text = await run(read_document, path="export.txt")
    sniffed = await run(read_document, path="scan.bin")

    assert "row 2: 1 | 2" in as_csv.output
    assert as_text.output.splitlines()[2:] == ["a,b", "1,2"]
    assert sniffed.data["file_type"] == "pdf"
    assert "hidden pdf text" in sniffed.output


async def test_a_password_protected_pdf_is_refused_as_encrypted(
    ws: Workspace, read_document: Tool
) -> None:
    plain = make_pdf(ws.root / "plain.pdf", ["secret numbers"])
    encrypt(plain, ws.root / "locked.pdf", user="open-sesame", owner="boss")

    result = await run(read_document, path="locked.pdf")

    assert not result.success
    assert result.data["error"] == "encrypted"
    assert "password-protected PDF" in (result.error or "")


async def test_a_pdf_locked_only_by_an_owner_password_is_read(
    ws: Workspace, read_document: Tool
) -> None:
    plain = make_pdf(ws.root / "plain.pdf", ["printable but locked"])
    encrypt(plain, ws.root / "owner.pdf", user="", owner="boss")

    result = await run(read_document, path="owner.pdf")

    assert result.success
    assert "printable but locked" in result.output


async def test_damaged_files_are_refused_as_corrupt_or_wrong_type(
    ws: Workspace, read_document: Tool
) -> None:
    good = make_pdf(ws.root / "good.pdf", ["whole"]).read_bytes()
    (ws.root / "cut.pdf").write_bytes(b"%PDF-1.4\n" + b"\x00garbage" * 40)
    (ws.root / "half.pdf").write_bytes(good[: len(good) // 3])
    (ws.root / "fake.docx").write_bytes(b"this is plain text, not a zip archive")
    with zipfile.ZipFile(ws.root / "empty.xlsx", "w") as archive:
        archive.writestr("hello.txt", "no workbook inside")

    results = {
        name: await run(read_document, path=name)
        for name in ("cut.pdf", "half.pdf", "fake.docx", "empty.xlsx")
    }

    assert {name: r.data["error"] for name, r in results.items()} == {
        "cut.pdf": "corrupt",
        "half.pdf": "corrupt",
        "fake.docx": "wrong_type",
        "empty.xlsx": "corrupt",
    }
    assert "looks damaged" in (results["half.pdf"].error or "")
    assert (
        results["fake.docx"].error == "fake.docx is no Word document: its content looks like text"
    )


async def test_encrypted_and_legacy_office_containers_are_refused_with_the_reason(
    ws: Workspace, read_document: Tool
) -> None:
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 504
    (ws.root / "locked.docx").write_bytes(ole + "EncryptedPackage".encode("utf-16-le"))
    (ws.root / "old.xls").write_bytes(ole + "Workbook".encode("utf-16-le"))
    (ws.root / "old-renamed.pptx").write_bytes(ole + "PowerPoint Document".encode("utf-16-le"))

    locked = await run(read_document, path="locked.docx")
    legacy = await run(read_document, path="old.xls")
    renamed = await run(read_document, path="old-renamed.pptx")

    assert locked.data["error"] == "encrypted"
    assert "password-protected Office file" in (locked.error or "")
    assert legacy.data["error"] == "legacy_format"
    assert renamed.data["error"] == "legacy_format"


async def test_images_outside_paths_and_offsets_past_the_end_are_refused(
    ws: Workspace, read_document: Tool
) -> None:
    (ws.root / "chart.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 32)
    (ws.root / "short.md").write_text("one\ntwo\n", encoding="utf-8")

    image = await run(read_document, path="chart.png")
    outside = await run(read_document, path="../etc/passwd")
    past = await run(read_document, path="short.md", offset=3)

    assert image.data["error"] == "is_image"
    assert "use ocr_image" in (image.error or "")
    assert outside.data["error"] == "traversal"
    assert past.data["error"] == "offset_past_end"
    assert past.error == "offset 3 is past the end: short.md has 2 lines"


def test_an_empty_document_says_so(ws: Workspace) -> None:
    (ws.root / "empty.txt").write_text("", encoding="utf-8")

    window: DocumentWindow = read_window(ws, "empty.txt")

    assert window.header() == "empty.txt — text, empty (0 lines)"
    assert window.next_offset is None


def test_a_sheet_larger_than_the_budget_stops_early_and_says_what_to_do(ws: Workspace) -> None:
    book = openpyxl.Workbook()
    big = book.active
    big.title = "Big"
    for number in range(1, 3001):
        big.append([number, f"item {number}"])
    book.create_sheet("Small")["A1"] = "tiny"
    book.save(str(ws.root / "big.xlsx"))

    window = read_window(ws, "big.xlsx", limits=DocumentLimits(max_chars=2000))

    rest = read_window(ws, "big.xlsx", offset=2, limits=DocumentLimits(max_chars=2000))

    assert window.header() == (
        "big.xlsx — Excel workbook, sheets 1–1 of 2 shown (the output size limit was reached); "
        "pass offset=2 to continue; sheet 1 shown only in part (see the note where it was cut)"
    )
    assert "row 3000" not in window.text
    assert rest.text == "--- sheet 2 of 2: Small ---\nrow 1: tiny"
    assert "of about 3000: the rest does not fit one read; use run_python" in window.text


def add_padding(path: Path, size: int) -> None:
    """Add a part of `size` zero bytes: a few hundred KiB on disk, `size` once unpacked."""
    with (
        zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as archive,
        archive.open("word/media/padding.bin", "w", force_zip64=True) as part,
    ):
        for _ in range(size // 2**20):
            part.write(bytes(2**20))


async def test_an_office_file_that_unpacks_past_the_limit_is_refused_before_it_is_parsed(
    ws: Workspace, read_document: Tool
) -> None:
    # A zip bomb: 714 KB that unpacked to 700 MB drove heron to 1.5 GB of memory before.
    document = docx.Document()
    document.add_paragraph("small")
    document.save(str(ws.root / "bomb.docx"))
    add_padding(ws.root / "bomb.docx", 130 * 2**20)

    result = await run(read_document, path="bomb.docx")

    assert not result.success and result.data["error"] == "too_large"
    assert result.error is not None
    assert "its parts unpack to 137," in result.error and "at most 134,217,728" in result.error
    assert (ws.root / "bomb.docx").stat().st_size < 2**20
