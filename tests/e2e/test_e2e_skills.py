"""Agent Skills through the real `heron` command: a project's "weekly-report" skill is withheld
until approved, then found by `discover_tools`, loaded progressively (instructions, then a
reference file) and its script runs through the `shell` tool in the sandbox; `heron skills
list|show|check` report it, and a change after approval is withheld again with the diff."""

from __future__ import annotations

import json

from support.cli import Heron, assert_one_result_per_call

SKILL = """\
---
name: weekly-report
description: Build the weekly status report of the team, as a Markdown table.
license: MIT
allowed-tools: read_skill_file shell(python3 scripts/report.py*)
---
# Weekly report

1. Read `references/format.md` for the columns.
2. Run `python3 scripts/report.py --week N` (N: the ISO week); it prints the table.
3. Answer with the table as it is.
"""
SCRIPT = """\
import sys

week = sys.argv[sys.argv.index("--week") + 1]
print(f"| week | done | open |\\n|---|---|---|\\n| {week} | 7 | 2 |")
"""
FORMAT = "Columns: week, done, open. One row per week.\n"
BROKEN = """\
---
name: Broken_Name
description: Use this when: the user asks for something
---
Body.
"""


def project(heron: Heron) -> None:
    heron.write(".heron/skills/weekly-report/SKILL.md", SKILL)
    heron.write(".heron/skills/weekly-report/scripts/report.py", SCRIPT)
    heron.write(".heron/skills/weekly-report/references/format.md", FORMAT)
    heron.write(
        "heron.toml",
        """[agent]
autonomy = "full"

[tools.builtin]
sets = ["perception", "execution"]

[tools.shell]
unattended_risk = "medium"  # the skill's script is a program heron does not know

[discovery]
tool = "discover_tools"
prompt_tools = ["shell"]
""",
    )


def test_a_project_skill_is_approved_found_loaded_and_its_script_runs(heron: Heron) -> None:
    project(heron)
    listed = heron.run("skills", "list", "--json")
    assert listed.code == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert (row["name"], row["source"], row["status"], row["offered"]) == (
        "weekly-report",
        "project",
        "unapproved",
        False,
    )
    # Not approved: the agent is told nothing about it, and the operator is told why.
    withheld = heron.run(
        "run",
        "hi",
        "--model",
        heron.script("s0.yaml", [{"text": "hello", "expect": {"tools_exclude": ["load_skill"]}}]),
    )
    assert withheld.code == 0, withheld.stderr
    assert "project skill 'weekly-report'" in withheld.stderr and "not approved" in withheld.stderr

    approved = heron.run("skills", "approve", "weekly-report")
    assert approved.code == 0 and "approved weekly-report: 3 file(s) pinned" in approved.stdout

    command = "python3 .heron/skills/weekly-report/scripts/report.py --week 12"
    model = heron.script(
        "script.yaml",
        [
            {
                "tool_calls": [
                    {"id": "d1", "name": "discover_tools", "arguments": {"need": "weekly report"}}
                ],
                # Level one: the catalogue section names the skill; nothing else of it is sent.
                "expect": {"tools_include": ["weekly-report", "load_skill", "shell"]},
            },
            {
                "tool_calls": [
                    {"id": "l1", "name": "load_skill", "arguments": {"name": "weekly-report"}}
                ],
                "expect": {"last_message_contains": "weekly-report: Build the weekly status"},
            },
            {
                "tool_calls": [
                    {
                        "id": "r1",
                        "name": "read_skill_file",
                        "arguments": {"name": "weekly-report", "path": "references/format.md"},
                    }
                ],
                "expect": {"last_message_contains": "Run `python3 scripts/report.py --week N`"},
            },
            {
                "tool_calls": [{"id": "x1", "name": "shell", "arguments": {"command": command}}],
                "expect": {"last_message_contains": "Columns: week, done, open."},
            },
            {
                "tool_calls": [
                    {"id": "x2", "name": "shell", "arguments": {"command": "cat /etc/hostname"}}
                ],
                "expect": {"last_message_contains": "| 12 | 7 | 2 |"},
            },
            {"text": "| week | done | open |", "expect": {"last_message_contains": "only these"}},
        ],
    )
    done = heron.run("run", "Write this week's report", "--model", model, "--events", "jsonl")
    assert done.code == 0, done.stderr
    events = done.events()
    assert_one_result_per_call(events)
    results = {e["id"]: e for e in events if e["type"] == "tool_result"}
    assert results["d1"]["data"]["skills"] == ["weekly-report"]
    assert results["l1"]["status"] == "ok"
    assert results["l1"]["data"]["allowed_tools"] == [
        "read_skill_file",
        "shell(python3 scripts/report.py*)",
    ]
    assert results["r1"]["output"] == FORMAT
    assert results["x1"]["status"] == "ok" and "| 12 | 7 | 2 |" in results["x1"]["output"]
    # The sandbox line of the shell tool names where the script ran.
    assert "sandbox" in results["x1"]["output"]
    assert results["x2"]["status"] == "hook_cancelled"


def test_a_changed_skill_is_withheld_with_its_diff_and_check_lists_every_problem(
    heron: Heron,
) -> None:
    project(heron)
    assert heron.run("skills", "approve", "weekly-report").code == 0
    heron.write(".heron/skills/weekly-report/scripts/report.py", SCRIPT + "import os\n")
    heron.write(".heron/skills/broken/SKILL.md", BROKEN)

    show = heron.run("skills", "show", "weekly-report")
    assert show.code == 0, show.stderr
    assert "status:      changed (not offered)" in show.stdout
    assert "file changed: scripts/report.py" in show.stdout
    assert "+import os" in show.stdout

    check = heron.run("skills", "check")
    assert check.code == 1
    assert "an unquoted colon inside a value" in check.stdout
    assert "does not match its folder 'broken'" in check.stdout
    assert "must be lowercase letters" in check.stdout
