"""Experiment 4-2: input tokens per multimodal path, for a text-heavy PDF and a bar chart.

Both files are made here: a six-page report (reportlab) whose page 5 holds the fact asked
about, and a 1200×800 bar chart (Pillow: axes, bars, value and month labels). Each goes through
the three paths with heron's scripted models (`heron.demo.multimodal`), so the numbers are
input-token ESTIMATES, not provider bills:

- native: the file itself to a vision model (PDF pages: text + a page image at 96 DPI; images
  by OpenAI's 512-px tile rule);
- extract: document text or OCR text in one prompt to a text model;
- tool: the main model calls analyze_document / analyze_image; a helper model pays for the
  content, the main model for the three tool definitions and the short answer.

Set HERON_DEMO_MODEL / HERON_DEMO_VISION_* (see heron.demo.multimodal) to use real models;
their reported usage then shows in the last column.

    python bench/multimodal_paths.py
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import getSampleStyleSheet
from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate

from heron.demo.multimodal import PathReport, configured_models, run_paths, scripted_models
from heron.safety.workspace import Workspace
from heron.toolsets.ocr import Tesseract

MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun"]
SALES = [42, 55, 38, 71, 64, 49]
CASES = [
    ("report.pdf", "What was the cargo volume in 2023?"),
    ("chart.png", "Which month has the highest sales?"),
]
SENTENCES = [
    "The harbour authority handled more vessels than in any year before.",
    "Dredging of the eastern channel finished two months ahead of schedule.",
    "Container traffic grew while bulk cargo stayed level.",
    "Energy use per tonne moved fell for the fourth year in a row.",
    "Staff training focused on the new automated cranes.",
]


def make_report(path: Path, pages: int = 6) -> None:
    """A text-heavy A4 report: several paragraphs per page, one fact on page 5."""
    styles = getSampleStyleSheet()
    story: list[object] = []
    for page in range(1, pages + 1):
        story.append(Paragraph(f"Section {page}: operations review", styles["Heading2"]))
        for paragraph in range(6):
            text = " ".join(SENTENCES[(paragraph + i) % len(SENTENCES)] for i in range(5))
            story.append(Paragraph(text, styles["BodyText"]))
        if page == 5:
            fact = "Cargo volume in 2023 reached 41.7 million tonnes, up 6 percent."
            story.append(Paragraph(fact, styles["BodyText"]))
        story.append(PageBreak())
    SimpleDocTemplate(str(path), pagesize=A4).build(story)


def make_chart(path: Path) -> None:
    """A bar chart with axes, ticks, value labels and month labels."""
    width, height, left, bottom = 1200, 800, 120, 680
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=32)
    draw.text((left, 30), "Monthly sales (units)", fill="black", font=font)
    draw.line([(left, 100), (left, bottom), (width - 60, bottom)], fill="black", width=4)
    scale = 7
    for tick in range(0, 81, 20):
        y = bottom - tick * scale
        draw.line([(left - 12, y), (left, y)], fill="black", width=3)
        draw.text((left - 70, y - 16), str(tick), fill="black", font=font)
    for index, (month, value) in enumerate(zip(MONTHS, SALES, strict=True)):
        x = left + 40 + index * 170
        draw.rectangle([x, bottom - value * scale, x + 110, bottom], fill=(40, 90, 170))
        draw.text((x + 25, bottom - value * scale - 40), str(value), fill="black", font=font)
        draw.text((x + 25, bottom + 20), month, fill="black", font=font)
    image.save(path)


def row(file: str, report: PathReport) -> str:
    reported = f"{report.reported_tokens:,}" if report.reported_tokens is not None else "-"
    answer = report.answer if report.ok else f"FAILED: {report.note}"
    cells = [f"{file:<11}", f"{report.path:<8}", f"{report.main_tokens:>7,}"]
    cells += [f"{report.helper_tokens:>7,}", f"{report.media_tokens:>7,}"]
    cells += [f"{report.total_tokens:>7,}", f"{report.calls:>5}", f"{reported:>9}"]
    return "  ".join(cells) + f"  {answer[:60]}"


async def main() -> None:
    ocr = Tesseract()
    with tempfile.TemporaryDirectory(prefix="heron-bench-") as scratch:
        root = Path(scratch)
        make_report(root / "report.pdf")
        make_chart(root / "chart.png")
        ws = Workspace(root)
        print("input tokens per path (estimates: text chars/4, images by the 512-px tile rule)")
        print(
            f"{'file':<11}  {'path':<8}  {'main':>7}  {'helper':>7}  {'media':>7}  "
            f"{'total':>7}  {'calls':>5}  {'reported':>9}  answer"
        )
        for file, question in CASES:
            models = configured_models(scripted_models(file, question, ocr), os.environ)
            for report in await run_paths(ws, file, question, models):
                print(row(file, report))
    print()
    print("main: what the conversation model reads; helper: what analyze_* helpers read;")
    print("media: the image/PDF share. In a conversation, native and extract content stays")
    print("in the history and is re-sent with every later request; the tool path keeps only")
    print("the answer there but pays the helper again for every new question. Scripted")
    print("models do not understand files: their answers only show what reached them.")


if __name__ == "__main__":
    asyncio.run(main())
