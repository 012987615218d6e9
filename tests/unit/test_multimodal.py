"""The three multimodal paths with scripted models, and the HTTP vision and transcription
clients against OpenAI-compatible servers on 127.0.0.1."""

from __future__ import annotations

import email.parser
import email.policy
import io
import json
import math
import socket
import threading
import wave
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw, ImageFont
from pypdf import PdfReader
from reportlab.pdfgen import canvas

from heron import FunctionModel, ModelRequest, ToolContext, ToolResult
from heron.demo.multimodal import (
    DemoModels,
    run_multimodal_demo,
    run_path,
    run_paths,
    scripted_models,
)
from heron.messages import UserMessage
from heron.models.retry import ProviderError
from heron.models.tokens import EstimateCounter, count_request, counter_for_model
from heron.safety.workspace import Workspace
from heron.tools.definition import Tool
from heron.toolsets.media import (
    FunctionVisionModel,
    HttpTranscriber,
    ImageInput,
    OpenAIVisionModel,
    PdfInput,
    VisionRequest,
    image_tokens,
    text_tokens,
)
from heron.toolsets.multimodal import (
    MultimodalConfig,
    analysis_tools,
    multimodal_tools,
    transcription_tool,
)
from heron.toolsets.ocr import Tesseract
from support.swaps import call_in_a_thread, change_after_resolve, into_fifo

REPORT_LINES = [
    "Annual report of the harbour authority.",
    "Cargo volume rose to 41 million tonnes.",
    "The new crane arrives in March.",
]


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Server:
    """An OpenAI-compatible server whose answers the test decides; records every request."""

    answer: Callable[[Seen], tuple[int, bytes, dict[str, str]]]
    seen: list[Seen] = field(default_factory=list)
    base: str = ""


@pytest.fixture
def server() -> Iterator[Server]:
    state = Server(answer=lambda _: (500, b"{}", {}))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen = Seen("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            state.seen.append(seen)
            status, payload, headers = state.answer(seen)
            self.send_response(status)
            headers = {"Content-Type": "application/json"} | headers
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            """Keep the test output clean."""

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.base = f"http://127.0.0.1:{http.server_address[1]}/v1"
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    yield state
    http.shutdown()
    http.server_close()
    thread.join(5)


def form_fields(seen: Seen) -> dict[str, tuple[str | None, bytes]]:
    """multipart/form-data fields: name -> (file name, bytes)."""
    head = f"Content-Type: {seen.headers['content-type']}\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + seen.body)
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        fields[str(name)] = (part.get_filename(), part.get_payload(decode=True) or b"")
    return fields


def make_wav(path: Path) -> Path:
    with wave.open(str(path), "wb") as audio:
        audio.setnchannels(1)
        audio.setsampwidth(2)
        audio.setframerate(8000)
        audio.writeframes(b"\x00\x01" * 800)
    return path


def make_text_image(path: Path, text: str, size: tuple[int, int] = (900, 200)) -> Path:
    image = Image.new("RGB", size, "white")
    ImageDraw.Draw(image).text((30, 60), text, fill="black", font=ImageFont.load_default(size=56))
    image.save(path)
    return path


def make_report(path: Path) -> Path:
    sheet = canvas.Canvas(str(path))
    for number, line in enumerate(REPORT_LINES):
        sheet.drawString(72, 760 - 16 * number, line)
    sheet.showPage()
    sheet.save()
    return path


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


async def run(tool: Tool, **arguments: Any) -> ToolResult:
    return await tool.execute(tool.validate(arguments), ToolContext(call_id="c1", turn_id="t1"))


def prompt_of(request: ModelRequest) -> str:
    last = request.messages[-1]
    assert isinstance(last, UserMessage)
    return last.content


def test_image_tokens_follow_the_openai_tile_rule() -> None:
    assert image_tokens(1024, 1024, "high") == 765  # 768×768: 4 tiles
    assert image_tokens(2048, 4096, "high") == 1105  # 768×1536: 6 tiles
    assert image_tokens(300, 200, "auto") == 255  # small images are not scaled up: 1 tile
    assert image_tokens(4000, 3000, "low") == 85


def test_a_pdf_costs_its_text_plus_an_image_of_each_page(ws: Workspace) -> None:
    path = make_report(ws.root / "report.pdf")
    pdf = PdfInput.from_file(path, label="report.pdf")

    (chars,) = pdf.page_chars
    assert chars >= sum(len(line) for line in REPORT_LINES)
    text = PdfReader(path).pages[0].extract_text()
    assert pdf.page_tokens == (text_tokens(text),)
    # An A4 page at 96 DPI is 794×1123 px: 768×1086 after scaling, 2×3 tiles, 1,105 tokens.
    assert pdf.page_sizes == ((pytest.approx(595.2756), pytest.approx(841.8898)),)
    assert pdf.tokens() == 1105 + text_tokens(text)


class WordCounter:
    """One token per whitespace-separated word."""

    name = "words"
    chars_per_token = 4.0

    def count(self, text: str) -> int:
        return len(text.split())


def test_text_is_counted_by_the_token_counter_not_by_characters_over_four() -> None:
    listing = "-rw-r--r--  1 ana staff  4096 Mar 15 09:12 report.pdf\n" * 20
    assert text_tokens(listing) == EstimateCounter("openai").count(listing)
    assert text_tokens(listing) != math.ceil(len(listing) / 4)
    assert text_tokens(listing, WordCounter()) == len(listing.split())


async def test_the_native_path_hands_the_image_itself_to_the_vision_model(
    ws: Workspace,
) -> None:
    make_text_image(ws.root / "sign.png", "HARBOUR CLOSED")
    vision = FunctionVisionModel(lambda request: "a sign saying the harbour is closed")
    models = scripted_models("sign.png", "What does the sign say?")
    models = DemoModels(main=models.main, helper=models.helper, vision=vision)

    report = await run_path("native", ws, "sign.png", "What does the sign say?", models)

    (request,) = vision.requests
    (image,) = request.media
    assert isinstance(image, ImageInput)
    assert (image.media_type, image.width, image.height) == ("image/png", 900, 200)
    assert image.data == (ws.root / "sign.png").read_bytes()
    assert report.answer == "a sign saying the harbour is closed"
    assert report.media_tokens == image.tokens() == image_tokens(900, 200)
    assert report.main_tokens == request.estimated_tokens()
    assert (report.helper_tokens, report.calls, report.ok) == (0, 1, True)


async def test_the_native_path_refuses_formats_vision_models_do_not_take(
    ws: Workspace,
) -> None:
    (ws.root / "notes.md").write_text("# notes\n", encoding="utf-8")
    models = scripted_models("notes.md", "What is in it?")

    report = await run_path("native", ws, "notes.md", "What is in it?", models)

    assert not report.ok
    assert "the native path takes images and PDFs" in report.note
    assert report.calls == 0


async def test_the_extract_path_gives_a_text_model_the_ocr_text(ws: Workspace) -> None:
    make_text_image(ws.root / "sign.png", "HARBOUR CLOSED")
    prompts: list[str] = []

    def main(request: ModelRequest) -> str:
        prompts.append(prompt_of(request))
        return "It says the harbour is closed."

    models = DemoModels(
        main=FunctionModel(main), helper=FunctionModel(main), vision=None, ocr=Tesseract()
    )
    report = await run_path("extract", ws, "sign.png", "What does the sign say?", models)

    (prompt,) = prompts
    assert prompt.startswith("What does the sign say?\n\nContent of sign.png (OCR (tesseract ")
    assert "<file>\nHARBOUR CLOSED\n</file>" in prompt
    assert report.answer == "It says the harbour is closed."
    counter = counter_for_model("function")  # the FunctionModel's name
    assert report.main_tokens == count_request(
        counter, system="", messages=[UserMessage(content=prompt)]
    )
    assert (report.helper_tokens, report.media_tokens) == (0, 0)


async def test_the_tool_path_keeps_the_file_content_out_of_the_main_context(
    ws: Workspace,
) -> None:
    make_report(ws.root / "report.pdf")
    question = "How much cargo volume?"
    models = scripted_models("report.pdf", question, Tesseract())

    report = await run_path("tool", ws, "report.pdf", question, models)

    assert report.ok, report.note
    assert report.answer == "(scripted) Cargo volume rose to 41 million tonnes."
    main = models.main
    assert isinstance(main, FunctionModel)
    main_history = " ".join(str(m) for m in main.messages_at(-1))
    assert "crane arrives" not in main_history  # the document stayed with the helper
    helper = models.helper
    assert isinstance(helper, FunctionModel)
    assert "The new crane arrives in March." in prompt_of(helper.requests[0])
    assert report.calls == 3  # main: call the tool, then answer; helper: one answer
    assert report.helper_tokens > 0


async def test_all_three_paths_run_side_by_side_on_one_pdf(ws: Workspace) -> None:
    make_report(ws.root / "report.pdf")
    models = scripted_models("report.pdf", "When does the crane arrive?", Tesseract())

    reports = await run_paths(ws, "report.pdf", "When does the crane arrive?", models)

    assert [r.path for r in reports] == ["native", "extract", "tool"]
    assert all(r.ok for r in reports)
    native, extract, tool = reports
    assert native.media_tokens > extract.total_tokens  # a page image costs more than its text
    assert extract.answer == tool.answer == "(scripted) The new crane arrives in March."


async def test_analyze_image_without_a_vision_model_answers_from_ocr_and_says_so(
    ws: Workspace,
) -> None:
    make_text_image(ws.root / "sign.png", "HARBOUR CLOSED")
    helper = FunctionModel(lambda request: "Closed.")
    tools = {t.spec.name: t for t in analysis_tools(ws, MultimodalConfig(helper=helper))}

    result = await run(tools["analyze_image"], path="sign.png", question="Open or closed?")

    assert result.success
    assert result.output.startswith("Closed.\n\n[answered by function from OCR (tesseract ")
    assert "HARBOUR CLOSED" in prompt_of(helper.requests[0])
    assert result.data["source"].startswith("OCR (")


async def test_analyze_image_with_a_vision_model_sends_the_image(ws: Workspace) -> None:
    make_text_image(ws.root / "sign.png", "HARBOUR CLOSED")
    vision = FunctionVisionModel(lambda request: "A white sign.", name="eyes")
    config = MultimodalConfig(vision=vision)
    tools = {t.spec.name: t for t in analysis_tools(ws, config)}

    result = await run(tools["analyze_image"], path="sign.png", question="What colour?")

    assert result.output.startswith(
        "A white sign.\n\n[answered by eyes from the image itself (900×200"
    )
    assert vision.requests[0].question == "What colour?"


@pytest.mark.parametrize("eyes", ["vision", "ocr"])
def test_an_image_swapped_for_a_fifo_after_it_was_resolved_is_refused_not_waited_on(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, eyes: str
) -> None:
    target = make_text_image(ws.root / "sign.png", "HARBOUR CLOSED")
    vision = FunctionVisionModel(lambda request: "A white sign.", name="eyes")
    helper = FunctionModel(lambda request: "Closed.")
    config = (
        MultimodalConfig(vision=vision)
        if eyes == "vision"
        else MultimodalConfig(helper=helper, ocr=Tesseract())
    )
    tools = {t.spec.name: t for t in analysis_tools(ws, config)}
    change_after_resolve(monkeypatch, ws, into_fifo)

    result = call_in_a_thread(tools["analyze_image"], target, path="sign.png", question="What?")

    assert result is not None, "analyze_image waited on a FIFO swapped in after resolve"
    assert not result.success and "not a regular file" in str(result.error)
    assert vision.requests == []


async def test_analyze_tools_refuse_the_wrong_kind_of_file(ws: Workspace) -> None:
    make_report(ws.root / "report.pdf")
    tools = {t.spec.name: t for t in analysis_tools(ws, MultimodalConfig())}

    result = await run(tools["analyze_image"], path="report.pdf", question="What?")

    assert not result.success
    assert result.error == "report.pdf is no image file; use analyze_document for it"


async def test_analyze_document_says_when_the_document_was_cut(ws: Workspace) -> None:
    (ws.root / "long.md").write_text("".join(f"line {n}\n" for n in range(5000)), "utf-8")
    helper = FunctionModel(lambda request: "Many lines.")
    config = MultimodalConfig(helper=helper, max_content_chars=2000)
    tools = {t.spec.name: t for t in analysis_tools(ws, config)}

    result = await run(tools["analyze_document"], path="long.md", question="How long?")

    prompt = prompt_of(helper.requests[0])
    assert "(cut: the rest did not fit the helper's budget)" in prompt
    assert "line 4999" not in prompt
    assert "cut: the rest did not fit" in result.output


def test_each_path_gives_an_agent_its_own_tools(ws: Workspace) -> None:
    config = MultimodalConfig(
        helper=FunctionModel(lambda r: "x"), transcriber=HttpTranscriber(base_url="http://h/v1")
    )

    extract = [t.spec.name for t in multimodal_tools("extract", ws, config)]
    tool = [t.spec.name for t in multimodal_tools("tool", ws, config)]

    assert extract == ["read_document", "ocr_image", "transcribe_audio"]
    assert tool == ["analyze_image", "analyze_document", "analyze_audio"]
    assert multimodal_tools("native", ws, config) == []  # the files ride on Agent.run(media=)


async def test_transcription_posts_the_file_to_the_openai_compatible_api(
    server: Server, ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.answer = lambda seen: (200, b'{"text": "the crane arrives in March"}', {})
    audio = make_wav(ws.root / "call.wav")
    monkeypatch.setenv("TEST_SPEECH_KEY", "sk-test-0123456789abcdef")
    transcriber = HttpTranscriber(
        base_url=server.base, model="whisper-1", language="en", api_key_env="TEST_SPEECH_KEY"
    )

    heard = await transcriber.transcribe(audio)

    assert heard.text == "the crane arrives in March"
    (seen,) = server.seen
    assert seen.path == "/v1/audio/transcriptions"
    assert seen.headers["authorization"] == "Bearer sk-test-0123456789abcdef"
    form = form_fields(seen)
    assert form["file"] == ("call.wav", audio.read_bytes())
    assert form["model"][1] == b"whisper-1"
    assert form["response_format"][1] == b"json"
    assert form["language"][1] == b"en"


async def test_transcription_failures_are_structured_provider_errors(
    server: Server, ws: Workspace
) -> None:
    audio = make_wav(ws.root / "call.wav")
    transcriber = HttpTranscriber(base_url=server.base)
    unreachable = HttpTranscriber(base_url=f"http://127.0.0.1:{closed_port()}/v1")
    errors: dict[str, ProviderError] = {}

    answers = {
        "rate_limit": (429, b'{"error": {"message": "slow down"}}', {"Retry-After": "7"}),
        "garbage": (200, b"<html>surprise</html>", {"Content-Type": "text/html"}),
        "no_text": (200, b'{"words": []}', {}),
    }
    for name, answer in answers.items():
        server.answer = lambda seen, answer=answer: answer
        with pytest.raises(ProviderError) as raised:
            await transcriber.transcribe(audio)
        errors[name] = raised.value
    with pytest.raises(ProviderError) as raised:
        await unreachable.transcribe(audio)
    errors["unreachable"] = raised.value

    assert errors["rate_limit"].kind == "rate_limit"
    assert errors["rate_limit"].retry_after_s == 7
    assert "slow down" in str(errors["rate_limit"])
    assert errors["garbage"].kind == "protocol"
    assert "'<html>surprise</html>'" in str(errors["garbage"])
    assert errors["no_text"].kind == "protocol"
    assert errors["unreachable"].kind == "connection"


def test_audio_swapped_for_a_fifo_after_it_was_resolved_is_refused_and_nothing_is_sent(
    server: Server, ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    audio = make_wav(ws.root / "call.wav")
    tool = transcription_tool(ws, HttpTranscriber(base_url=server.base))
    change_after_resolve(monkeypatch, ws, into_fifo)

    result = call_in_a_thread(tool, audio, path="call.wav")

    assert result is not None, "transcribe_audio waited on a FIFO swapped in after resolve"
    assert not result.success and "call.wav is not a regular file (a FIFO)" in str(result.error)
    assert server.seen == []


async def test_transcription_refuses_formats_the_api_does_not_take(ws: Workspace) -> None:
    (ws.root / "voice.aiff").write_bytes(b"FORM0000AIFF")

    with pytest.raises(ValueError, match="audio must be one of"):
        await HttpTranscriber(base_url="http://127.0.0.1:9/v1").transcribe(ws.root / "voice.aiff")


async def test_analyze_audio_answers_from_the_transcript_of_a_local_server(
    server: Server, ws: Workspace
) -> None:
    server.answer = lambda seen: (200, b'{"text": "we ship on friday"}', {})
    make_wav(ws.root / "standup.wav")
    helper = FunctionModel(lambda request: "Friday.")
    config = MultimodalConfig(helper=helper, transcriber=HttpTranscriber(base_url=server.base))
    tools = {t.spec.name: t for t in analysis_tools(ws, config)}

    result = await run(tools["analyze_audio"], path="standup.wav", question="When do we ship?")

    assert result.output.startswith("Friday.\n\n[answered by function from transcript by whisper-1")
    assert "<file>\nwe ship on friday\n</file>" in prompt_of(helper.requests[0])
    server.answer = lambda seen: (429, b"{}", {"Retry-After": "30"})
    limited = await run(tools["analyze_audio"], path="standup.wav", question="Again?")
    assert not limited.success
    assert limited.data == {"error": "rate_limit", "status": 429, "retry_after_s": 30.0}


async def test_the_openai_vision_model_sends_image_and_pdf_parts_and_reads_usage(
    server: Server, ws: Workspace
) -> None:
    answer = {
        "choices": [{"message": {"role": "assistant", "content": "Two items."}}],
        "usage": {"prompt_tokens": 812, "completion_tokens": 3},
    }
    server.answer = lambda seen: (200, json.dumps(answer).encode(), {})
    image = ImageInput.from_file(make_text_image(ws.root / "a.png", "A"), label="a.png")
    pdf = PdfInput.from_file(make_report(ws.root / "r.pdf"), label="r.pdf")
    model = OpenAIVisionModel("gpt-vision", base_url=server.base)

    reply = await model.ask(
        VisionRequest(question="How many?", media=(image, pdf), system="Be brief.")
    )

    assert reply.text == "Two items."
    assert reply.usage is not None and reply.usage.input_tokens == 812
    body = json.loads(server.seen[0].body)
    assert server.seen[0].path == "/v1/chat/completions"
    assert body["model"] == "gpt-vision"
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    text, image_part, file_part = body["messages"][1]["content"]
    assert text == {"type": "text", "text": "How many?"}
    assert image_part["image_url"] == {"url": image.data_url(), "detail": "auto"}
    assert image_part["image_url"]["url"].startswith("data:image/png;base64,")
    assert file_part == {"type": "file", "file": {"filename": "r.pdf", "file_data": pdf.data_url()}}


async def test_the_openai_vision_model_reports_a_reply_without_text_as_a_protocol_error(
    server: Server,
) -> None:
    server.answer = lambda seen: (200, b'{"choices": []}', {})

    with pytest.raises(ProviderError) as raised:
        await OpenAIVisionModel("m", base_url=server.base).ask(
            VisionRequest(question="?", media=())
        )

    assert raised.value.kind == "protocol"


async def test_a_missing_api_key_is_an_auth_error_before_any_request(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEST_VISION_KEY", raising=False)
    model = OpenAIVisionModel("m", base_url=server.base, api_key_env="TEST_VISION_KEY")

    with pytest.raises(ProviderError) as raised:
        await model.ask(VisionRequest(question="?", media=()))

    assert raised.value.kind == "auth"
    assert "set TEST_VISION_KEY" in str(raised.value)
    assert server.seen == []


def test_the_demo_prints_one_report_per_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HERON_DEMO_MODEL", "HERON_DEMO_VISION_MODEL", "HERON_DEMO_TRANSCRIBE_URL"):
        monkeypatch.delenv(name, raising=False)
    report = make_report(tmp_path / "report.pdf")

    code = run_multimodal_demo(report, "When does the crane arrive?", events="jsonl")

    rows = [json.loads(line) for line in io.StringIO(capsys.readouterr().out)]
    assert code == 0
    assert [row["path"] for row in rows] == ["native", "extract", "tool"]
    assert rows[1]["answer"] == "(scripted) The new crane arrives in March."
    assert all(row["total_tokens"] > 0 for row in rows)
