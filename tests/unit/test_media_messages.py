"""Images and PDFs on user messages: the history model, `Agent.run(media=)`, and how the OpenAI
and Anthropic adapters put them on the wire (against local protocol servers)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from heron import Agent
from heron.messages import MediaPart, Message, UserMessage
from heron.models.anthropic_messages import AnthropicMessagesModel
from heron.models.base import ModelRequest
from heron.models.openai_chat import OpenAIChatModel
from heron.models.scripted import FunctionModel
from heron.models.sdk_adapter import default_vision
from support.protocol_servers import (
    ProtocolServer,
    Reply,
    Text,
    anthropic_stream,
    ask,
    collect,
    openai_stream,
)

KEY = "test-key-0123456789abcdef"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
PDF = b"%PDF-1.4\n%fake\n"


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    png, pdf = tmp_path / "chart.png", tmp_path / "report.pdf"
    png.write_bytes(PNG)
    pdf.write_bytes(PDF)
    return png, pdf


def _message(files: tuple[Path, Path]) -> UserMessage:
    media = tuple(MediaPart.from_file(f) for f in files)
    return UserMessage(content="What do these show?", media=media)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_openai_sends_images_as_image_url_parts_and_pdfs_as_file_parts(
    protocol_server: ProtocolServer, files: tuple[Path, Path]
) -> None:
    protocol_server.queue(Reply(events=openai_stream(text=["ok"])))
    model = OpenAIChatModel("gpt-4o-mini", api_key=KEY, base_url=protocol_server.url)
    try:
        await collect(model, ask([_message(files)]))
    finally:
        await model.aclose()

    user = protocol_server.requests[0].body["messages"][1]
    assert user["content"] == [
        {"type": "text", "text": "What do these show?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{_b64(PNG)}"}},
        {
            "type": "file",
            "file": {
                "filename": "report.pdf",
                "file_data": f"data:application/pdf;base64,{_b64(PDF)}",
            },
        },
    ]


async def test_anthropic_sends_image_and_document_blocks_before_the_text(
    protocol_server: ProtocolServer, files: tuple[Path, Path]
) -> None:
    protocol_server.queue(Reply(events=anthropic_stream(Text(pieces=["ok"]))))
    model = AnthropicMessagesModel("claude-test", api_key=KEY, base_url=protocol_server.url)
    try:
        await collect(model, ask([_message(files)]))
    finally:
        await model.aclose()

    user = protocol_server.requests[0].body["messages"][0]
    assert user["content"] == [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": _b64(PNG)},
        },
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": _b64(PDF)},
        },
        {"type": "text", "text": "What do these show?"},
    ]


async def test_a_model_without_vision_gets_a_labelled_placeholder_instead_of_the_file(
    protocol_server: ProtocolServer, files: tuple[Path, Path]
) -> None:
    protocol_server.queue(Reply(events=openai_stream(text=["ok"])))
    protocol_server.queue(Reply(events=anthropic_stream(Text(pieces=["ok"]))))
    openai = OpenAIChatModel("llama3", api_key=KEY, base_url=protocol_server.url)
    claude = AnthropicMessagesModel(
        "claude-x", api_key=KEY, base_url=protocol_server.url, vision=False
    )
    try:
        await collect(openai, ask([_message(files)]))
        await collect(claude, ask([_message(files)]))
    finally:
        await openai.aclose()
        await claude.aclose()

    expected = (
        "What do these show?\n"
        "[image chart.png not shown: this model has no vision input]\n"
        "[pdf report.pdf not shown: this model has no vision input]"
    )
    assert protocol_server.requests[0].body["messages"][1]["content"] == expected
    assert protocol_server.requests[1].body["messages"][0]["content"] == [
        {"type": "text", "text": expected}
    ]


def test_vision_defaults_follow_the_model_name() -> None:
    assert [default_vision(m) for m in ("gpt-4o", "gpt-4.1-mini", "claude-3-5-sonnet")] == [
        True,
        True,
        True,
    ]
    assert not default_vision("llama3.1:8b")


async def test_agent_run_attaches_media_to_the_user_message_the_model_sees(
    files: tuple[Path, Path],
) -> None:
    seen: list[Message] = []

    def answer(request: ModelRequest) -> str:
        seen.append(request.messages[-1])
        return "a bar chart"

    agent = Agent(model=FunctionModel(answer))
    result = await agent.run("What is this?", media=[files[0]])

    assert result.text == "a bar chart"
    user = seen[0]
    assert isinstance(user, UserMessage)
    assert [(m.kind, m.mime_type, m.name) for m in user.media] == [
        ("image", "image/png", "chart.png")
    ]
    assert base64.b64decode(user.media[0].base64()) == PNG


def test_history_with_media_round_trips_through_json(files: tuple[Path, Path]) -> None:
    adapter: TypeAdapter[Message] = TypeAdapter(Message)
    message = _message(files)

    restored = adapter.validate_json(adapter.dump_json(message))

    assert restored == message


def test_large_files_are_referenced_not_inlined_and_a_changed_file_is_refused(
    files: tuple[Path, Path],
) -> None:
    png = files[0]
    part = MediaPart.from_file(png, inline_limit=8)

    assert part.data is None
    assert part.ref == str(png.resolve())
    assert part.base64() == _b64(PNG)
    png.write_bytes(PNG + b"edited")
    with pytest.raises(ValueError, match="changed since it was attached"):
        part.base64()


def test_only_images_and_pdfs_can_be_attached(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")

    with pytest.raises(ValueError, match="only images and PDFs"):
        MediaPart.from_file(notes)
