"""What the editor is shown of a call and what it sends in — `heron.acp.updates`,
`heron.acp.prompt` and `heron.acp.mcp_servers` on their own (the end-to-end tests drive the
same code through a real `heron acp`)."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
from acp import (
    audio_block,
    embedded_blob_resource,
    embedded_text_resource,
    image_block,
    resource_block,
    text_block,
)
from acp.schema import EnvVariable, HttpHeader, HttpMcpServer, McpServerStdio, SseMcpServer

from heron.acp.mcp_servers import editor_servers
from heron.acp.prompt import MEDIA_DIR, user_prompt
from heron.acp.updates import call_locations, tool_kind, tool_title
from heron.messages import INLINE_MEDIA_LIMIT
from heron.tools.definition import ToolAnnotations, ToolSpec
from support.swaps import returns_promptly


def _spec(name: str, owner: str = "user", **annotations: bool) -> ToolSpec:
    return ToolSpec(
        name=name,
        description="",
        parameters={"type": "object"},
        annotations=ToolAnnotations(**annotations),
        owner=owner,
    )


@pytest.mark.parametrize(
    ("name", "owner", "annotations", "kind"),
    [
        ("grep_files", "builtin", {}, "search"),
        ("shell", "builtin", {}, "execute"),
        ("update_plan", "builtin", {}, "think"),
        ("lookup_customer", "user", {"read_only": True}, "search"),
        ("weather_now", "user", {"read_only": True, "open_world": True}, "fetch"),
        ("notes", "user", {"read_only": True}, "read"),
        ("remove_user", "user", {"destructive": True}, "delete"),
        ("run_query", "user", {}, "execute"),
        ("save_note", "user", {}, "edit"),
        ("wipe", "user", {"destructive": True}, "edit"),
        ("ping", "user", {}, "other"),
        # A user's tool named like a built-in is judged by its annotations, not its name.
        ("shell", "user", {"read_only": True}, "read"),
    ],
)
def test_a_calls_kind_comes_from_heron_s_names_then_the_tools_annotations(
    name: str, owner: str, annotations: dict[str, bool], kind: str
) -> None:
    assert tool_kind(name, _spec(name, owner, **annotations)) == kind


def test_a_tool_heron_does_not_know_is_other() -> None:
    assert tool_kind("read_file", None) == "other"


def test_the_title_is_one_bounded_redacted_line() -> None:
    assert tool_title("read_file", {"path": "notes.txt"}) == "read_file: path: notes.txt"
    long = tool_title("write_file", {"path": "a.txt", "content": "x" * 500})
    assert len(long) <= 160 and "\n" not in long


def test_file_tools_point_at_their_paths_in_the_workspace(tmp_path: Path) -> None:
    found = call_locations("move", {"src": "a.txt", "dst": "sub/b.txt", "n": 3}, tmp_path)
    assert [loc.path for loc in found] == [str(tmp_path / "a.txt"), str(tmp_path / "sub/b.txt")]
    assert call_locations("execute", {"path": "a.txt"}, tmp_path) == []
    assert call_locations("read", {"path": "bad\x00name"}, tmp_path) == []


def test_attachments_become_text_the_model_can_read_and_notes_for_the_rest(
    tmp_path: Path,
) -> None:
    fenced = "print('a')\n```\nstill code\n"
    blocks = [
        text_block("look"),
        resource_block(embedded_text_resource((tmp_path / "src" / "a.md").as_uri(), fenced)),
        resource_block(
            embedded_blob_resource("file:///elsewhere/x.zip", "AAAA", mime_type="application/zip")
        ),
        audio_block("AAAA", "audio/wav"),
        resource_block(embedded_text_resource("https://example.com/page", "hello")),
    ]

    prompt = user_prompt(blocks, workspace=tmp_path, state_dir=tmp_path / "state")

    assert prompt.text == (
        "look\n\n"
        # The attachment holds a fence of its own: heron's is one backtick longer.
        "Attached file src/a.md:\n````\nprint('a')\n```\nstill code\n````\n\n"
        "[attached file /elsewhere/x.zip (application/zip): binary content not included]\n\n"
        "[audio was attached; heron's ACP agent does not read audio]\n\n"
        "Attached https://example.com/page:\n```\nhello\n```"
    )
    assert prompt.media == ()


def test_an_attachment_of_backticks_is_fenced_in_one_pass(tmp_path: Path) -> None:
    # Growing the fence until the text lacks it searched the text once per backtick: a
    # million of them held the editor's agent for hours.
    text = "a ``` b " + "`" * 1_000_000 + " c"
    block = resource_block(embedded_text_resource((tmp_path / "x.md").as_uri(), text))
    prompt = returns_promptly(
        lambda: user_prompt([block], workspace=tmp_path, state_dir=tmp_path / "state")
    )
    fence = "`" * 1_000_001
    assert prompt.text == f"Attached file x.md:\n{fence}\n{text}\n{fence}"


def test_images_and_pdfs_travel_as_media_inline_or_stored_once_by_their_hash(
    tmp_path: Path,
) -> None:
    small, large = b"\x89PNG small", b"%PDF-" + b"x" * (INLINE_MEDIA_LIMIT + 1)
    pdf = embedded_blob_resource(
        (tmp_path / "docs" / "spec.pdf").as_uri(),
        base64.b64encode(large).decode(),
        mime_type="application/pdf",
    )
    blocks = [
        image_block(base64.b64encode(small).decode(), "image/png"),
        resource_block(pdf),
        resource_block(pdf),  # the same file twice: stored once
    ]

    prompt = user_prompt(blocks, workspace=tmp_path, state_dir=tmp_path / "state")

    image, doc, again = prompt.media
    assert (image.kind, image.name, image.mime_type) == ("image", "image-1.png", "image/png")
    assert base64.b64decode(image.base64()) == small and image.ref is None
    assert (doc.kind, doc.name, doc.data) == ("pdf", "docs/spec.pdf", None)
    assert (
        doc.ref
        == again.ref
        == str(tmp_path / "state" / MEDIA_DIR / f"{hashlib.sha256(large).hexdigest()}.pdf")
    )
    assert Path(doc.ref).read_bytes() == large
    assert [p.name for p in (tmp_path / "state" / MEDIA_DIR).iterdir()] == [Path(doc.ref).name]


def test_media_that_is_not_base64_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not valid base64"):
        user_prompt(
            [image_block("not base64!", "image/png")], workspace=tmp_path, state_dir=tmp_path
        )


def test_the_editors_mcp_servers_become_heron_entries_or_are_left_out_with_the_reason(
    tmp_path: Path,
) -> None:
    said: list[str] = []
    servers = [
        McpServerStdio(
            name="notes",
            command="notes-mcp",
            args=["--ro"],
            env=[EnvVariable(name="TOKEN", value="t")],
        ),
        HttpMcpServer(
            type="http",
            name="tickets",
            url="https://mcp.example.com/mcp",
            headers=[HttpHeader(name="Authorization", value="Bearer x")],
        ),
        McpServerStdio(name="notes", command="other", args=[], env=[]),
        McpServerStdio(name="github", command="gh-mcp", args=[], env=[]),
        McpServerStdio(name="bad name", command="x", args=[], env=[]),
        SseMcpServer(type="sse", name="old", url="https://old.example.com/sse", headers=[]),
    ]

    found = editor_servers(servers, workspace=tmp_path, configured={"github"}, log=said.append)

    assert list(found) == ["notes", "tickets"]
    notes, tickets = found["notes"], found["tickets"]
    assert (notes.command, notes.args, notes.env, notes.cwd) == (
        "notes-mcp",
        ["--ro"],
        {"TOKEN": "t"},
        str(tmp_path),
    )
    assert (tickets.url, tickets.headers) == (
        "https://mcp.example.com/mcp",
        {"Authorization": "Bearer x"},
    )
    assert len(said) == 4
    assert "named twice" in said[0]
    assert "heron.toml has one of that name" in said[1]
    assert "'bad name' of the editor is left out" in said[2]
    assert "heron connects stdio and HTTP servers" in said[3]
    assert not any("Bearer" in line or "TOKEN" in line for line in said)
