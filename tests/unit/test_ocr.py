"""OCR with the real tesseract program on images and scanned PDF pages made here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw, ImageFont
from reportlab.lib.utils import ImageReader
from reportlab.pdfgen import canvas

from heron import ToolContext, ToolResult
from heron.safety.workspace import Workspace
from heron.tools.definition import Tool
from heron.toolsets.documents import document_tools, read_window
from heron.toolsets.ocr import OcrError, Tesseract, ocr_tools
from support.swaps import call_in_a_thread, change_after_first_look, into_fifo

WORDS = ("HERON", "READS", "INVOICES")


def text_image(lines: list[str], *, size: tuple[int, int] = (1000, 260)) -> Image.Image:
    """Black text in a large, clear font on white: easy for OCR."""
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=56)
    for number, line in enumerate(lines):
        draw.text((40, 40 + 90 * number), line, fill="black", font=font)
    return image


def scanned_pdf(path: Path, image: Image.Image, *, text_page: str) -> Path:
    """Page 1 holds only an image (a scan, no text layer); page 2 has real text."""
    sheet = canvas.Canvas(str(path))
    sheet.drawImage(ImageReader(image), 40, 500, width=500, height=130)
    sheet.showPage()
    sheet.drawString(72, 700, text_page)
    sheet.showPage()
    sheet.save()
    return path


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


async def run(tool: Tool, **arguments: Any) -> ToolResult:
    return await tool.execute(tool.validate(arguments), ToolContext(call_id="c1", turn_id="t1"))


def test_ocr_reads_the_words_of_a_generated_image(ws: Workspace) -> None:
    text_image(["HERON READS INVOICES", "TOTAL 4521 EUR"]).save(ws.root / "scan.png")

    found = Tesseract().recognize_file(ws.root / "scan.png")

    assert found.text.split("\n") == ["HERON READS INVOICES", "TOTAL 4521 EUR"]
    assert found.words == 6
    assert found.confidence is not None and found.confidence > 80
    assert found.engine.startswith("tesseract ")


async def test_the_ocr_image_tool_names_engine_language_and_confidence(ws: Workspace) -> None:
    text_image([" ".join(WORDS)]).convert("P").save(ws.root / "palette.png")
    (tool,) = ocr_tools(ws, Tesseract())

    result = await run(tool, path="palette.png", lang="eng")

    assert result.success
    head, body = result.output.split("\n\n", 1)
    assert head.startswith("OCR of palette.png (1000×260 px) — tesseract ")
    assert "lang eng: 3 words, mean confidence" in head
    assert body.split() == list(WORDS)
    assert result.data["words"] == 3


async def test_a_missing_tesseract_is_a_clear_error_never_an_empty_result(ws: Workspace) -> None:
    text_image(["HELLO"]).save(ws.root / "scan.png")
    missing = Tesseract(command=str(ws.root / "no-such-tesseract"))
    (tool,) = ocr_tools(ws, missing)

    with pytest.raises(OcrError) as raised:
        missing.recognize_file(ws.root / "scan.png")
    result = await run(tool, path="scan.png")

    assert raised.value.reason == "unavailable"
    assert not result.success
    assert result.data["error"] == "unavailable"
    assert "was not found; install Debian's `tesseract-ocr` package" in (result.error or "")


async def test_an_uninstalled_language_is_refused_naming_the_installed_ones(
    ws: Workspace,
) -> None:
    text_image(["HELLO"]).save(ws.root / "scan.png")
    (tool,) = ocr_tools(ws, Tesseract())

    result = await run(tool, path="scan.png", lang="qqq")

    assert result.data["error"] == "language"
    assert "qqq is not installed (installed: eng" in (result.error or "")
    assert "tesseract-ocr-qqq" in (result.error or "")


def test_a_malformed_language_is_refused_before_tesseract_runs() -> None:
    with pytest.raises(OcrError) as raised:
        Tesseract().check_lang("eng; rm -rf /")

    assert raised.value.reason == "language"


async def test_an_image_without_text_says_so_explicitly(ws: Workspace) -> None:
    Image.new("RGB", (400, 300), "white").save(ws.root / "blank.png")
    (tool,) = ocr_tools(ws, Tesseract())

    result = await run(tool, path="blank.png")

    assert result.success
    assert result.output.endswith("OCR found no text in this image.")
    assert result.data["words"] == 0


async def test_a_file_that_is_no_image_is_refused(ws: Workspace) -> None:
    (ws.root / "notes.png").write_text("just text, wearing a .png name", encoding="utf-8")
    (tool,) = ocr_tools(ws, Tesseract())

    result = await run(tool, path="notes.png")

    assert result.data["error"] == "bad_image"
    assert "notes.png is not a readable image" in (result.error or "")


def test_an_image_swapped_for_a_fifo_after_the_check_is_refused_not_waited_on(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = ws.root / "scan.png"
    text_image([" ".join(WORDS)]).save(target)
    (tool,) = ocr_tools(ws, Tesseract())
    change_after_first_look(monkeypatch, target, into_fifo)

    result = call_in_a_thread(tool, target, path="scan.png")

    assert result is not None, "ocr_image waited on a FIFO swapped in after its check"
    assert not result.success and result.data["error"] == "not_regular_file"


def test_a_scanned_pdf_page_goes_through_ocr_and_says_so(ws: Workspace) -> None:
    scanned_pdf(ws.root / "scan.pdf", text_image([" ".join(WORDS)]), text_page="typed page")

    window = read_window(ws, "scan.pdf", ocr=Tesseract())

    page_one, page_two = window.text.split("\n\n--- page 2 of 2 ---\n")
    assert page_one.splitlines()[0] == "--- page 1 of 2 ---"
    assert "no text layer, only 1 image(s): the text below is OCR output" in page_one
    assert page_one.splitlines()[-1] == " ".join(WORDS)
    assert page_two == "typed page"
    assert window.ocr_pages == (1,)


async def test_a_scanned_page_without_tesseract_reports_the_failure_on_the_page(
    ws: Workspace,
) -> None:
    scanned_pdf(ws.root / "scan.pdf", text_image(["HELLO"]), text_page="typed page")
    (tool,) = document_tools(ws, ocr=Tesseract(command="/nonexistent/tesseract"))
    (no_ocr,) = document_tools(ws, ocr=None)

    failed = await run(tool, path="scan.pdf")
    off = await run(no_ocr, path="scan.pdf")

    assert failed.success  # the other pages are still worth reading
    assert "[no text layer, only 1 image(s); OCR failed: OCR is unavailable" in failed.output
    assert failed.data["ocr_failures"] == ["unavailable"]
    assert "typed page" in failed.output
    assert "[no text layer, only 1 image(s); OCR is switched off, so no text is shown]" in (
        off.output
    )
