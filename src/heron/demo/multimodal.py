"""`heron demo multimodal FILE QUESTION`: one file and one question through the three multimodal
paths side by side (native, extract, tool), with the input tokens each path costs.

Models are scripted unless real ones are configured through the environment:

- `HERON_DEMO_MODEL` (`provider:model`, see `heron.models.resolve`; `HERON_DEMO_BASE_URL` for
  servers that need one): the main model and the helper that answers `analyze_*` questions;
- `HERON_DEMO_VISION_MODEL` and `HERON_DEMO_VISION_URL` (an OpenAI-compatible server;
  `HERON_DEMO_VISION_KEY_ENV` names the variable holding its key): the vision model;
- `HERON_DEMO_TRANSCRIBE_URL` (and `HERON_DEMO_TRANSCRIBE_MODEL`, default `whisper-1`): speech
  to text for audio files.

Scripted models cannot understand anything: the scripted text models answer with the line of
their input that shares most words with the question, and the scripted vision model only says
what it received. Token counts are local counts (`heron.models.tokens` for text, the tile rule
of `heron.toolsets.media` for images); reported counts appear when real providers report
usage.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from heron.agent import Agent
from heron.messages import ToolResultMessage, UserMessage
from heron.models.base import Model, ModelError, ModelRequest
from heron.models.metered import MeteredModel
from heron.models.scripted import FunctionModel, ModelTurn, ScriptedCall
from heron.models.tokens import counter_for_model
from heron.safety.workspace import Workspace, WorkspaceError
from heron.toolsets.documents import DocumentError
from heron.toolsets.media import (
    FunctionVisionModel,
    HttpTranscriber,
    ImageInput,
    MediaInput,
    ModelAnswer,
    MultimodalPath,
    OpenAIVisionModel,
    PdfInput,
    Transcriber,
    VisionModel,
    VisionRequest,
    ask_text_model,
    file_kind,
)
from heron.toolsets.multimodal import (
    MultimodalConfig,
    analysis_tools,
    extract_text,
)
from heron.toolsets.ocr import OcrError, Tesseract

__all__ = [
    "PATHS",
    "SAMPLE_LINES",
    "SAMPLE_QUESTION",
    "DemoModels",
    "MeteredVision",
    "PathReport",
    "configured_models",
    "keyword_answer",
    "run_multimodal_demo",
    "run_path",
    "run_paths",
    "scripted_models",
    "write_sample",
]

PATHS: tuple[MultimodalPath, ...] = ("native", "extract", "tool")
_ERRORS = (ModelError, DocumentError, OcrError, WorkspaceError, ValueError, OSError)
_STOP = frozenset(("the", "and", "for", "are", "was", "were", "what", "which", "who", "how"))
_AGENT_SYSTEM = "Answer the user's question about the file with the analyze tools; be brief."


@dataclass(frozen=True, kw_only=True, slots=True)
class PathReport:
    """What one path cost and answered. Token counts are input tokens, estimated."""

    path: MultimodalPath
    ok: bool
    answer: str
    main_tokens: int
    """Input tokens the main (conversation) model received, over all its requests."""
    helper_tokens: int = 0
    """Input tokens of helper models (the tool path's analyze_* answers)."""
    media_tokens: int = 0
    """The part of the above that is images or PDF pages."""
    reported_tokens: int | None = None
    """Input tokens as providers reported them, when every model reported usage."""
    calls: int = 0
    note: str = ""

    @property
    def total_tokens(self) -> int:
        return self.main_tokens + self.helper_tokens


class MeteredVision:
    """Wraps a `VisionModel` as `MeteredModel` wraps a model: calls, estimated and reported
    input tokens, and the media part of the estimate."""

    def __init__(self, model: VisionModel) -> None:
        self.inner = model
        self.calls = 0
        self.estimated = 0
        self.media = 0
        self.reported: int | None = 0

    @property
    def name(self) -> str:
        return self.inner.name

    async def ask(self, request: VisionRequest) -> ModelAnswer:
        self.calls += 1
        self.estimated += request.estimated_tokens()
        self.media += sum(item.tokens() for item in request.media)
        answer = await self.inner.ask(request)
        if answer.usage is None or self.reported is None:
            self.reported = None
        else:
            self.reported += answer.usage.input_tokens
        return answer


@dataclass(frozen=True, kw_only=True, slots=True)
class DemoModels:
    """The models behind one comparison."""

    main: Model
    helper: Model
    vision: VisionModel | None
    transcriber: Transcriber | None = None
    ocr: Tesseract | None = None


async def run_path(
    path: MultimodalPath, ws: Workspace, file: str, question: str, models: DemoModels
) -> PathReport:
    """Answer `question` about workspace file `file` by one path; never raises for the
    failures a path can have (they become a report with `ok=False`)."""
    main, helper = _metered(models.main), _metered(models.helper)
    vision = MeteredVision(models.vision) if models.vision is not None else None
    config = MultimodalConfig(
        helper=helper, vision=vision, transcriber=models.transcriber, ocr=models.ocr
    )
    answer, ok, note = "", True, ""
    try:
        if path == "native":
            media = _media(ws, file)
            if vision is None:
                raise ValueError("no vision model is configured")
            answer = (await vision.ask(VisionRequest(question=question, media=media))).text
        elif path == "extract":
            content = await extract_text(ws, file, config)
            cut = "" if content.complete else ", cut to fit"
            prompt = f"{question}\n\nContent of {file} ({content.source}{cut}):\n"
            answer = (await ask_text_model(main, f"{prompt}<file>\n{content.text}\n</file>")).text
        else:
            agent = Agent(
                model=main,
                tools=analysis_tools(ws, config),
                autonomy="full",
                system_prompt=_AGENT_SYSTEM,
                workspace=ws.root,
            )
            result = await agent.run(f"{question}\n\n(The file is `{file}` in the workspace.)")
            answer, ok = result.text, result.ok
            failed = [m.content for m in result.history if m.role == "tool" and m.is_error]
            if failed:
                ok, note = False, failed[0]
    except _ERRORS as exc:
        ok, note = False, str(exc)
    used: list[tuple[int, int | None]] = [  # (calls, reported input tokens) per model used
        (len(m.calls), m.reported_input_tokens) for m in (main, helper) if m.calls
    ]
    if vision is not None and vision.calls:
        used.append((vision.calls, vision.reported))
    reported = [r for _, r in used]
    vision_tokens = vision.estimated if vision else 0
    in_main = path == "native"
    return PathReport(
        path=path,
        ok=ok,
        answer=answer.strip(),
        main_tokens=main.counted_tokens + (vision_tokens if in_main else 0),
        helper_tokens=helper.counted_tokens + (0 if in_main else vision_tokens),
        media_tokens=vision.media if vision else 0,
        reported_tokens=sum(r for r in reported if r is not None)
        if used and None not in reported
        else None,
        calls=sum(calls for calls, _ in used),
        note=note,
    )


def _metered(model: Model) -> MeteredModel:
    """`model`, counting each request's input tokens with its family's counter."""
    return MeteredModel(model, counter=counter_for_model(model.name))


def _media(ws: Workspace, file: str) -> tuple[MediaInput, ...]:
    target = ws.resolve(file, must_exist=True)
    if file_kind(file) == "image":
        return (ImageInput.from_file(target, label=file),)
    if target.suffix.lower() == ".pdf":
        return (PdfInput.from_file(target, label=file),)
    raise ValueError(f"the native path takes images and PDFs; {file} needs extract or tool")


async def run_paths(
    ws: Workspace, file: str, question: str, models: DemoModels
) -> list[PathReport]:
    """All three paths, one after the other, on the same file and question."""
    return [await run_path(path, ws, file, question, models) for path in PATHS]


def keyword_answer(question: str, content: str) -> str:
    """The line of `content` sharing most words with `question` (how scripted models answer).

    Only the text inside `<file>…</file>` counts when there is such a block."""
    content = content.partition("<file>")[2] or content
    words = {w for w in re.findall(r"\w+", question.lower()) if len(w) > 2 and w not in _STOP}
    best, score = "", 0
    for line in content.splitlines():
        found = len(words & set(re.findall(r"\w+", line.lower())))
        if found > score and not line.startswith(("[", "---", "</file>")):
            best, score = line.strip(), found
    return f"(scripted) {best[:200]}" if best else "(scripted) the content does not say"


def scripted_models(file: str, question: str, ocr: Tesseract | None = None) -> DemoModels:
    """Scripted stand-ins: a main model that calls the right analyze tool, then relays its
    answer; a helper answering by keywords; a vision model that says what it received."""

    def main(request: ModelRequest) -> ModelTurn | str:
        last = request.messages[-1]
        if not request.tools:
            return keyword_answer(question, last.content if isinstance(last, UserMessage) else "")
        if isinstance(last, ToolResultMessage):
            return last.content.split("\n\n[answered by")[0]
        call = ScriptedCall(
            id="call-1",
            name=f"analyze_{file_kind(file)}",
            arguments={"path": file, "question": question},
        )
        return ModelTurn(tool_calls=[call])

    def helper(request: ModelRequest) -> str:
        last = request.messages[-1]
        return keyword_answer(question, last.content if isinstance(last, UserMessage) else "")

    def vision(request: VisionRequest) -> str:
        seen = ", ".join(item.label for item in request.media)
        return (
            f"(scripted vision model) received {seen}, about {request.estimated_tokens():,} tokens"
        )

    return DemoModels(
        main=FunctionModel(main, name="scripted-main"),
        helper=FunctionModel(helper, name="scripted-helper"),
        vision=FunctionVisionModel(vision, name="scripted-vision"),
        ocr=ocr,
    )


def configured_models(defaults: DemoModels, environ: Mapping[str, str]) -> DemoModels:
    """`defaults`, with each model the environment configures replaced by the real one."""
    from heron.models.resolve import resolve_model

    main = helper = None
    if spec := environ.get("HERON_DEMO_MODEL"):
        main = helper = resolve_model(spec, base_url=environ.get("HERON_DEMO_BASE_URL"))
    vision = defaults.vision
    if (name := environ.get("HERON_DEMO_VISION_MODEL")) and (
        url := environ.get("HERON_DEMO_VISION_URL")
    ):
        vision = OpenAIVisionModel(
            name, base_url=url, api_key_env=environ.get("HERON_DEMO_VISION_KEY_ENV")
        )
    transcriber = defaults.transcriber
    if url := environ.get("HERON_DEMO_TRANSCRIBE_URL"):
        model = environ.get("HERON_DEMO_TRANSCRIBE_MODEL", "whisper-1")
        transcriber = HttpTranscriber(base_url=url, model=model)
    return DemoModels(
        main=main or defaults.main,
        helper=helper or defaults.helper,
        vision=vision,
        transcriber=transcriber,
        ocr=defaults.ocr,
    )


def render_reports(reports: list[PathReport], *, events: str) -> None:
    """A table (`pretty`) or one JSON object per path (`jsonl`) on standard output."""
    if events == "jsonl":
        for report in reports:
            sys.stdout.write(
                json.dumps(asdict(report) | {"total_tokens": report.total_tokens}) + "\n"
            )
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Multimodal paths: input tokens (estimated) and answers")
    for column in ("path", "main model", "helper", "total", "calls", "answer"):
        table.add_column(column, justify="right" if column not in ("path", "answer") else "left")
    for r in reports:
        answer = r.answer if r.ok else f"[red]failed:[/red] {r.note}"
        table.add_row(
            r.path,
            f"{r.main_tokens:,}",
            f"{r.helper_tokens:,}",
            f"{r.total_tokens:,}",
            str(r.calls),
            answer,
        )
    Console().print(table)


SAMPLE_QUESTION = "How much did revenue grow this quarter?"
SAMPLE_LINES = (
    "Quarterly report, third quarter",
    "Revenue grew 12% over the second quarter, to 4.2 million.",
    "Costs stayed flat; the team grew by two engineers.",
)


def write_sample(directory: Path) -> Path | None:
    """A one-page report of `SAMPLE_LINES` in `directory`: a PDF with reportlab, else a PNG
    with Pillow, else None."""
    try:
        from reportlab.lib.pagesizes import A5  # type: ignore[import-untyped]
        from reportlab.pdfgen.canvas import Canvas  # type: ignore[import-untyped]
    except ImportError:
        pass
    else:
        target = directory / "report.pdf"
        canvas = Canvas(str(target), pagesize=A5)
        for row, line in enumerate(SAMPLE_LINES):
            canvas.drawString(40, 540 - 24 * row, line)
        canvas.save()
        return target
    try:
        from PIL import Image, ImageDraw
    except ImportError:
        return None
    target = directory / "report.png"
    image = Image.new("RGB", (900, 60 + 40 * len(SAMPLE_LINES)), "white")
    draw = ImageDraw.Draw(image)
    for row, line in enumerate(SAMPLE_LINES):
        draw.text((30, 30 + 40 * row), line, fill="black", font_size=24)
    image.save(target)
    return target


def run_multimodal_demo(file: Path, question: str, *, events: str) -> int:
    """Run `file` and `question` through the three paths and print the comparison.

    The file is copied into a scratch workspace. Returns 0 when every path answered, 1 when
    one failed, 2 when the file does not exist."""
    if not file.is_file():
        sys.stderr.write(f"no such file: {file}\n")
        return 2
    with tempfile.TemporaryDirectory(prefix="heron-multimodal-") as scratch:
        shutil.copy2(file, Path(scratch) / file.name)
        ws = Workspace(Path(scratch))
        models = configured_models(scripted_models(file.name, question, Tesseract()), os.environ)
        reports = asyncio.run(run_paths(ws, file.name, question, models))
    render_reports(reports, events=events)
    return 0 if all(report.ok for report in reports) else 1
