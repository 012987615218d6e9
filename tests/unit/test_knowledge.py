"""KnowledgeBase: chunking with line ranges, BM25 ranking, the incremental index, the tool."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from heron import ToolContext, ToolResult
from heron.toolsets import knowledge
from heron.toolsets.knowledge import KnowledgeBase, KnowledgeError, chunk_document
from heron.toolsets.search import knowledge_tools
from support.swaps import call_in_a_thread, change_after_first_look, into_fifo

DEPLOY = """# Deploying

Deploys run from the main branch every Tuesday.

## Rollback

To roll back a release, run `make rollback` and tell the on-call engineer.
The rollback takes about five minutes.

## Monitoring

Dashboards live in Grafana.
"""
VPN = "VPN setup\n=========\n\nRenew the VPN certificate every ninety days.\n"
MENU = "<html><body>\n<h1>Canteen</h1>\n<p>Soup on Monday,\nfish on Friday.</p>\n</body></html>\n"


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    (folder / "ops").mkdir(parents=True)
    (folder / "ops" / "deploy.md").write_text(DEPLOY, encoding="utf-8")
    (folder / "vpn.rst").write_text(VPN, encoding="utf-8")
    (folder / "menu.html").write_text(MENU, encoding="utf-8")
    (folder / "notes.txt").write_text("Printer on floor two jams often.\n", encoding="utf-8")
    (folder / "image.png").write_bytes(b"\x89PNG rollback")  # not a document type
    (folder / ".hidden.md").write_text("rollback secret\n", encoding="utf-8")
    return folder


def kb_for(docs: Path) -> KnowledgeBase:
    return KnowledgeBase(docs, docs.parent / "state")


def test_markdown_is_chunked_at_headings_with_exact_line_ranges() -> None:
    chunks = chunk_document("deploy.md", DEPLOY)
    lines = DEPLOY.splitlines()
    assert [(c.start_line, c.end_line, c.heading) for c in chunks] == [
        (1, 3, "Deploying"),
        (5, 8, "Deploying > Rollback"),
        (10, 12, "Deploying > Monitoring"),
    ]
    for chunk in chunks:
        assert chunk.text == "\n".join(lines[chunk.start_line - 1 : chunk.end_line])


def test_headings_inside_code_fences_do_not_split_markdown() -> None:
    text = "# Top\n\n```sh\n# a shell comment\n```\n"
    assert [c.heading for c in chunk_document("a.md", text)] == ["Top"]


def test_rst_titles_and_html_headings_become_chunk_headings() -> None:
    rst = chunk_document("a.rst", VPN + "\nDetails\n-------\n\nMore.\n")
    assert [(c.heading, c.start_line) for c in rst] == [
        ("VPN setup", 1),
        ("VPN setup > Details", 6),
    ]
    (html,) = chunk_document("menu.html", MENU)
    assert (html.heading, html.start_line, html.end_line) == ("Canteen", 2, 4)
    assert html.text == "Canteen\nSoup on Monday,\nfish on Friday."


def test_long_sections_split_at_paragraph_breaks() -> None:
    text = "\n\n".join("\n".join(f"para {p} line {n}" for n in range(4)) for p in range(6))
    chunks = chunk_document("long.txt", text, max_lines=8)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 9), (11, 19), (21, 29)]


def test_search_ranks_the_relevant_chunk_first_and_cites_it(docs: Path) -> None:
    found = kb_for(docs).search("rollback release")
    assert found.total == 1 and found.files == 4
    (hit,) = found.hits
    assert (hit.chunk.path, hit.chunk.start_line, hit.chunk.end_line) == ("ops/deploy.md", 5, 8)
    assert hit.score > 0 and "roll back a release" in hit.snippet


def test_a_query_of_only_common_words_is_refused(docs: Path) -> None:
    with pytest.raises(KnowledgeError, match="no searchable words"):
        kb_for(docs).search("the and of")


def test_a_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KnowledgeError, match="does not exist"):
        KnowledgeBase(tmp_path / "absent", tmp_path / "state").search("anything")


def test_only_changed_files_are_read_and_chunked_again(
    docs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chunked: list[str] = []
    real = knowledge.chunk_document

    def counting(path: str, text: str, **kwargs: Any) -> Any:
        chunked.append(path)
        return real(path, text, **kwargs)

    monkeypatch.setattr(knowledge, "chunk_document", counting)
    kb = kb_for(docs)
    first = kb.refresh()
    assert sorted(first.indexed) == ["menu.html", "notes.txt", "ops/deploy.md", "vpn.rst"]
    assert sorted(chunked) == sorted(first.indexed)

    chunked.clear()
    assert kb.refresh().unchanged == 4 and chunked == []

    (docs / "notes.txt").write_text("Printer on floor three works.\n", encoding="utf-8")
    stat = (docs / "vpn.rst").stat()
    os.utime(docs / "vpn.rst", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    report = kb.refresh()
    assert (report.indexed, report.rehashed, report.unchanged) == (("notes.txt",), ("vpn.rst",), 2)
    assert chunked == ["notes.txt"]
    assert kb.search("printer three").hits[0].chunk.text == "Printer on floor three works."


def test_the_index_persists_so_a_new_process_rereads_nothing(docs: Path) -> None:
    kb_for(docs).refresh()
    again = kb_for(docs)
    assert again.refresh().indexed == ()
    assert again.search("canteen soup").hits[0].chunk.path == "menu.html"
    other_size = KnowledgeBase(docs, docs.parent / "state", chunk_lines=5)
    assert len(other_size.refresh().indexed) == 4  # chunks of another size are not reused


def test_deleted_files_leave_the_index(docs: Path) -> None:
    kb = kb_for(docs)
    assert kb.search("grafana").total == 1
    (docs / "ops" / "deploy.md").unlink()
    assert kb.refresh().removed == ("ops/deploy.md",)
    assert kb.search("grafana").total == 0


def test_a_damaged_index_file_is_rebuilt_from_the_documents(docs: Path) -> None:
    kb = kb_for(docs)
    kb.refresh()
    kb.index_file.write_text("{not json", encoding="utf-8")
    assert len(kb_for(docs).refresh().indexed) == 4


async def run(tool: Any, **arguments: Any) -> ToolResult:
    result: ToolResult = await tool.execute(
        tool.validate(arguments), ToolContext(call_id="c1", turn_id="t1")
    )
    return result


async def test_knowledge_search_tool_pages_with_a_cursor_and_a_total(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for n in range(5):
        (folder / f"team{n}.txt").write_text(f"Budget review number {n}.\n", encoding="utf-8")
    (tool,) = knowledge_tools(KnowledgeBase(folder, tmp_path / "state"), page_size=2)
    first = await run(tool, query="budget review")
    assert first.success and first.data["total"] == 5
    assert first.output.startswith("5 passages match 'budget review'; showing 1-2 ")
    assert [h["path"] for h in first.data["hits"]] == ["team0.txt", "team1.txt"]
    assert first.data["next_cursor"] == "2" and 'pass cursor="2"' in first.output
    last = await run(tool, query="budget review", cursor="4")
    assert [h["path"] for h in last.data["hits"]] == ["team4.txt"]
    assert last.data["next_cursor"] is None and "cursor=" not in last.output
    bad = await run(tool, query="budget review", cursor="page-two")
    assert not bad.success and "not issued by this search" in (bad.error or "")


async def test_knowledge_search_says_explicitly_when_nothing_matches(docs: Path) -> None:
    (tool,) = knowledge_tools(kb_for(docs))
    result = await run(tool, query="submarine")
    assert result.success and result.data["hits"] == []
    assert result.output.startswith("Nothing found: no passage in the knowledge base (4 files")
    assert tool.spec.annotations.read_only


def test_a_link_out_of_the_folder_is_not_indexed_so_its_target_is_never_shown(
    docs: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "id_rsa.txt"  # outside the knowledge folder
    secret.write_text("rollback private key material\n", encoding="utf-8")
    os.symlink(secret, docs / "key.md")  # what a command in the workspace can plant
    (docs / "inside.md").symlink_to(docs / "notes.txt")  # a link that stays inside is read
    kb = kb_for(docs)

    report = kb.refresh()
    found = kb.search("rollback private key printer")

    assert "key.md" not in report.indexed and "inside.md" in report.indexed
    assert ("key.md", "it links out of the knowledge folder") in report.refused
    assert all("private key" not in hit.chunk.text for hit in found.hits)


def test_a_document_swapped_for_a_fifo_after_the_listing_is_refused_not_waited_on(
    docs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = docs / "notes.txt"
    change_after_first_look(monkeypatch, target, into_fifo)
    (tool,) = knowledge_tools(kb_for(docs))

    result = call_in_a_thread(tool, target, query="rollback printer")

    assert result is not None, "knowledge_search waited on a FIFO swapped in after the listing"
    assert result.success and "1 file not indexed" in result.output
    assert result.data["not_indexed"] == [
        {"path": "notes.txt", "why": "it is not a regular file (a FIFO)"}
    ]


def test_a_document_over_the_limit_is_refused_unread(docs: Path) -> None:
    big = docs / "huge.txt"
    big.write_text("rollback\n")
    os.truncate(big, knowledge.MAX_FILE_BYTES + 1)  # sparse: no disk written

    report = kb_for(docs).refresh()

    assert "huge.txt" not in report.indexed and "ops/deploy.md" in report.indexed
    assert dict(report.refused)["huge.txt"] == (
        f"it is {knowledge.MAX_FILE_BYTES + 1:,} bytes; "
        f"at most {knowledge.MAX_FILE_BYTES:,} are read"
    )
