"""Catalogue files (the batch CLI's format) and the committed reference-server definitions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from heron.discovery import CatalogueError, dump_catalogue, load_catalogue, parse_catalogue

REFERENCE = Path(__file__).resolve().parents[2] / "bench/discovery_data/reference_mcp_tools.json"


def test_catalogue_maps_servers_to_tool_lists_or_tools_list_results(tmp_path: Path) -> None:
    path = tmp_path / "catalogue.json"
    path.write_text(
        json.dumps(
            {
                "time": [
                    {
                        "name": "convert_time",
                        "description": "Convert a time.",
                        "inputSchema": {"type": "object", "properties": {"tz": {}}},
                    }
                ],
                "files": {"tools": [{"name": "read_file", "title": "Read file"}]},
            }
        )
    )
    docs = load_catalogue(path)
    assert [d.qualified for d in docs] == ["time__convert_time", "files__read_file"]
    assert docs[0].parameters == ("tz",)
    assert docs[1].title == "Read file" and docs[1].description == "" and docs[1].input_schema == {}
    assert dump_catalogue(docs)["files"] == [
        {"name": "read_file", "description": "", "inputSchema": {}, "title": "Read file"}
    ]


def test_every_problem_of_a_catalogue_is_reported_at_once() -> None:
    with pytest.raises(CatalogueError) as caught:
        parse_catalogue(
            {
                "a": "not a list",
                "b": [{"description": "no name"}, {"name": "x"}, {"name": "x"}],
                "c": [{"name": "y", "inputSchema": []}],
            }
        )
    problems = caught.value.problems
    assert len(problems) == 4
    assert "server 'a'" in problems[0] and "'name'" in problems[1]
    assert "listed twice" in problems[2] and "inputSchema" in problems[3]


def test_unreadable_catalogue_file_is_a_catalogue_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(CatalogueError, match=r"broken\.json"):
        load_catalogue(path)
    with pytest.raises(CatalogueError, match="expected an object"):
        parse_catalogue([])


def test_committed_reference_server_definitions_load() -> None:
    docs = load_catalogue(REFERENCE)
    servers = {d.server for d in docs}
    assert {"everything", "filesystem", "memory", "time"} <= servers
    assert len(docs) >= 35
    read = next(d for d in docs if d.qualified == "filesystem__read_text_file")
    assert "path" in read.parameters
