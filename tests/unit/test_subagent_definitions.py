"""Agent definitions: heron.toml entries take effect, project files only once approved."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from heron.always_on.subagents.config import AgentEntry, SubagentsConfig
from heron.always_on.subagents.definitions import (
    AgentFileError,
    approve_file,
    load_definitions,
    parse_agent_file,
)
from heron.always_on.subagents.runtime import SubagentError, SubagentRuntime
from heron.mcp.trust.sqlite_store import SqliteTrustStore

FILE = """---
name: researcher
description: Finds sources on one question.
model: scripted:researcher.json
tools: [read_file, web_fetch]
max_iterations: 6
---
You research one question and hand back a short, sourced answer.
"""


def _write(tmp_path: Path, text: str = FILE, name: str = "researcher") -> Path:
    folder = tmp_path / "agents"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.md").write_text(text, encoding="utf-8")
    return folder


def test_a_file_gives_name_description_model_tools_knobs_and_the_body_as_role(
    tmp_path: Path,
) -> None:
    definition = parse_agent_file(_write(tmp_path) / "researcher.md")
    assert definition.name == "researcher"
    assert definition.model == "scripted:researcher.json"
    assert definition.tools == ("read_file", "web_fetch")
    assert definition.max_iterations == 6
    assert definition.prompt == "You research one question and hand back a short, sourced answer."
    assert definition.trust == "unapproved"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("no front matter", "no YAML front matter"),
        ("---\nname: [x\n---\nbody", "not valid YAML"),
        ("---\nname: other\n---\nbody", "must be named other.md"),
        ("---\ncolour: red\n---\nbody", "colour"),
        ("---\nmax_iterations: 0\n---\nbody", "max_iterations"),
    ],
)
def test_a_broken_file_is_refused_with_what_is_wrong(
    tmp_path: Path, text: str, problem: str
) -> None:
    with pytest.raises(AgentFileError) as caught:
        parse_agent_file(_write(tmp_path, text) / "researcher.md")
    assert problem in str(caught.value)


def test_project_files_take_effect_only_after_approval_and_changes_are_shown(
    tmp_path: Path,
) -> None:
    folder = _write(tmp_path)
    pins = SqliteTrustStore(tmp_path / "state", table="agent_pins")
    entries = {"helper": AgentEntry(description="from heron.toml", prompt="Help.")}
    found = load_definitions(entries, folder, pins)
    assert (found["helper"].trust, found["helper"].usable) == ("config", True)
    assert (found["researcher"].trust, found["researcher"].usable) == ("unapproved", False)

    approve_file(found["researcher"], pins)
    assert load_definitions({}, folder, pins)["researcher"].trust == "approved"

    _write(tmp_path, FILE.replace("short, sourced", "long, unsourced"))
    changed = load_definitions({}, folder, pins)["researcher"]
    assert (changed.trust, changed.usable) == ("changed", False)
    assert "-You research one question and hand back a short, sourced answer." in changed.changes
    assert "+You research one question and hand back a long, unsourced answer." in changed.changes
    # MCP pins are a table of their own: an agent approval pins no server.
    assert SqliteTrustStore(tmp_path / "state").pins() == []


def test_spawning_an_unapproved_project_agent_is_refused_with_how_to_approve(
    tmp_path: Path,
) -> None:
    found = load_definitions({}, _write(tmp_path), None)
    runtime = SubagentRuntime(
        store=None,  # type: ignore[arg-type]  # never reached: the definition is refused first
        definitions=found,
        config=SubagentsConfig(),
        run_child=lambda live: None,
        deliver=lambda record: None,  # type: ignore[arg-type,return-value]
        events_at_top=False,
    )
    with pytest.raises(SubagentError) as caught:
        runtime.definition("researcher")
    assert "heron agents approve researcher" in str(caught.value)


def test_a_name_in_both_heron_toml_and_a_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(AgentFileError, match=r"both in heron\.toml"):
        load_definitions({"researcher": AgentEntry()}, _write(tmp_path), None)


# A project's agents/ folder comes with the repository: each file is hostile until checked.


def test_a_fifo_agent_file_is_refused_and_never_blocks(tmp_path: Path) -> None:
    folder = _write(tmp_path)
    os.mkfifo(folder / "trap.md")  # no writer: a blocking open would never return
    with pytest.raises(AgentFileError, match=r"trap\.md.*not a regular file \(a FIFO\)"):
        load_definitions({}, folder, None)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="the host has no /dev/zero")
def test_a_link_to_a_device_is_never_read(tmp_path: Path) -> None:
    folder = _write(tmp_path)
    (folder / "zero.md").symlink_to("/dev/zero")  # size 0, a read without end
    with pytest.raises(AgentFileError, match=r"zero\.md.*links out of the agents folder"):
        parse_agent_file(folder / "zero.md")


def test_a_file_linking_out_of_the_folder_is_not_read_pinned_or_shown(tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("---\nname: leak\n---\nthe operator's private notes", encoding="utf-8")
    folder = _write(tmp_path)
    (folder / "leak.md").symlink_to(secret)
    with pytest.raises(AgentFileError) as refused:
        load_definitions({}, folder, SqliteTrustStore(tmp_path / "state", table="agent_pins"))
    assert "links out of the agents folder" in str(refused.value)
    assert "private notes" not in str(refused.value)


def test_a_link_inside_the_folder_is_read(tmp_path: Path) -> None:
    folder = _write(tmp_path)
    (folder / "drafts").mkdir()
    (folder / "drafts" / "scout.md").write_text(FILE.replace("researcher", "scout"), "utf-8")
    (folder / "scout.md").symlink_to(folder / "drafts" / "scout.md")
    assert parse_agent_file(folder / "scout.md").name == "scout"


@pytest.mark.parametrize(
    ("front", "problem"),
    [
        ("name: researcher\nd: &a [x, x]\ne: [*a, *a]", "anchors and aliases are not read"),
        ("name: researcher\nd: !!python/object:os.system {}", "tags other than plain types"),
        ("name: researcher\nd: " + "[" * 40 + "]" * 40, "nested more than 16 levels"),
        ("name: researcher\nmax_iterations: " + "9" * 5_000, "a number of 5000 digits"),
    ],
)
def test_front_matter_yaml_is_bounded_and_refused_with_its_line(
    tmp_path: Path, front: str, problem: str
) -> None:
    folder = _write(tmp_path, f"---\n{front}\n---\nbody")
    with pytest.raises(AgentFileError, match="front matter is not valid YAML") as refused:
        parse_agent_file(folder / "researcher.md")
    assert problem in str(refused.value)
    assert "line 3" in str(refused.value)


def test_an_oversize_file_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    folder = _write(tmp_path)
    with (folder / "researcher.md").open("r+b") as fh:
        fh.truncate(1 << 31)  # sparse: 2 GiB on paper, nothing on disk
    with pytest.raises(AgentFileError, match="larger than 262144 bytes"):
        parse_agent_file(folder / "researcher.md")
