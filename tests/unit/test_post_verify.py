"""Post-verification in another modality: run code, load config, render documents."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from heron import Agent, ScriptedModel, ToolContext, ToolResult, tool
from heron.checks import FileVerifier, Finding, verified
from heron.checks.verify import markdown_to_html
from heron.messages import ToolResultMessage
from heron.safety.workspace import Workspace
from heron.tools.definition import Tool
from heron.toolsets.files import file_tools
from heron.toolsets.lint import Linters
from support.engine import Events, call, calls_turn


def ctx_in(root: Path, progress: list[str] | None = None) -> ToolContext:
    sink = progress.append if progress is not None else (lambda line: None)
    return ToolContext(call_id="c1", turn_id="t1", workspace=root, progress=sink)


async def check(root: Path, name: str, text: str, **options: Any) -> list[Finding]:
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(text)
    return await FileVerifier(**options).verify([Path(name)], ctx_in(root))


def summary(findings: list[Finding]) -> list[tuple[str, str, int | None]]:
    return [(f.check, f.status, f.line) for f in findings]


def bytecode_dirs(root: Path) -> list[Path]:
    return list(root.rglob("__pycache__"))


def write_tool(root: Path) -> Tool:
    tools = file_tools(Workspace(root), linters=Linters(enabled=False))
    return next(t for t in tools if t.spec.name == "write_file")


DOCTESTED = '''def add(a, b):
    """
    >>> add(1, 1)
    2
    >>> add(2, 2)
    5
    """
    return a + b
'''


async def test_a_failing_doctest_is_reported_with_its_line_and_values(tmp_path: Path) -> None:
    findings = await check(tmp_path, "calc.py", DOCTESTED)
    assert summary(findings) == [("compile", "passed", None), ("doctest", "failed", 5)]
    assert findings[1].message == "`add(2, 2)`: Expected: 5 Got: 4"


async def test_a_file_that_does_not_compile_is_not_run(tmp_path: Path) -> None:
    findings = await check(tmp_path, "bad.py", "x = 1\ndef f(:\n    pass\n")
    assert summary(findings) == [("compile", "failed", 2)]
    assert "SyntaxError" in findings[0].message


async def test_importing_catches_what_parsing_misses_without_running_main_code(
    tmp_path: Path,
) -> None:
    broken = await check(tmp_path, "broken.py", "import json\nimport no_such_module_here\n")
    assert summary(broken) == [("compile", "passed", None), ("import", "failed", 2)]
    assert "No module named 'no_such_module_here'" in broken[1].message
    script = "import pathlib\nif __name__ == '__main__':\n    pathlib.Path('ran').touch()\n"
    assert summary(await check(tmp_path, "tool.py", script))[-1] == ("import", "passed", None)
    assert not (tmp_path / "ran").exists()
    assert not bytecode_dirs(tmp_path)  # bytecode stays out of the workspace


async def test_a_configured_test_command_runs_instead_of_the_import(tmp_path: Path) -> None:
    test = "import calc; assert calc.double(2) == 4, 'double(2) is ' + str(calc.double(2))"
    commands = {"*.py": ["{python}", "-c", test]}
    good = await check(tmp_path, "calc.py", "def double(x):\n    return 2 * x\n", commands=commands)
    assert summary(good) == [("compile", "passed", None), ("command", "passed", None)]
    bad = await check(
        tmp_path, "calc.py", "def double(x):\n    return x + x + 1\n", commands=commands
    )
    assert bad[-1].status == "failed" and "AssertionError: double(2) is 5" in bad[-1].message


async def test_a_command_that_runs_too_long_is_stopped_and_reported(tmp_path: Path) -> None:
    findings = await check(tmp_path, "spin.py", "while True:\n    pass\n", timeout_s=0.3)
    assert findings[-1].status == "failed" and "no result within 0.3 s" in findings[-1].message


async def test_a_check_that_cannot_run_is_reported_unavailable(tmp_path: Path) -> None:
    findings = await check(tmp_path, "ok.py", "x = 1\n", python=str(tmp_path / "no-python"))
    assert findings[0].status == "unavailable" and "could not run" in findings[0].message


async def test_config_files_are_loaded_not_just_parsed(tmp_path: Path) -> None:
    dup_json = await check(tmp_path, "a.json", '{"port": 1, "port": 2}')
    assert dup_json[0].status == "failed" and "duplicate key 'port'" in dup_json[0].message
    bad_json = await check(tmp_path, "b.json", '{\n  "a": 1,\n  "b": \n}')
    assert summary(bad_json) == [("load", "failed", 4)]
    dup_yaml = await check(tmp_path, "c.yaml", "name: x\nports:\n  a: 1\nname: y\n")
    assert summary(dup_yaml) == [("load", "failed", 4)]
    assert "duplicate key 'name'" in dup_yaml[0].message
    bad_date = await check(tmp_path, "d.yml", "when: 2024-13-45\n")
    assert bad_date[0].status == "failed"  # valid syntax, but the date does not construct
    tagged = await check(tmp_path, "e.yaml", "Bucket: !Ref MyBucket\n---\nsecond: doc\n")
    assert summary(tagged) == [("load", "passed", None)]
    bad_toml = await check(tmp_path, "f.toml", 'a = 1\n[t]\nb = "x\n')
    assert summary(bad_toml) == [("load", "failed", 3)]


async def test_a_configured_config_command_runs_after_loading(tmp_path: Path) -> None:
    program = "import json, sys; cfg = json.load(open(sys.argv[1])); sys.exit(cfg['port'] < 1024)"
    commands = {"config/*.json": [sys.executable, "-c", program, "{path}"]}
    good = await check(tmp_path, "config/app.json", '{"port": 8080}', commands=commands)
    assert summary(good) == [("load", "passed", None), ("command", "passed", None)]
    low = await check(tmp_path, "config/app.json", '{"port": 80}', commands=commands)
    assert summary(low)[-1] == ("command", "failed", None)
    assert "exited with 1" in low[-1].message


HTML = """<!doctype html>
<html><body>
<h1 id="top">Title</h1>
<div class="x"><span>text</div>
<a href="#top">up</a> <a href="#nowhere">bad</a>
<img src="missing.png"><a href="https://example.org/x">out</a>
<p>open paragraph
<section>
</body></html>
"""


async def test_html_is_checked_for_structure_anchors_and_local_links(tmp_path: Path) -> None:
    findings = await check(tmp_path, "page.html", HTML)
    got = {(f.line, f.message) for f in findings}
    assert got == {
        (4, "<span> is not closed before </div>"),
        (5, "link to #nowhere: no such anchor"),
        (6, "link to missing.png: no such file"),
        (8, "<section> is not closed before </body>"),
    }


MARKDOWN = """# Guide

## Getting started

See [setup](#getting-started), [usage](#usage) and [notes](notes.md).
<details><summary>More</summary>

```html
<div> inside a code block is text </div>
```

![diagram](img/flow.png)
```python
print("never closed")
"""


async def test_markdown_is_rendered_and_its_links_and_anchors_checked(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("notes\n")
    findings = await check(tmp_path, "README.md", MARKDOWN)
    got = [(f.line, f.message) for f in findings]
    assert got == [
        (5, "link to #usage: no such anchor"),
        (6, "<details> is never closed"),
        (12, "link to img/flow.png: no such file"),
        (13, "code fence ``` is never closed"),
    ]
    html, _ = markdown_to_html("## A `b` c\n## A `b` c\n")
    assert html.splitlines() == ['<h2 id="a-b-c">A <code>b</code> c</h2>', *html.splitlines()[1:]]
    assert 'id="a-b-c-1"' in html


async def test_a_verified_write_appends_the_verification_to_the_result(
    tmp_path: Path, events: Events
) -> None:
    tool_ = verified(write_tool(tmp_path), FileVerifier())
    assert "Verification:" in tool_.spec.description
    model = ScriptedModel(
        [
            calls_turn(call("write_file", "c1", path="settings.json", content='{"a":1,"a":2}')),
            {"text": "ok"},
        ]
    )
    result = await Agent(model=model, tools=[tool_], autonomy="full", workspace=tmp_path).run(
        "write it", sink=events
    )
    content = next(m.content for m in result.history if isinstance(m, ToolResultMessage))
    assert content.startswith("wrote 13 bytes to settings.json (new file)\n")
    assert content.endswith(
        "\n\nVerification: 1 problem, 0 passed\n- settings.json: load failed: duplicate key 'a'"
    )
    assert any(e.message == "verifying settings.json …" for e in events.of("progress"))


async def test_verification_data_sits_beside_the_tools_own_data(tmp_path: Path) -> None:
    tool_ = verified(write_tool(tmp_path), FileVerifier())
    args = tool_.validate({"path": "ok.yaml", "content": "a: 1\n"})
    result = await tool_.execute(args, ctx_in(tmp_path))
    assert result.success and result.data["path"] == "ok.yaml"
    assert result.data["verification"] == {
        "ok": True,
        "findings": [
            {"path": "ok.yaml", "check": "load", "status": "passed", "message": "", "line": None}
        ],
    }


async def test_failed_calls_are_not_verified_and_unknown_types_are_said_to_be_skipped(
    tmp_path: Path,
) -> None:
    @tool()
    def touch(path: str) -> ToolResult:
        """Create a file.

        Args:
            path: Where.
        """
        if path.endswith(".py"):
            return ToolResult.fail("refusing to create Python files")
        (tmp_path / path).write_text("x")
        return ToolResult.ok(f"created {path}")

    tool_ = verified(touch, FileVerifier())
    failed = await tool_.execute({"path": "x.py"}, ctx_in(tmp_path))
    assert failed == ToolResult.fail("refusing to create Python files")
    other = await tool_.execute({"path": "notes.txt"}, ctx_in(tmp_path))
    assert other.output == (
        "created notes.txt\n\nVerification: 0 problems, 0 passed, 1 skipped\n"
        "- notes.txt: file skipped: no verifier for this file type"
    )
    assert json.dumps(other.data)  # structured data stays JSON-able


class BrokenVerifier:
    async def verify(self, paths: Sequence[Path], ctx: ToolContext) -> list[Finding]:
        raise RuntimeError("verifier crashed")


async def test_a_broken_verifier_does_not_hide_that_the_change_happened(tmp_path: Path) -> None:
    tool_ = verified(write_tool(tmp_path), BrokenVerifier())
    result = await tool_.execute({"path": "a.txt", "content": "x"}, ctx_in(tmp_path))
    assert result.success and (tmp_path / "a.txt").read_text() == "x"
    assert result.output.endswith(
        "Verification: 0 problems, 0 passed, 1 unavailable\n"
        "- a.txt: verifier unavailable: RuntimeError('verifier crashed')"
    )
