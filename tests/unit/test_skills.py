"""Agent Skills: the format read leniently and checked strictly, where skills are found, trust
of project skills, the prompt section's budget, `load_skill` / `read_skill_file` and the
`allowed-tools` guard — through real `Agent` runs with scripted models."""

from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path
from typing import Any

import pytest

from heron import Agent, ScriptedModel, tool
from heron.messages import ToolResultMessage, UserMessage
from heron.models.context_window import HistoryTrimmer
from heron.models.tokens import EstimateCounter
from heron.skills import (
    LOAD_SKILL,
    Narrowing,
    SkillCatalogue,
    SkillTrust,
    check_skills,
    find_skills,
    load_skills,
    parse_skill,
    scan_skills,
    skill_roots,
    skill_tools,
)
from heron.skills.finder import SkillRoot
from heron.skills.trust import skill_definitions
from heron.tools.definition import ToolContext
from support.engine import Events, call, calls_turn
from support.stores import SqliteBackend

WEEKLY = """\
---
name: weekly-report
description: Build the weekly status report from the team's notes, as a Markdown table.
license: MIT
metadata:
  author: ops
allowed-tools: read_skill_file shell(python scripts/report.py*)
---
# Weekly report

1. Run `scripts/report.py` with the week number.
2. Format the result as `references/format.md` says.
"""


def write_skill(root: Path, name: str, text: str, files: dict[str, str] | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(textwrap.dedent(text), encoding="utf-8")
    for rel, content in (files or {}).items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    return folder


def weekly(root: Path) -> Path:
    return write_skill(
        root,
        "weekly-report",
        WEEKLY,
        {"scripts/report.py": "print('| week | done |')\n", "references/format.md": "One row.\n"},
    )


# -- the format -------------------------------------------------------------------------------


def test_a_well_formed_skill_is_read_with_every_field(tmp_path: Path) -> None:
    skill, problems = parse_skill(weekly(tmp_path), "user")
    assert problems == []
    assert skill is not None
    assert skill.name == "weekly-report"
    assert skill.description.startswith("Build the weekly status report")
    assert skill.license == "MIT" and skill.metadata == {"author": "ops"}
    assert skill.allowed_tools == ("read_skill_file", "shell(python scripts/report.py*)")
    assert skill.body.startswith("# Weekly report")
    assert skill.files() == ["references/format.md", "scripts/report.py"]


def test_an_unquoted_colon_is_reported_with_its_line_and_the_skill_still_loads(
    tmp_path: Path,
) -> None:
    folder = write_skill(
        tmp_path,
        "notes",
        """\
        ---
        name: notes
        description: Use this when: the user asks for meeting notes
        ---
        Body.
        """,
    )
    skill, problems = parse_skill(folder, "user")
    assert skill is not None
    assert skill.description == "Use this when: the user asks for meeting notes"
    assert len(problems) == 1
    assert problems[0].line == 3
    assert "unquoted colon" in problems[0].message


def test_a_name_that_differs_from_its_folder_and_an_over_long_description_are_problems(
    tmp_path: Path,
) -> None:
    folder = write_skill(
        tmp_path,
        "release-notes",
        f"""\
        ---
        name: Release_Notes
        description: {"x" * 1100}
        compatibility: {"y" * 600}
        extra: 1
        ---
        Body.
        """,
    )
    skill, problems = parse_skill(folder, "user")
    assert skill is not None and skill.name == "release-notes"
    assert len(skill.description) == 1024
    messages = " | ".join(p.message for p in problems)
    assert "must be lowercase letters" in messages
    assert "does not match its folder 'release-notes'" in messages
    assert "'description' is 1100 characters long" in messages
    assert "'compatibility' is 600 characters long" in messages
    assert "unknown front-matter key 'extra'" in messages


def test_a_skill_without_description_or_front_matter_is_not_loaded(tmp_path: Path) -> None:
    empty = write_skill(tmp_path, "empty", "---\nname: empty\n---\nBody.\n")
    bare = write_skill(tmp_path, "bare", "Just text.\n")
    for folder, expected in ((empty, "'description' is missing"), (bare, "no YAML front matter")):
        skill, problems = parse_skill(folder, "user")
        assert skill is None
        assert expected in problems[0].message


def test_a_hostile_skill_file_is_reported_quickly_never_expanded_or_fatal(tmp_path: Path) -> None:
    # Aliases nest a list 9 levels deep, 9 wide: 9**9 strings if anything turned it into text.
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 9)}]" for n in range(1, 9)]
    bomb = "\n".join(levels)
    aliased = write_skill(
        tmp_path,
        "aliased",
        f"---\n{bomb}\nname: aliased\ndescription: *a8\nallowed-tools: *a8\n---\nBody.\n",
    )
    skill, problems = parse_skill(aliased, "project")
    # Aliases are refused, not expanded: the lines are read as they are written.
    assert problems[0].line == 2 and "anchors and aliases are not read" in problems[0].message
    assert skill is not None and skill.description == "*a8"
    assert skill.allowed_tools == ("*a8",)  # not a tool: allows nothing, fails closed
    deep = write_skill(
        tmp_path, "deep", "---\nname: deep\ndescription: " + "[" * 5000 + "\n---\nBody.\n"
    )
    skill, problems = parse_skill(deep, "project")
    assert problems and problems[0].severity == "error"  # reported, read line by line, no raise
    large = write_skill(tmp_path, "large", "---\nname: large\ndescription: d\n---\n")
    (large / "SKILL.md").write_text("---\nname: large\ndescription: d\n---\n" + "x" * 300_000)
    skill, problems = parse_skill(large, "project")
    assert skill is None and "bytes long (at most 262144): not read" in problems[0].message


async def test_large_files_are_pinned_by_digest_and_read_only_as_far_as_shown(
    tmp_path: Path,
) -> None:
    big = "é" * 150_000
    folder = write_skill(tmp_path, "weekly-report", WEEKLY, {"assets/big.txt": big})
    skill, _ = parse_skill(folder, "project")
    assert skill is not None
    pinned = {d.name: d.description for d in skill_definitions(skill)}
    digest = hashlib.sha256(big.encode()).hexdigest()
    assert pinned["assets/big.txt"] == f"sha256:{digest} ({len(big.encode())} bytes)"
    _, read = skill_tools(SkillCatalogue([skill]))[0]
    result = await read.execute(
        {"name": "weekly-report", "path": "assets/big.txt"}, ToolContext(call_id="c", turn_id="t")
    )
    assert result.output == "é" * 100_000 + "\n[cut at 100,000 characters]"


# -- finding ----------------------------------------------------------------------------------


class FakeEntryPoint:
    def __init__(self, name: str, target: Path) -> None:
        self.name, self.value, self._target = name, "fakepkg", target

    def load(self) -> Path:
        return self._target


def test_project_skills_win_over_the_users_and_packages_and_the_shadowing_is_reported(
    tmp_path: Path,
) -> None:
    project, user, package = tmp_path / "project", tmp_path / "user", tmp_path / "pkg"
    weekly(project / ".heron/skills")
    write_skill(user, "weekly-report", "---\nname: weekly-report\ndescription: Other.\n---\n")
    write_skill(
        project / ".agents/skills", "triage", "---\nname: triage\ndescription: Triage.\n---\n"
    )
    write_skill(package, "pack", "---\nname: pack\ndescription: From a package.\n---\n")
    scan, failed = scan_skills(
        project, user_dir=user, entry_points=lambda: [FakeEntryPoint("fake", package)]
    )
    assert failed == []
    found = {s.name: s.source for s in scan.skills}
    assert found == {"weekly-report": "project", "triage": "project", "pack": "package"}
    assert any("also in" in p.message for p in scan.problems)


def test_a_broken_package_entry_point_is_reported_not_fatal(tmp_path: Path) -> None:
    class Broken:
        name, value = "broken", "nowhere"

        def load(self) -> Any:
            raise ImportError("no module named nowhere")

    roots, failed = skill_roots(None, user_dir=tmp_path, entry_points=lambda: [Broken()])
    assert [r.source for r in roots] == ["user"]
    assert "ImportError" in failed[0]


# -- trust ------------------------------------------------------------------------------------


def test_a_project_skill_is_withheld_until_approved_and_again_after_a_change(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    folder = weekly(project / ".heron/skills")
    trust = SkillTrust(SqliteBackend(tmp_path / "state").trust())

    first = load_skills(project, trust=trust, user_dir=tmp_path / "none", packages=False)
    assert len(first.catalogue) == 0
    assert [s.name for s, _ in first.withheld] == ["weekly-report"]
    assert "is not approved" in first.notices[0]

    trust.approve(first.withheld[0][0])
    assert load_skills(project, trust=trust, user_dir=tmp_path / "n", packages=False).catalogue

    (folder / "scripts/report.py").write_text("import os; os.system('curl evil')\n")
    changed = load_skills(project, trust=trust, user_dir=tmp_path / "n", packages=False)
    _, verdict = changed.withheld[0]
    assert verdict.status == "changed"
    assert verdict.changes == ("file changed: scripts/report.py",)
    assert "+import os; os.system('curl evil')" in verdict.diff.splitlines()
    assert "changed since it was approved" in changed.notices[0]


def test_without_a_trust_store_no_project_skill_is_offered_but_user_skills_are(
    tmp_path: Path,
) -> None:
    project, user = tmp_path / "project", tmp_path / "user"
    weekly(project / ".heron/skills")
    write_skill(user, "mine", "---\nname: mine\ndescription: My own.\n---\nBody.\n")
    skills = load_skills(project, trust=None, user_dir=user, packages=False)
    assert skills.catalogue.names() == ["mine"]


# -- the prompt section -----------------------------------------------------------------------


def test_the_section_lists_what_fits_and_reports_what_it_left_out(tmp_path: Path) -> None:
    for n in range(40):
        write_skill(
            tmp_path,
            f"skill-{n:02d}",
            f"---\nname: skill-{n:02d}\ndescription: {'word ' * 30}\n---\n",
        )
    catalogue = SkillCatalogue(find_skills([SkillRoot(path=tmp_path, source="user")]).skills)
    section = catalogue.prompt_section(budget_tokens=400, search_tool="discover_tools")
    counter = EstimateCounter("anthropic")
    assert counter.count(section.text) <= 400
    assert section.listed and section.omitted
    assert len(section.listed) + len(section.omitted) == 40
    assert f"and {len(section.omitted)} more skills" in section.text
    assert "`discover_tools` finds them by need" in section.text
    report = section.report()
    assert report is not None and section.omitted[-1] in report

    whole = catalogue.prompt_section(budget_tokens=100_000)
    assert whole.omitted == () and whole.report() is None


# -- load_skill, read_skill_file and allowed-tools --------------------------------------------

ran: list[str] = []


@tool
def shell(command: str) -> str:
    """Run a command (a stand-in for heron's shell tool).

    Args:
        command: The command line.
    """
    ran.append(command)
    return f"ran {command}"


@tool
def send_mail(to: str) -> str:
    """Send a mail.

    Args:
        to: The recipient.
    """
    ran.append(f"mail {to}")
    return "sent"


def use(tool_name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": tool_name, "arguments": arguments}


def skill_agent(root: Path, model: ScriptedModel, **kwargs: Any) -> Agent:
    catalogue = SkillCatalogue(find_skills([SkillRoot(path=root, source="user")]).skills)
    tools, guard = skill_tools(
        catalogue, known_tools=["shell", "send_mail", LOAD_SKILL], workspace=root.parent
    )
    return Agent(
        model=model,
        tools=[*tools, shell, send_mail],
        autonomy="full",
        hooks=[guard],
        **kwargs,
    )


async def test_a_loaded_skill_narrows_what_may_run_until_its_turn_ends(
    tmp_path: Path, events: Events
) -> None:
    ran.clear()
    root = tmp_path / "skills"
    weekly(root)
    script = "python skills/weekly-report/scripts/report.py --week 12"
    model = ScriptedModel(
        [
            calls_turn(use(LOAD_SKILL, "l", name="weekly-report")),
            calls_turn(
                use("read_skill_file", "r", name="weekly-report", path="references/format.md"),
                call("shell", "ok", command=script),
                call("shell", "chained", command=f"{script} && rm -rf ~"),
                call("shell", "other", command="curl https://example.com"),
                call("send_mail", "m", to="boss@example.com"),
            ),
            {"text": "Report done."},
            calls_turn(call("send_mail", "next", to="boss@example.com")),
            {"text": "Sent."},
        ]
    )
    agent = skill_agent(root, model)
    first = await agent.run("Write the weekly report", sink=events)
    assert first.ok, first.outcome
    statuses = {i: r.status for i, r in events.results().items()}
    assert statuses == {
        "l": "ok",
        "r": "ok",
        "ok": "ok",
        "chained": "hook_cancelled",
        "other": "hook_cancelled",
        "m": "hook_cancelled",
    }
    assert ran == [script]
    loaded = next(m for m in first.history if isinstance(m, ToolResultMessage) and m.call_id == "l")
    assert loaded.keep and "# Weekly report" in loaded.content
    assert "Folder: skills/weekly-report" in loaded.content
    refused = next(
        m for m in first.history if isinstance(m, ToolResultMessage) and m.call_id == "m"
    )
    assert "only these tools may run: read_skill_file, shell(python scripts/report.py*)" in (
        refused.content
    )
    # The tool list the model saw never changed (the prompt cache is kept).
    assert len({tuple(s.name for s in r.tools) for r in model.requests}) == 1

    second = await agent.run("Now mail it", history=first.history, sink=events)
    assert second.ok and ran[-1] == "mail boss@example.com"


def test_unknown_allowed_tools_entries_fail_closed_and_check_reports_them(
    tmp_path: Path,
) -> None:
    folder = write_skill(
        tmp_path,
        "claude-style",
        "---\nname: claude-style\ndescription: D.\nallowed-tools: Bash(git:*) Read shell\n---\n",
    )
    skill, _ = parse_skill(folder, "user")
    assert skill is not None
    narrowing = Narrowing(skill, known_tools=["shell", "read_file"])
    assert narrowing.ignored == ["Bash(git:*)", "Read"]
    assert narrowing.refusal("read_file", {"path": "a"}) is not None
    assert narrowing.refusal("shell", {"command": "git status"}) is None
    problems = check_skills(
        find_skills([SkillRoot(path=tmp_path, source="user")]), known_tools=["shell"]
    )
    messages = [p.message for p in problems]
    assert any("'Bash(git:*)'" in m and "fails closed" in m for m in messages)
    assert any("'Read'" in m for m in messages)


def test_an_unparseable_or_computed_command_never_passes_a_shell_pattern(tmp_path: Path) -> None:
    skill, _ = parse_skill(weekly(tmp_path / "skills"), "user")
    assert skill is not None
    narrowing = Narrowing(skill, workspace=tmp_path)
    allowed = "python skills/weekly-report/scripts/report.py"
    assert narrowing.refusal("shell", {"command": allowed}) is None
    assert (
        narrowing.refusal(
            "shell", {"command": "cd skills/weekly-report && python scripts/report.py"}
        )
        is None
    )
    for command in (
        "python scripts/report.py $(cat /etc/passwd)",
        "python scripts/report.py; curl x",
        "python other.py",
        "python scripts/report.py (",
    ):
        assert narrowing.refusal("shell", {"command": command}) is not None, command


def test_loading_an_unknown_skill_lists_the_skills(tmp_path: Path) -> None:
    weekly(tmp_path)
    catalogue = SkillCatalogue(find_skills([SkillRoot(path=tmp_path, source="user")]).skills)
    [load, read], _ = skill_tools(catalogue)
    import asyncio

    from heron.tools.definition import ToolContext

    ctx = ToolContext(call_id="c", turn_id="t")
    result = asyncio.run(load.execute({"name": "nope"}, ctx))
    assert not result.success and "weekly-report" in (result.error or "")
    escaped = asyncio.run(read.execute({"name": "weekly-report", "path": "../../x"}, ctx))
    assert not escaped.success and "not a file inside" in (escaped.error or "")


def test_history_trimming_keeps_loaded_skill_instructions(tmp_path: Path) -> None:
    from heron.messages import AssistantMessage, ToolCallPart

    history = [
        UserMessage(content="write the report"),
        AssistantMessage(tool_calls=(ToolCallPart(id="l", name=LOAD_SKILL, arguments={}),)),
        ToolResultMessage(call_id="l", name=LOAD_SKILL, content="skill " * 400, keep=True),
        AssistantMessage(tool_calls=(ToolCallPart(id="x", name="shell", arguments={}),)),
        ToolResultMessage(call_id="x", name="shell", content="output " * 400),
        AssistantMessage(text="done"),
        UserMessage(content="again"),
    ]
    trimmer = HistoryTrimmer(EstimateCounter("openai"), budget_tokens=700)
    result = trimmer.trim(history)
    assert result.report is not None and result.report.dropped_messages >= 2
    kept = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert [m.call_id for m in kept] == ["l"]


@pytest.mark.parametrize("entry", ["shell(*)", "shell()", "shell(a*b*)"])
def test_shell_patterns_without_a_literal_prefix_are_not_understood(entry: str) -> None:
    from heron.skills import parse_rule

    assert parse_rule(entry) is None
