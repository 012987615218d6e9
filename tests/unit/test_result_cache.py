"""The workspace result cache: keys, TTL, path-aware invalidation, and its use by the engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from heron import Agent, ScriptedModel
from heron._support.clock import FakeClock
from heron.messages import ToolResultMessage
from heron.safety.workspace import Workspace
from heron.tools.definition import ToolSpec
from heron.toolsets.cache import WorkspaceResultCache, path_arguments
from heron.toolsets.files import file_tools
from heron.toolsets.lint import Linters
from support.engine import Events, call, calls_turn

READ = ToolSpec(name="read_file", description="read", parameters={"type": "object"})
GREP = ToolSpec(name="grep_files", description="grep", parameters={"type": "object"})
WRITE = ToolSpec(name="write_file", description="write", parameters={"type": "object"})
SHELL = ToolSpec(name="shell", description="run", parameters={"type": "object"})


def test_hits_are_keyed_by_tool_and_canonical_arguments() -> None:
    cache = WorkspaceResultCache()
    cache.put(READ, {"path": "a.py", "offset": 1}, "text")
    assert cache.get(READ, {"offset": 1, "path": "a.py"}) == "text"
    assert cache.get(READ, {"path": "a.py", "offset": 2}) is None
    assert cache.get(GREP, {"path": "a.py", "offset": 1}) is None


def test_entries_expire_after_the_ttl() -> None:
    clock = FakeClock(100.0)
    cache = WorkspaceResultCache(ttl_s=60, clock=clock.time)
    cache.put(READ, {"path": "a.py"}, "text")
    clock.advance(59.9)
    assert cache.get(READ, {"path": "a.py"}) == "text"
    clock.advance(0.1)
    assert cache.get(READ, {"path": "a.py"}) is None
    assert len(cache) == 0


@pytest.mark.parametrize(
    ("read", "written", "dropped"),
    [
        ("src/a.py", "src/a.py", True),
        ("./src/a.py", "src//a.py", True),
        ("src", "src/a.py", True),  # a listing of the parent folder
        ("src/a.py", "src", True),  # the folder was moved or deleted
        (".", "docs/x.md", True),  # a search over the whole workspace
        ("src/a.py", "src/ab.py", False),
        ("src/a.py", "docs/a.py", False),
        ("src/a.py", "/abs/src/a.py", True),  # cannot compare: be safe
    ],
)
def test_a_write_drops_entries_whose_paths_overlap(read: str, written: str, dropped: bool) -> None:
    cache = WorkspaceResultCache()
    cache.put(READ, {"path": read}, "old")
    cache.invalidate(WRITE, {"path": written, "content": "new"})
    assert (cache.get(READ, {"path": read}) is None) is dropped


def test_moves_invalidate_both_source_and_destination() -> None:
    cache = WorkspaceResultCache()
    for path in ("a.txt", "b/c.txt", "d.txt"):
        cache.put(READ, {"path": path}, path)
    cache.invalidate(WRITE, {"src": "a.txt", "dst": "b"})
    assert [cache.get(READ, {"path": p}) for p in ("a.txt", "b/c.txt", "d.txt")] == [
        None,
        None,
        "d.txt",
    ]


def test_writes_without_paths_and_reads_without_paths_are_treated_as_everything() -> None:
    cache = WorkspaceResultCache()
    cache.put(READ, {"path": "a.txt"}, "a")
    cache.invalidate(SHELL, {"command": "make clean"})
    assert cache.get(READ, {"path": "a.txt"}) is None
    cache.put(GREP, {"pattern": "todo"}, "matches")  # default path: the whole workspace
    cache.put(READ, {"path": "a.txt"}, "a")
    cache.invalidate(WRITE, {"path": "z.txt", "content": ""})
    assert cache.get(GREP, {"pattern": "todo"}) is None
    assert cache.get(READ, {"path": "a.txt"}) == "a"


def test_path_like_argument_names_are_recognised() -> None:
    found = path_arguments(
        {"target_dir": "out", "input_files": ["a", "b"], "paths": ["c"], "text": "not/a/path"}
    )
    assert found == ("out", "a", "b", "c")


def test_the_oldest_entry_is_evicted_at_capacity() -> None:
    cache = WorkspaceResultCache(max_entries=2)
    for path in ("a", "b", "c"):
        cache.put(READ, {"path": path}, path)
    assert [cache.get(READ, {"path": p}) for p in ("a", "b", "c")] == [None, "b", "c"]


async def test_the_engine_serves_a_repeat_read_from_cache_until_a_write(
    tmp_path: Path, events: Events
) -> None:
    (tmp_path / "notes.txt").write_text("first\n")
    tools = file_tools(Workspace(tmp_path), linters=Linters(enabled=False))
    model = ScriptedModel(
        [
            calls_turn(call("read_file", "r1", path="notes.txt")),
            calls_turn(call("read_file", "r2", path="notes.txt")),
            calls_turn(call("write_file", "w1", path="notes.txt", content="second\n")),
            calls_turn(call("read_file", "r3", path="notes.txt")),
            {"text": "done"},
        ]
    )
    cache = WorkspaceResultCache()
    agent = Agent(model=model, tools=tools, autonomy="full", cache=cache, workspace=tmp_path)
    result = await agent.run("check the notes", sink=events)
    cached = {call_id: event.cached for call_id, event in events.results().items()}
    assert cached == {"r1": False, "r2": True, "w1": False, "r3": False}
    seen = {m.call_id: m.content for m in result.history if isinstance(m, ToolResultMessage)}
    assert "     1\tfirst" in seen["r2"]
    assert "     1\tsecond" in seen["r3"]
