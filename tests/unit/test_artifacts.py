"""The artifact store, its spill into the engine, and the read_artifact / grep_artifact tools."""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from heron import Agent, ScriptedModel, Tool, ToolContext, ToolResult, tool
from heron._support.clock import FakeClock
from heron.artifacts.contents import FileContents
from heron.artifacts.sqlite_store import SqliteArtifactCatalog
from heron.artifacts.store import ArtifactError, ArtifactSpill, ArtifactStore
from heron.artifacts.tools import artifact_tools
from heron.messages import ToolResultMessage
from support.engine import Events, call, calls_turn

CTX = ToolContext(call_id="c0", turn_id="t0")
SECRET = "sk-live0123456789abcdefXYZ"


def numbered(count: int) -> str:
    return "".join(f"line {n}\n" for n in range(1, count + 1))


def artifact_id(text: str) -> str:
    found = re.search(r"art_[0-9a-f]{16}", text)
    assert found is not None, text
    return found.group(0)


def make_store(state_dir: Path, **options: Any) -> ArtifactStore:
    """A store as heron builds it: metadata in the SQLite state database, files beside it."""
    return ArtifactStore(SqliteArtifactCatalog(state_dir), state_dir / "artifacts", **options)


def root_of(store: ArtifactStore) -> Path:
    """The folder of a store's content files."""
    assert isinstance(store.contents, FileContents)
    return store.contents.root


async def run(t: Tool, **arguments: Any) -> ToolResult:
    return await t.execute(t.validate(arguments), CTX)


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return make_store(tmp_path / "state")


@pytest.fixture
def tools(store: ArtifactStore) -> dict[str, Tool]:
    return {t.spec.name: t for t in artifact_tools(store)}


def test_outputs_are_stored_by_content_hash_and_survive_a_new_store_object(
    tmp_path: Path,
) -> None:
    first = make_store(tmp_path / "state")
    a = first.put("same output\n", tool="shell", call_id="c1")
    b = first.put("same output\n", tool="shell", call_id="c2")
    digest = hashlib.sha256(b"same output\n").hexdigest()
    assert a.id != b.id and a.sha256 == b.sha256 == digest
    assert [p.name for p in (tmp_path / "state" / "artifacts").iterdir()] == [digest]
    for private in (tmp_path / "state", root_of(first), root_of(first) / digest):
        assert private.stat().st_mode & 0o077 == 0  # outputs may hold secrets
    reopened = make_store(tmp_path / "state")
    info = reopened.info(a.id)
    assert (info.tool, info.call_id, info.size, info.lines) == ("shell", "c1", 12, 1)
    assert info.expires == pytest.approx(info.created + 7 * 24 * 3600)


def test_expired_artifacts_are_removed_on_access_and_by_purge(tmp_path: Path) -> None:
    clock = FakeClock()
    store = make_store(tmp_path, ttl_s=60, clock=clock.time)
    short = store.put("shared\n", tool="t", call_id="c1")
    long = store.put("shared\n", tool="t", call_id="c2", ttl_s=600)
    alone = store.put("alone\n", tool="t", call_id="c3")
    clock.advance(60)
    with pytest.raises(ArtifactError, match="expired at") as exc:
        store.info(short.id)
    assert exc.value.reason == "expired"
    with pytest.raises(ArtifactError, match="never existed or it expired"):
        store.info(short.id)  # the row is gone now
    assert store.purge_expired() == 1  # `alone`
    assert not (tmp_path / "artifacts" / alone.sha256).exists()
    assert (tmp_path / "artifacts" / long.sha256).exists()  # still referenced by `long`
    assert store.info(long.id).call_id == "c2"


async def test_pages_say_where_they_are_and_how_to_continue(
    store: ArtifactStore, tools: dict[str, Tool]
) -> None:
    info = store.put(numbered(1000), tool="shell", call_id="c1")
    result = await run(tools["read_artifact"], id=info.id, offset=501, limit=3)
    head, *rows = result.output.splitlines()
    assert f"{info.id} (output of shell, call c1" in head
    assert "lines 501–503 of 1,000 shown; pass offset=504 to continue" in head
    assert rows == ["   501\tline 501", "   502\tline 502", "   503\tline 503"]
    assert result.data["next_offset"] == 504
    last = await run(tools["read_artifact"], id=info.id, offset=999)
    assert "lines 999–1,000 of 1,000 shown (end of output)" in last.output
    assert last.data["next_offset"] is None
    past = await run(tools["read_artifact"], id=info.id, offset=1001)
    assert not past.success and "past the end" in (past.error or "")


def test_pages_are_exact_at_every_depth_of_a_multi_block_artifact(store: ArtifactStore) -> None:
    # Lines of varying length, so line starts fall everywhere relative to the index blocks.
    lines = [f"{n}:" + "x" * (n * 7919 % 300) for n in range(1, 6001)]
    info = store.put("\n".join(lines), tool="t", call_id="c")  # no final newline
    assert info.lines == 6000 and info.size > 10 * 64 * 1024
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    # The lines around each 64 KiB boundary, where an index lookup is easiest to get wrong.
    edges = {
        n for k in range(1, 14) for n in range(1, 6001) if starts[n - 1] <= k * 65536 < starts[n]
    }
    offsets = sorted({1, 2, 5999, 6000} | {n + d for n in edges for d in (-1, 0, 1, 2)})
    for offset in offsets:
        page = store.read(info.id, offset=offset, limit=2)
        expected = lines[offset - 1 : offset + 1]
        assert [line.text for line in page.lines] == expected, offset
        assert [line.number for line in page.lines] == list(range(offset, offset + len(expected)))


async def test_long_lines_and_big_pages_are_cut_with_visible_markers(
    store: ArtifactStore, tools: dict[str, Tool]
) -> None:
    info = store.put("a" * 5000 + "\nshort\n", tool="t", call_id="c")
    result = await run(tools["read_artifact"], id=info.id)
    first = result.output.splitlines()[1]
    assert first == f"     1\t{'a' * 2000} [… line cut here; the whole line is 5,000 bytes]"
    wide = store.put(("y" * 1000 + "\n") * 100, tool="t", call_id="c")
    page = await run(tools["read_artifact"], id=wide.id, limit=100)
    assert "pass offset=40 to continue (output size limit reached)" in page.output


async def test_unknown_malformed_and_expired_ids_are_clear_errors(tmp_path: Path) -> None:
    clock = FakeClock()
    store = make_store(tmp_path, ttl_s=10, clock=clock.time)
    read, grep = artifact_tools(store)
    malformed = await run(read, id="../../etc/passwd")
    assert not malformed.success and "is not an artifact id" in (malformed.error or "")
    unknown = await run(grep, id="art_0000000000000000", pattern="x")
    assert unknown.data["error"] == "unknown" and "run the command again" in (unknown.error or "")
    info = store.put("x\n", tool="t", call_id="c")
    clock.advance(10)
    expired = await run(read, id=info.id)
    assert expired.data["error"] == "expired"


async def test_grep_returns_numbered_matches_with_the_total_and_a_continuation(
    store: ArtifactStore, tools: dict[str, Tool]
) -> None:
    text = "".join(f"{'ERROR' if n % 10 == 0 else 'ok'} step {n}\n" for n in range(1, 1001))
    info = store.put(text, tool="build", call_id="c9")
    result = await run(tools["grep_artifact"], id=info.id, pattern=r"^ERROR", max_matches=3)
    head, *rows = result.output.splitlines()
    assert head.startswith("100 lines match /^ERROR/ in " + info.id)
    assert "the first 3 shown — pass offset=31 for the matches after line 30" in head
    assert rows == ["10: ERROR step 10", "20: ERROR step 20", "30: ERROR step 30"]
    assert result.data["matches"][0] == {"line": 10, "column": 0, "text": "ERROR step 10"}
    rest = await run(tools["grep_artifact"], id=info.id, pattern="ERROR", offset=991)
    assert rest.data["total"] == 1 and rest.data["next_offset"] is None
    assert "lines 991–1,000 searched" in rest.output
    past = await run(tools["grep_artifact"], id=info.id, pattern="ERROR", offset=1001)
    assert past.error == f"offset 1001 is past the end: {info.id} has 1,000 lines"


async def test_grep_line_numbers_stay_exact_across_scan_blocks(
    store: ArtifactStore, tools: dict[str, Tool]
) -> None:
    # About 6 MB, more than one 4 MB scan block; markers sit on both sides of the boundary.
    lines = [f"row {n} " + "z" * 90 for n in range(1, 60_001)]
    targets = [1, 41_000, 42_000, 43_000, 60_000]
    for n in targets:
        lines[n - 1] = f"needle {n}"
    info = store.put("\n".join(lines) + "\n", tool="t", call_id="c")
    result = await run(tools["grep_artifact"], id=info.id, pattern=r"^needle (\d+)$")
    assert [m["line"] for m in result.data["matches"]] == targets
    assert [m["text"] for m in result.data["matches"]] == [f"needle {n}" for n in targets]


async def test_grep_searches_each_line_alone_and_refuses_bad_patterns(
    store: ArtifactStore, tools: dict[str, Tool]
) -> None:
    info = store.put("alpha\nbeta\n", tool="t", call_id="c")
    spanning = await run(tools["grep_artifact"], id=info.id, pattern=r"alpha\nbeta")
    assert spanning.data["total"] == 0
    anchored = await run(tools["grep_artifact"], id=info.id, pattern=r"\Abeta\Z")
    assert anchored.data["total"] == 1
    bad = await run(tools["grep_artifact"], id=info.id, pattern="(unclosed")
    assert not bad.success
    assert bad.error == "invalid regular expression '(unclosed': missing ) at '(unclosed'"
    trap = store.put("a" * 40 + "!\n" + "a" * 40 + "\n", tool="t", call_id="c")
    linear = await run(tools["grep_artifact"], id=trap.id, pattern=r"(a+)+$")
    assert [m["line"] for m in linear.data["matches"]] == [2]


async def test_secrets_are_stored_raw_but_shown_masked(
    store: ArtifactStore, tools: dict[str, Tool]
) -> None:
    info = store.put(f"deploying\napi_key={SECRET}\ndone\n", tool="t", call_id="c")
    raw = (root_of(store) / info.sha256).read_text()
    assert SECRET in raw
    page = await run(tools["read_artifact"], id=info.id)
    found = await run(tools["grep_artifact"], id=info.id, pattern="api_key")
    for result in (page, found):
        assert SECRET not in result.output and "*[REDACTED]" in result.output
    assert SECRET not in str(found.data)


def test_small_outputs_are_not_spilled(store: ArtifactStore) -> None:
    spill = ArtifactSpill(store)
    assert spill.spill("shell", "c1", numbered(200)) is None
    assert spill.spill("shell", "c1", "x" * 10_000) is None
    assert not list(root_of(store).iterdir())


def test_a_long_output_becomes_head_marker_tail_and_is_stored_whole(store: ArtifactStore) -> None:
    output = numbered(8623)
    preview = ArtifactSpill(store).spill("shell", "c1", output)
    assert preview is not None
    lines = preview.splitlines()
    assert lines[:50] == [f"line {n}" for n in range(1, 51)]
    assert lines[51:] == [f"line {n}" for n in range(8574, 8624)]
    marker = lines[50]
    art = artifact_id(marker)
    assert marker.startswith("[… lines 51–8,573 (8,523 lines) omitted; full output (8,623 lines")
    assert f'read_artifact(id="{art}", offset=51, limit=200)' in marker
    assert f'grep_artifact(id="{art}"' in marker
    info = store.info(art)
    assert (root_of(store) / info.sha256).read_text() == output
    assert (info.tool, info.call_id, info.lines) == ("shell", "c1", 8623)


def test_ordinary_log_lines_keep_the_full_head_and_tail(store: ArtifactStore) -> None:
    lines = [f"{n:05d} " + "w" * 144 for n in range(1, 301)]  # 150 characters each
    preview = ArtifactSpill(store).spill("shell", "c1", "\n".join(lines))
    assert preview is not None
    shown = preview.splitlines()
    assert shown[:50] == lines[:50] and shown[51:] == lines[-50:]
    assert shown[50].startswith("[… lines 51–250 (200 lines) omitted")


def test_few_huge_lines_still_give_a_bounded_preview(store: ArtifactStore) -> None:
    output = "\n".join(f"{n}" * 30_000 for n in range(1, 6))
    preview = ArtifactSpill(store, max_chars=10_000).spill("shell", "c1", output)
    assert preview is not None and len(preview) < 2 * 10_000 + 500
    assert "[… line cut: " in preview
    assert store.info(artifact_id(preview)).size == len(output)


def test_artifact_readers_are_never_spilled_again(store: ArtifactStore) -> None:
    assert ArtifactSpill(store).spill("read_artifact", "c1", numbered(2000)) is None


def test_a_failed_save_is_stated_in_the_preview(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    shutil.rmtree(root_of(store))
    root_of(store).write_text("not a directory")  # every write into it now fails
    preview = ArtifactSpill(store).spill("shell", "c1", numbered(500))
    assert preview is not None
    assert "the full output could not be saved (NotADirectoryError" in preview
    assert "so only this preview remains" in preview and "art_" not in preview


async def test_the_model_sees_the_preview_and_reads_the_rest_through_the_engine(
    tmp_path: Path, events: Events
) -> None:
    @tool(read_only=True)
    def build_log() -> str:
        """Print the whole build log."""
        return "".join(f"step {n}: {'FAILED' if n == 777 else 'ok'}\n" for n in range(1, 2001))

    store = make_store(tmp_path)
    first = [calls_turn(call("build_log", "c1")), {"text": "looking"}]
    agent = Agent(
        model=ScriptedModel(first),
        tools=[build_log, *artifact_tools(store)],
        spill=ArtifactSpill(store),
    )
    result = await agent.run("why did the build fail?", sink=events)
    preview = {m.call_id: m.content for m in result.history if isinstance(m, ToolResultMessage)}
    art = artifact_id(preview["c1"])
    assert "lines 51–1,950 (1,900 lines) omitted" in preview["c1"]
    second = [
        calls_turn(call("grep_artifact", "c2", id=art, pattern="FAILED")),
        calls_turn(call("read_artifact", "c3", id=art, offset=776, limit=3)),
        {"text": "step 777 failed"},
    ]
    agent2 = Agent(
        model=ScriptedModel(second),
        tools=[build_log, *artifact_tools(store)],
        spill=ArtifactSpill(store),
    )
    result2 = await agent2.run("show me", history=result.history, sink=events)
    seen = {m.call_id: m.content for m in result2.history if isinstance(m, ToolResultMessage)}
    assert "777: step 777: FAILED" in seen["c2"]
    assert seen["c3"].splitlines()[1:] == [
        "   776\tstep 776: ok",
        "   777\tstep 777: FAILED",
        "   778\tstep 778: ok",
    ]
    events.assert_one_pair_per_call()
