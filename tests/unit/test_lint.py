"""Checks after writes: ruff for Python, parsers for JSON/YAML/TOML, node for JavaScript."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from heron import Tool, ToolContext, ToolResult
from heron.safety.workspace import Workspace
from heron.toolsets.files import file_tools
from heron.toolsets.lint import Finding, Linters


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


def tools_with(ws: Workspace, linters: Linters | None = None) -> dict[str, Tool]:
    return {t.spec.name: t for t in file_tools(ws, linters=linters)}


async def run(tool: Tool, **arguments: Any) -> ToolResult:
    return await tool.execute(tool.validate(arguments), ToolContext(call_id="c1", turn_id="t1"))


async def test_python_findings_come_back_in_the_write_result(ws: Workspace) -> None:
    code = "def total(items):\n    for item in items:\n        pass\n    return result\n"
    result = await run(tools_with(ws)["write_file"], path="calc.py", content=code)
    assert result.success
    assert (ws.root / "calc.py").read_text() == code
    assert result.output.splitlines() == [
        f"wrote {len(code)} bytes to calc.py (new file)",
        "check (ruff): 1 problem found",
        "- line 4: F821 Undefined name `result`",
        "The write succeeded; fix these problems with edit_file.",
    ]
    assert result.data["lint"]["findings"] == [
        {"line": 4, "column": 12, "code": "F821", "message": "Undefined name `result`"}
    ]
    assert not (ws.root / ".ruff_cache").exists()


async def test_an_edit_that_fixes_the_code_reports_it_clean(ws: Workspace) -> None:
    tools = tools_with(ws)
    await run(tools["write_file"], path="calc.py", content="def f():\n    return reslt\n")
    fixed = await run(tools["edit_file"], path="calc.py", old_string="reslt", new_string="1")
    assert fixed.success
    assert fixed.output.splitlines()[-1] == "check (ruff): no problems found"


async def test_python_syntax_errors_are_findings_too(ws: Workspace) -> None:
    report = Linters().check(_write(ws, "bad.py", "def f(:\n    pass\n"), "")
    assert report is not None and report.status == "findings"
    assert report.findings[0].line == 1


@pytest.mark.parametrize(
    ("ruff", "note"),
    [
        ([sys.executable, "-m", "heron_no_such_module"], "ruff failed: "),
        (["/nonexistent/ruff"], "/nonexistent/ruff is not installed"),
    ],
)
async def test_an_unavailable_ruff_is_said_never_skipped(
    ws: Workspace, ruff: list[str], note: str
) -> None:
    tools = tools_with(ws, Linters(ruff=ruff))
    result = await run(tools["write_file"], path="a.py", content="x = 1\n")
    assert result.success
    assert result.data["lint"]["status"] == "unavailable"
    assert note in result.output
    assert "the file was not checked" in result.output


def test_a_hanging_checker_is_stopped_at_the_timeout(ws: Workspace) -> None:
    hang = [sys.executable, "-c", "import time; time.sleep(30)", "--"]
    report = Linters(ruff=hang, timeout_s=0.3).check(_write(ws, "a.py", "x = 1\n"), "x = 1\n")
    assert report is not None
    assert (report.status, report.note) == ("unavailable", "timed out after 0.3 s")


@pytest.mark.parametrize(
    ("name", "text", "finding"),
    [
        (
            "a.json",
            '{\n  "a": 1,\n}\n',
            Finding(line=3, column=1, message="Expecting property name enclosed in double quotes"),
        ),
        ("a.toml", "[x]\nname = \n", Finding(line=2, column=8, message="Invalid value")),
        (
            "a.yaml",
            "a: 1\nb: [2\n",
            Finding(
                line=3,
                column=1,
                message="while parsing a flow sequence: expected ',' or ']', but got "
                "'<stream end>'",
            ),
        ),
    ],
)
def test_data_files_report_the_parse_error_with_line_and_column(
    ws: Workspace, name: str, text: str, finding: Finding
) -> None:
    report = Linters().check(_write(ws, name, text), text)
    assert report is not None
    assert report.findings == (finding,)


def test_yaml_custom_tags_are_valid_yaml_not_errors(ws: Workspace) -> None:
    text = "Resources:\n  Bucket:\n    Name: !Ref BucketName\n"
    report = Linters().check(_write(ws, "stack.yaml", text), text)
    assert report is not None and report.status == "clean"


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_javascript_syntax_errors_come_from_node(ws: Workspace) -> None:
    report = Linters().check(_write(ws, "app.js", "const a = 1;\nlet x = ;\n"), "")
    assert report is not None
    assert report.findings == (Finding(line=2, message="SyntaxError: Unexpected token ';'"),)
    clean = Linters().check(_write(ws, "ok.mjs", "export const a = 1;\n"), "")
    assert clean is not None and clean.status == "clean"


async def test_without_node_the_result_says_javascript_was_not_checked(ws: Workspace) -> None:
    tools = tools_with(ws, Linters(node=None))
    result = await run(tools["write_file"], path="app.js", content="let x = ;\n")
    assert result.success
    assert "check (node --check) unavailable: node is not installed" in result.output


async def test_other_files_get_no_check_and_disabled_checks_are_named(ws: Workspace) -> None:
    plain = await run(tools_with(ws)["write_file"], path="notes.md", content="# hi\n")
    assert plain.output == "wrote 5 bytes to notes.md (new file)"
    assert plain.data["lint"] is None
    off = tools_with(ws, Linters(enabled=False))
    result = await run(off["write_file"], path="a.py", content="x = y\n")
    assert "check (ruff) disabled: checks are turned off" in result.output


def test_long_finding_lists_are_capped_with_a_count(ws: Workspace) -> None:
    text = "".join(f"print(name_{n})\n" for n in range(60))
    report = Linters().check(_write(ws, "many.py", text), text)
    assert report is not None
    rendered = report.render().splitlines()
    assert rendered[0] == "check (ruff): 60 problems found"
    assert rendered[-1] == "- … and 10 more findings"


def _write(ws: Workspace, name: str, text: str) -> Path:
    path = ws.root / name
    path.write_text(text)
    return path
