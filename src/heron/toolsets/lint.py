"""Checks that run after a code file is written, so the model sees its mistakes at once.

`Linters.check(path, text)` picks the checker by file extension: Python goes through ruff
(`python -m ruff check --output-format=json`, from the interpreter heron runs in), JSON, YAML and
TOML through their parsers, JavaScript through `node --check`. Findings come back as structured
`Finding`s ("line 10: F821 Undefined name `result`"). A checker that cannot run (missing,
crashed, timed out) is reported as unavailable with the reason — a check is never skipped
silently. Files of other types have no checker and get no report.

YAML is parsed, not loaded: custom tags such as CloudFormation's `!Ref` are valid YAML and must
not be reported as errors, so only the syntax is checked.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

__all__ = ["Finding", "LintReport", "Linters"]

MAX_FINDINGS = 50
"""Findings listed in one report; the rest are counted."""

_PYTHON = frozenset({".py", ".pyi"})
_JAVASCRIPT = frozenset({".js", ".mjs", ".cjs"})
_CHECKERS = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml"}


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One problem a checker found. `code` is the rule id when the checker has one."""

    line: int | None
    column: int | None = None
    code: str | None = None
    message: str

    def render(self) -> str:
        where = f"line {self.line}" if self.line is not None else "file"
        code = f"{self.code} " if self.code else ""
        return f"{where}: {code}{self.message}"

    def to_data(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "column": self.column,
            "code": self.code,
            "message": self.message,
        }


LintStatus = Literal["clean", "findings", "unavailable", "disabled"]


@dataclass(frozen=True, kw_only=True, slots=True)
class LintReport:
    """The outcome of checking one file."""

    checker: str
    status: LintStatus
    findings: tuple[Finding, ...] = ()
    note: str = ""
    """Why the checker was unavailable or disabled."""

    def render(self) -> str:
        if self.status == "clean":
            return f"check ({self.checker}): no problems found"
        if self.status in ("unavailable", "disabled"):
            return f"check ({self.checker}) {self.status}: {self.note}; the file was not checked"
        shown = [f"- {finding.render()}" for finding in self.findings[:MAX_FINDINGS]]
        more = len(self.findings) - len(shown)
        if more > 0:
            shown.append(f"- … and {more} more findings")
        count = len(self.findings)
        head = f"check ({self.checker}): {count} problem{'s' if count != 1 else ''} found"
        return head + "\n" + "\n".join(shown)

    def to_data(self) -> dict[str, Any]:
        return {
            "checker": self.checker,
            "status": self.status,
            "findings": [finding.to_data() for finding in self.findings],
            "note": self.note,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Linters:
    """Which checks run after a write, and how long a checker process may take."""

    enabled: bool = True
    timeout_s: float = 10.0
    ruff: Sequence[str] | None = None
    """Command that runs ruff; default `<this python> -m ruff`."""
    node: str | None = field(default_factory=lambda: shutil.which("node"))
    """Path of `node` for JavaScript checks; None when it is not installed."""

    def checker_for(self, path: Path) -> str | None:
        """The checker name for a file, or None when its type has no checker."""
        suffix = path.suffix.lower()
        if suffix in _PYTHON:
            return "ruff"
        if suffix in _JAVASCRIPT:
            return "node --check"
        return _CHECKERS.get(suffix)

    def check(self, path: Path, text: str) -> LintReport | None:
        """Check the file just written at `path` (whose content is `text`)."""
        checker = self.checker_for(path)
        if checker is None:
            return None
        if not self.enabled:
            return LintReport(checker=checker, status="disabled", note="checks are turned off")
        if checker == "ruff":
            return self._ruff(path)
        if checker == "node --check":
            return self._node(path)
        findings = _parse_check(checker, text)
        return LintReport(
            checker=checker, status="findings" if findings else "clean", findings=findings
        )

    def _run(
        self, checker: str, command: Sequence[str], cwd: Path
    ) -> subprocess.CompletedProcess[str] | LintReport:
        """The finished checker process, or an `unavailable` report saying why it did not run."""
        try:
            done = subprocess.run(
                list(command),
                cwd=cwd,
                capture_output=True,
                text=True,
                encoding="utf-8",
                errors="replace",
                timeout=self.timeout_s,
                check=False,
            )
        except FileNotFoundError:
            note = f"{command[0]} is not installed"
            return LintReport(checker=checker, status="unavailable", note=note)
        except subprocess.TimeoutExpired:
            note = f"timed out after {self.timeout_s:g} s"
            return LintReport(checker=checker, status="unavailable", note=note)
        except OSError as exc:
            return LintReport(checker=checker, status="unavailable", note=str(exc))
        return done

    def _ruff(self, path: Path) -> LintReport:
        base = list(self.ruff) if self.ruff is not None else [sys.executable, "-m", "ruff"]
        # --no-cache keeps ruff from writing a .ruff_cache into the user's workspace.
        command = [*base, "check", "--output-format=json", "--no-cache", "--quiet", str(path)]
        ran = self._run("ruff", command, path.parent)
        if isinstance(ran, LintReport):
            return ran
        stdout, stderr = ran.stdout, ran.stderr
        try:
            items = json.loads(stdout)
            if not isinstance(items, list):
                raise ValueError("not a list")
        except ValueError:
            why = _first_line(stderr) or _first_line(stdout) or "no output"
            return LintReport(checker="ruff", status="unavailable", note=f"ruff failed: {why}")
        findings = tuple(_ruff_finding(item) for item in items if isinstance(item, dict))
        status: LintStatus = "findings" if findings else "clean"
        return LintReport(checker="ruff", status=status, findings=findings)

    def _node(self, path: Path) -> LintReport:
        checker = "node --check"
        if self.node is None:
            return LintReport(checker=checker, status="unavailable", note="node is not installed")
        ran = self._run(checker, [self.node, "--check", str(path)], path.parent)
        if isinstance(ran, LintReport):
            return ran
        stderr = ran.stderr
        if not stderr.strip():
            return LintReport(checker=checker, status="clean")
        return LintReport(checker=checker, status="findings", findings=(_node_finding(stderr),))


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _ruff_finding(item: dict[str, Any]) -> Finding:
    location = item.get("location") or {}
    return Finding(
        line=location.get("row"),
        column=location.get("column"),
        code=item.get("code"),
        message=str(item.get("message", "")),
    )


_NODE_WHERE = re.compile(r":(\d+)\s*$")


def _node_finding(stderr: str) -> Finding:
    """Node prints `file:LINE`, the source line, a caret line, then `SyntaxError: …`."""
    lines = stderr.splitlines()
    where = _NODE_WHERE.search(lines[0]) if lines else None
    error = next((line.strip() for line in lines if re.match(r"^\w*Error\b", line)), "")
    return Finding(
        line=int(where.group(1)) if where else None,
        message=error or _first_line(stderr),
    )


_TOML_WHERE = re.compile(r"\(at line (\d+), column (\d+)\)")


def _parse_check(checker: str, text: str) -> tuple[Finding, ...]:
    """Parse a data file; a syntax error becomes one finding with its line and column."""
    try:
        if checker == "json":
            json.loads(text)
        elif checker == "toml":
            tomllib.loads(text)
        else:
            for _ in yaml.compose_all(text, Loader=yaml.SafeLoader):
                pass
    except json.JSONDecodeError as exc:
        return (Finding(line=exc.lineno, column=exc.colno, message=exc.msg),)
    except tomllib.TOMLDecodeError as exc:
        where = _TOML_WHERE.search(str(exc))
        message = _TOML_WHERE.sub("", str(exc)).strip()
        if where is None:
            return (Finding(line=None, message=message),)
        return (Finding(line=int(where[1]), column=int(where[2]), message=message),)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        message = f"{context}: {problem}" if context else str(problem)
        if mark is None:
            return (Finding(line=None, message=message),)
        return (Finding(line=mark.line + 1, column=mark.column + 1, message=message),)
    return ()
