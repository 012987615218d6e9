"""`heron tools search`: what discovery finds in a catalogue file, through the real command —
one need or a JSONL file of needs, human or JSON output, and the errors a user can make. The
catalogue is the reference MCP servers' real `tools/list` results (bench/discovery_data)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from support.cli import Heron

REFERENCE = Path(__file__).resolve().parents[2] / "bench/discovery_data/reference_mcp_tools.json"


def test_a_jsonl_file_of_needs_gets_one_json_line_of_ranked_tools_each(heron: Heron) -> None:
    heron.write("catalogue.json", REFERENCE.read_text(encoding="utf-8"))
    needs = [
        {"query": "what time is it in Tokyo right now"},
        {"query": "write a new file with this content", "id": "ignored extra field"},
        {"query": "read_multiple_files"},
    ]
    heron.write("needs.jsonl", "".join(json.dumps(n) + "\n" for n in needs))
    done = heron.run(
        "tools", "search", "--catalogue", "catalogue.json", "--queries", "needs.jsonl",
        "--limit", "3",
    )  # fmt: skip
    assert done.code == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(lines) == 3
    assert all(isinstance(line, list) and len(line) <= 3 for line in lines)
    assert all(set(r) == {"server", "name", "score"} for line in lines for r in line)
    assert {r["server"] for r in lines[0][:2]} == {"time"}
    assert "get_current_time" in [r["name"] for r in lines[0]]
    assert (lines[1][0]["server"], lines[1][0]["name"]) == ("filesystem", "write_file")
    # An exact name always wins.
    assert lines[2][0]["name"] == "read_multiple_files"
    scores = [r["score"] for r in lines[1]]
    assert scores == sorted(scores, reverse=True)


def test_one_need_is_shown_for_people_or_as_json(heron: Heron) -> None:
    heron.write("catalogue.json", REFERENCE.read_text(encoding="utf-8"))
    human = heron.run(
        "tools", "search", "--catalogue", "catalogue.json", "--query", "add two numbers"
    )
    assert human.code == 0, human.stderr
    assert human.stdout.splitlines()[0] == "'add two numbers' (lexical):"
    assert "everything__get-sum" in human.stdout.splitlines()[1]
    as_json = heron.run(
        "tools", "search", "--catalogue", "catalogue.json", "--query", "add two numbers",
        "--json", "--limit", "1",
    )  # fmt: skip
    assert json.loads(as_json.stdout) == [
        {"server": "everything", "name": "get-sum", "score": json.loads(as_json.stdout)[0]["score"]}
    ]


def test_a_bad_catalogue_or_queries_file_is_a_usage_error_naming_every_problem(
    heron: Heron,
) -> None:
    heron.write("bad.json", json.dumps({"srv": [{"description": "no name"}], "other": 3}))
    heron.write("good.json", json.dumps({"srv": [{"name": "t", "description": "A tool."}]}))
    heron.write("needs.jsonl", '{"query": "x"}\nnot json\n{"q": "y"}\n')
    bad_catalogue = heron.run("tools", "search", "--catalogue", "bad.json", "--query", "x")
    assert bad_catalogue.code == 2
    assert "a tool needs a string 'name'" in bad_catalogue.stderr
    assert "server 'other': expected a list of tools" in bad_catalogue.stderr
    bad_queries = heron.run(
        "tools", "search", "--catalogue", "good.json", "--queries", "needs.jsonl"
    )
    assert bad_queries.code == 2
    assert "lines 2, 3 are not" in bad_queries.stderr


def test_a_hostile_catalogue_file_is_refused_at_once_never_read_without_end(
    heron: Heron,
) -> None:
    deep = heron.write("deep.json", "[" * 100_000 + "]" * 100_000)
    os.mkfifo(heron.root / "fifo.json")  # no writer: a blocking open waits for ever
    (heron.root / "zero.json").symlink_to("/dev/zero")  # a read without end
    expected = {
        deep.name: "deep.json: nested more than 64 levels deep",
        "fifo.json": "not a regular file (a FIFO)",
        "zero.json": "not a regular file (a character device)",
    }
    for name, problem in expected.items():
        refused = heron.run("tools", "search", "--catalogue", name, "--query", "x")
        assert refused.code == 2, (name, refused.stderr)
        assert problem in refused.stderr and "Traceback" not in refused.stderr, name
