"""Workspace file tools: reading, listing, searching, writing, editing, moving and deleting."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from heron import Agent, ScriptedModel, Tool, ToolContext, ToolResult
from heron.messages import ToolResultMessage
from heron.safety.workspace import MAX_READ_BYTES, Workspace
from heron.tools.definition import ToolArgumentsError
from heron.toolsets import files
from heron.toolsets.documents import DocumentLimits, document_tools
from heron.toolsets.files import file_tools
from heron.toolsets.lint import Linters
from support.engine import Events, call, calls_turn
from support.swaps import call_in_a_thread, change_after_first_look, into_fifo

NAMES = [
    "read_file",
    "list_dir",
    "find_files",
    "grep_files",
    "write_file",
    "edit_file",
    "move_path",
    "copy_path",
    "delete_path",
]
# Curly quotes, a no-break space, a tab, CRLF endings and no final newline, as raw bytes.
TRICKY = "She said \u201chi\u201d\u00a0\u2014 it\u2019s\tfine\r\nsecond line\r\nlast".encode()


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("secret\n")
    return Workspace(root)


@pytest.fixture
def tools(ws: Workspace) -> dict[str, Tool]:
    return {t.spec.name: t for t in file_tools(ws, linters=Linters(enabled=False))}


async def run(tool: Tool, **arguments: Any) -> ToolResult:
    return await tool.execute(tool.validate(arguments), ToolContext(call_id="c1", turn_id="t1"))


def test_the_tool_set_has_fixed_names_parameters_and_annotations(
    tools: dict[str, Tool],
) -> None:
    assert list(tools) == NAMES
    params = {name: list(t.spec.parameters["properties"]) for name, t in tools.items()}
    assert params["read_file"] == ["path", "offset", "limit"]
    assert params["grep_files"] == ["pattern", "path", "cursor"]
    assert params["edit_file"] == ["path", "old_string", "new_string"]
    assert params["move_path"] == params["copy_path"] == ["src", "dst"]
    for name in NAMES[:4]:
        ann = tools[name].spec.annotations
        assert ann.read_only and ann.idempotent, name
    assert tools["delete_path"].spec.annotations.destructive
    assert not any(tools[name].spec.annotations.read_only for name in NAMES[4:])
    assert all(t.spec.owner == "builtin" for t in tools.values())
    assert "does NOT search file content" in tools["find_files"].spec.description
    assert all("Examples:" in t.spec.description for t in tools.values())


async def test_read_shows_line_numbers_and_says_explicitly_how_to_continue(
    ws: Workspace, tools: dict[str, Tool]
) -> None:
    (ws.root / "big.txt").write_text("".join(f"row {n}\n" for n in range(1, 5001)))
    first = await run(tools["read_file"], path="big.txt")
    assert first.success
    lines = first.output.splitlines()
    assert lines[0] == "big.txt — lines 1–200 of 5000 shown; pass offset=201 to continue"
    assert lines[1] == "     1\trow 1" and lines[-1] == "   200\trow 200"
    assert first.data["next_offset"] == 201
    last = await run(tools["read_file"], path="big.txt", offset=4999, limit=10)
    assert last.output.splitlines()[0] == "big.txt — lines 4999–5000 of 5000 shown (end of file)"
    past = await run(tools["read_file"], path="big.txt", offset=5001)
    assert not past.success and past.error == "offset 5001 is past the end: big.txt has 5000 lines"
    with pytest.raises(ToolArgumentsError):
        tools["read_file"].validate({"path": "big.txt", "limit": 5000})


async def test_read_names_crlf_missing_newline_and_look_alike_characters(
    ws: Workspace, tools: dict[str, Tool]
) -> None:
    (ws.root / "q.txt").write_bytes(TRICKY)
    result = await run(tools["read_file"], path="q.txt")
    assert result.success
    assert "line endings: CRLF" in result.output
    assert "no newline at end of file" in result.output
    assert "U+201C LEFT DOUBLE QUOTATION MARK" in result.output
    assert "U+00A0 NO-BREAK SPACE" in result.output
    assert "     1\tShe said \u201chi\u201d\u00a0\u2014 it\u2019s\tfine" in result.output


async def test_read_cuts_very_long_lines_with_a_visible_marker(
    ws: Workspace, tools: dict[str, Tool]
) -> None:
    (ws.root / "min.js").write_text("x" * 2500 + "\n")
    result = await run(tools["read_file"], path="min.js")
    assert "[… line cut here: 500 more characters]" in result.output
    assert "1 line(s) longer than 2,000 characters were cut" in result.output


async def test_binary_files_are_refused_with_size_and_type(
    ws: Workspace, tools: dict[str, Tool]
) -> None:
    (ws.root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    result = await run(tools["read_file"], path="logo.png")
    assert not result.success
    assert result.error == (
        "logo.png is a binary file (108 bytes, looks like PNG image); "
        "read_file works on UTF-8 text only"
    )
    assert result.data["error"] == "binary_file"


@pytest.mark.parametrize("reader", ["read_file", "read_document"])
def test_a_file_swapped_for_a_fifo_after_the_check_is_refused_not_waited_on(
    ws: Workspace, tools: dict[str, Tool], monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    target = ws.root / "n.txt"
    target.write_text("notes\n")
    change_after_first_look(monkeypatch, target, into_fifo)
    result = call_in_a_thread(_reader(ws, tools, reader), target, path="n.txt")
    assert result is not None, f"{reader} waited on a FIFO swapped in after its check"
    assert not result.success and result.data["error"] == "not_regular_file"


@pytest.mark.parametrize("reader", ["read_file", "read_document"])
def test_a_file_grown_past_the_limit_after_the_check_is_refused_unread(
    ws: Workspace, tools: dict[str, Tool], monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    target = ws.root / "n.txt"
    target.write_text("notes\n")
    with_more = max(MAX_READ_BYTES, DocumentLimits().max_file_bytes) + 2**20  # sparse: no disk
    change_after_first_look(monkeypatch, target, lambda t: os.truncate(t, with_more))
    result = call_in_a_thread(_reader(ws, tools, reader), path="n.txt")
    assert result is not None and not result.success
    assert result.data["error"] == "too_large", result.error


def _reader(ws: Workspace, tools: dict[str, Tool], name: str) -> Tool:
    return {**tools, **{t.spec.name: t for t in document_tools(ws)}}[name]


async def test_non_utf8_text_is_reported_never_replaced(
    ws: Workspace, tools: dict[str, Tool]
) -> None:
    (ws.root / "latin1.txt").write_bytes(b"ok\ncaf\xe9\n")
    result = await run(tools["read_file"], path="latin1.txt")
    assert not result.success and result.data["error"] == "not_utf8"
    assert "byte(s) e9 at offset 6 (line 2)" in str(result.error)
    assert "\ufffd" not in str(result.error)


@pytest.mark.parametrize(
    ("tool", "arguments", "reason"),
    [
        ("read_file", {"path": "../../etc/passwd"}, "traversal"),
        ("read_file", {"path": "/etc/passwd"}, "absolute_path"),
        ("write_file", {"path": "/tmp/heron-owned.txt", "content": "x"}, "absolute_path"),
        ("list_dir", {"path": ".."}, "traversal"),
        ("grep_files", {"pattern": "x", "path": "/etc"}, "absolute_path"),
        ("copy_path", {"src": "src", "dst": "../copied"}, "traversal"),
    ],
)
async def test_paths_leaving_the_workspace_are_refused_with_a_structured_error(
    tools: dict[str, Tool], tool: str, arguments: dict[str, Any], reason: str
) -> None:
    result = await run(tools[tool], **arguments)
    assert not result.success
    assert result.data["error"] == reason


async def test_a_symlink_escape_is_refused_for_reads_and_writes(
    ws: Workspace, tools: dict[str, Tool]
) -> None:
    outside = ws.root.parent / "outside"
    (ws.root / "leak.txt").symlink_to(outside / "secret.txt")
    (ws.root / "door").symlink_to(outside, target_is_directory=True)
    read = await run(tools["read_file"], path="leak.txt")
    write = await run(tools["write_file"], path="door/planted.txt", content="x")
    overwrite = await run(tools["write_file"], path="leak.txt", content="pwned")
    assert [r.data["error"] for r in (read, write, overwrite)] == ["symlink_escape"] * 3
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "secret\n"


async def test_list_dir_returns_structured_entries_and_states_its_cap(
    ws: Workspace, tools: dict[str, Tool], monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws.root / "a.txt").write_text("hello")
    (ws.root / "b.txt").write_text("")
    (ws.root / "link").symlink_to(ws.root / "a.txt")
    result = await run(tools["list_dir"], path=".")
    assert result.data["entries"] == [
        {"name": "a.txt", "type": "file", "size": 5},
        {"name": "b.txt", "type": "file", "size": 0},
        {"name": "link", "type": "symlink", "size": None},
        {"name": "src", "type": "dir", "size": None},
    ]
    assert result.output.splitlines() == [
        ".: 4 entries",
        "a.txt  (5 bytes)",
        "b.txt  (0 bytes)",
        "link  (symlink)",
        "src/",
    ]
    monkeypatch.setattr(files, "MAX_LIST_ENTRIES", 2)
    capped = await run(tools["list_dir"], path=".")
    assert capped.output.splitlines()[0] == (
        ".: 4 entries, the first 2 (by name) shown; narrow down with find_files"
    )
    assert capped.data["total"] == 4 and len(capped.data["entries"]) == 2


async def test_find_files_matches_names_only_and_reports_totals_and_skips(
    ws: Workspace, tools: dict[str, Tool], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("src/a.py", "src/b.py", "src/c.py", "notes.md"):
        (ws.root / name).write_text("print('needle')\n")
    (ws.root / ".git").mkdir()
    (ws.root / ".git" / "hook.py").write_text("")
    monkeypatch.setattr(files, "MAX_FIND_RESULTS", 2)
    result = await run(tools["find_files"], pattern="*.py")
    assert result.data["total"] == 3
    assert [m["path"] for m in result.data["matches"]] == ["src/a.py", "src/b.py"]
    assert "3 files named '*.py' under .; the first 2 shown" in result.output
    assert "[not searched: .git; pass one as path to search inside it]" in result.output
    by_content = await run(tools["find_files"], pattern="needle")
    assert by_content.data["total"] == 0
    slash = await run(tools["find_files"], pattern="src/*.py")
    assert not slash.success and slash.data["error"] == "invalid_pattern"


async def test_grep_pages_structured_matches_with_a_cursor_and_total(
    ws: Workspace, tools: dict[str, Tool], monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws.root / "src" / "a.py").write_text("x = 1\nresult = compute()\nprint(result)\n")
    (ws.root / "src" / "b.py").write_bytes(b"result = 2\r\n")
    (ws.root / "blob.bin").write_bytes(b"result\x00\x01")
    monkeypatch.setattr(files, "GREP_PAGE_SIZE", 2)
    first = await run(tools["grep_files"], pattern=r"result\b")
    assert first.data["total"] == 3
    assert first.data["matches"] == [
        {"path": "src/a.py", "line": 2, "text": "result = compute()"},
        {"path": "src/a.py", "line": 3, "text": "print(result)"},
    ]
    assert first.data["skipped"]["binary_file"] == 1
    assert "[files not searched: 1 binary file]" in first.output
    cursor = first.data["next_cursor"]
    assert f"pass cursor={cursor!r} for the next page" in first.output
    second = await run(tools["grep_files"], pattern=r"result\b", cursor=cursor)
    assert second.data["matches"] == [{"path": "src/b.py", "line": 1, "text": "result = 2"}]
    assert second.data["next_cursor"] is None
    foreign = await run(tools["grep_files"], pattern="other", cursor=cursor)
    assert not foreign.success and foreign.data["error"] == "invalid_cursor"


async def test_an_invalid_regex_is_a_clear_error(tools: dict[str, Tool]) -> None:
    result = await run(tools["grep_files"], pattern="def (")
    assert not result.success
    assert result.error == "invalid regular expression 'def (': missing ) at 'def ('"


async def test_a_pattern_that_would_backtrack_for_hours_answers_at_once(
    tools: dict[str, Tool], ws: Workspace
) -> None:
    # Python's re takes about 2**n steps for `(a+)+$` on n a's and a '!': 40 is days.
    (ws.root / "trap.txt").write_text("a" * 40 + "!\n" + "a" * 40 + "\n")
    result = await run(tools["grep_files"], pattern=r"(a+)+$")
    assert result.success, result.error
    assert [m["line"] for m in result.data["matches"]] == [2]


async def test_lookaround_and_backreferences_are_refused_with_the_reason(
    tools: dict[str, Tool],
) -> None:
    for pattern in (r"foo(?=bar)", r"(?<!x)y", r"(a)\1"):
        result = await run(tools["grep_files"], pattern=pattern)
        assert not result.success and result.data["error"] == "invalid_regex"
        assert "linear time" in (result.error or "") and "backreferences" in (result.error or "")


async def test_write_and_edit_keep_every_byte_exactly(
    ws: Workspace, tools: dict[str, Tool]
) -> None:
    text = TRICKY.decode()
    written = await run(tools["write_file"], path="docs/q.txt", content=text)
    assert written.success
    assert written.output.splitlines()[:2] == [
        f"wrote {len(TRICKY)} bytes to docs/q.txt (new file)",
        "created directories: docs",
    ]
    assert (ws.root / "docs" / "q.txt").read_bytes() == TRICKY
    edited = await run(
        tools["edit_file"],
        path="docs/q.txt",
        old_string="\u201chi\u201d\u00a0\u2014",
        new_string="\u2018bye\u2019\u00a0\u2013",
    )
    assert edited.success, edited.error
    assert (ws.root / "docs" / "q.txt").read_bytes() == TRICKY.replace(
        "\u201chi\u201d\u00a0\u2014".encode(), "\u2018bye\u2019\u00a0\u2013".encode()
    )


async def test_edit_with_straight_quotes_does_not_match_curly_ones(
    ws: Workspace, tools: dict[str, Tool]
) -> None:
    (ws.root / "q.txt").write_bytes(TRICKY)
    result = await run(tools["edit_file"], path="q.txt", old_string='"hi"', new_string='"yo"')
    assert not result.success and result.data["error"] == "no_match"
    assert "curly and straight quotes" in str(result.error)
    crlf = await run(tools["edit_file"], path="q.txt", old_string="fine\nsecond", new_string="x")
    assert "CRLF line endings" in str(crlf.error)
    assert (ws.root / "q.txt").read_bytes() == TRICKY


async def test_edit_matching_twice_fails_with_the_count_and_changes_nothing(
    ws: Workspace, tools: dict[str, Tool]
) -> None:
    (ws.root / "a.py").write_text("x = 1\ny = 2\nx = 1\n")
    result = await run(tools["edit_file"], path="a.py", old_string="x = 1", new_string="x = 3")
    assert not result.success
    assert result.error == (
        "old_string matches 2 times in a.py (lines 1, 3); include more surrounding text so "
        "that it matches exactly once"
    )
    assert result.data["count"] == 2
    assert (ws.root / "a.py").read_text() == "x = 1\ny = 2\nx = 1\n"
    overlapping = await run(tools["edit_file"], path="a.py", old_string="\n", new_string="")
    assert overlapping.data["count"] == 3


async def test_oversize_content_is_refused_and_nothing_is_written(
    ws: Workspace, tools: dict[str, Tool]
) -> None:
    big = "x" * (5 * 1024 * 1024 + 1)
    result = await run(tools["write_file"], path="big.txt", content=big)
    assert not result.success and result.data["error"] == "too_large"
    assert "the limit is 5 MB" in str(result.error)
    assert not (ws.root / "big.txt").exists()


async def test_a_write_under_a_file_fails_and_creates_nothing(
    ws: Workspace, tools: dict[str, Tool]
) -> None:
    (ws.root / "notes.txt").write_text("keep")
    result = await run(tools["write_file"], path="notes.txt/deeper/x.md", content="x")
    assert not result.success and result.data["error"] == "parent_not_directory"
    assert result.error == "cannot create 'notes.txt/deeper/x.md': notes.txt is not a directory"
    assert (ws.root / "notes.txt").read_text() == "keep"
    on_dir = await run(tools["write_file"], path="src", content="x")
    assert on_dir.data["error"] == "is_directory"


async def test_move_and_copy_never_overwrite_and_refuse_moving_into_themselves(
    ws: Workspace, tools: dict[str, Tool]
) -> None:
    (ws.root / "src" / "a.py").write_text("a\n")
    (ws.root / "b.py").write_text("b\n")
    clash = await run(tools["move_path"], src="b.py", dst="src/a.py")
    assert clash.data["error"] == "destination_exists"
    assert (ws.root / "src" / "a.py").read_text() == "a\n"
    inside = await run(tools["copy_path"], src="src", dst="src/nested")
    assert inside.data["error"] == "into_itself"
    copied = await run(tools["copy_path"], src="src", dst="backup/src")
    assert copied.output == "copied directory src → backup/src"
    assert (ws.root / "backup" / "src" / "a.py").read_text() == "a\n"
    moved = await run(tools["move_path"], src="b.py", dst="lib/b.py")
    assert moved.output == "moved file b.py → lib/b.py"
    assert not (ws.root / "b.py").exists() and (ws.root / "lib" / "b.py").read_text() == "b\n"


async def test_delete_removes_links_not_their_targets_and_never_the_root(
    ws: Workspace, tools: dict[str, Tool]
) -> None:
    (ws.root / "src" / "a.py").write_text("a\n")
    (ws.root / "alias.py").symlink_to(ws.root / "src" / "a.py")
    link = await run(tools["delete_path"], path="alias.py")
    assert link.output == "deleted symlink alias.py (its target was left alone)"
    assert (ws.root / "src" / "a.py").exists()
    root = await run(tools["delete_path"], path=".")
    assert root.data["error"] == "workspace_root"
    tree = await run(tools["delete_path"], path="src")
    assert tree.output == "deleted directory src (1 file, 2 bytes)"
    assert list(ws.root.iterdir()) == []


async def test_delete_needs_approval_under_supervised_autonomy(
    ws: Workspace, tools: dict[str, Tool], events: Events
) -> None:
    (ws.root / "keep.txt").write_text("keep")
    model = ScriptedModel([calls_turn(call("delete_path", "c1", path="keep.txt")), {"text": "ok"}])
    agent = Agent(model=model, tools=list(tools.values()), autonomy="supervised")
    await agent.run("delete it", sink=events)
    assert [r.call_id for r in events.of("approval_request")] == ["c1"]
    assert events.results()["c1"].status == "denied"
    assert (ws.root / "keep.txt").read_text() == "keep"


async def test_an_agent_reads_edits_and_rereads_a_file_byte_for_byte(
    ws: Workspace, tools: dict[str, Tool], events: Events
) -> None:
    (ws.root / "letter.txt").write_bytes(TRICKY)
    old, new = "\u201chi\u201d\u00a0\u2014 it\u2019s\tfine\r\nsecond", "\u201chello\u201d\r\n2nd"
    model = ScriptedModel(
        [
            calls_turn(call("read_file", "r1", path="letter.txt")),
            calls_turn(call("edit_file", "e1", path="letter.txt", old_string=old, new_string=new)),
            calls_turn(call("read_file", "r2", path="letter.txt")),
            {"text": "done"},
        ]
    )
    agent = Agent(model=model, tools=list(tools.values()), autonomy="full", workspace=ws.root)
    result = await agent.run("fix the greeting", sink=events)
    assert result.ok
    expected = TRICKY.replace(old.encode(), new.encode())
    assert expected == "She said \u201chello\u201d\r\n2nd line\r\nlast".encode()
    assert (ws.root / "letter.txt").read_bytes() == expected
    seen = {m.call_id: m.content for m in result.history if isinstance(m, ToolResultMessage)}
    assert "     1\tShe said \u201chi\u201d\u00a0\u2014 it\u2019s\tfine" in seen["r1"]
    assert "edited letter.txt: replaced the one match at line 1" in seen["e1"]
    assert "     1\tShe said \u201chello\u201d\n     2\t2nd line\n     3\tlast" in seen["r2"]
    events.assert_one_pair_per_call()


async def test_moving_a_link_moves_the_link_and_a_link_loop_is_a_clear_error(
    ws: Workspace, tools: dict[str, Tool]
) -> None:
    (ws.root / "src" / "a.py").write_text("a\n")
    (ws.root / "alias.py").symlink_to(ws.root / "src" / "a.py")
    moved = await run(tools["move_path"], src="alias.py", dst="lib/alias.py")
    assert moved.output == "moved symbolic link alias.py → lib/alias.py"
    assert (ws.root / "lib" / "alias.py").is_symlink()
    (ws.root / "loop").symlink_to(ws.root / "loop")
    looped = await run(tools["read_file"], path="loop")
    assert not looped.success
    assert looped.error == "'loop' is a broken symbolic link (its target is missing or loops)"
