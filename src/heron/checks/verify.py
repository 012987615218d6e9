"""Post-verification in another modality: after a tool changes files, check what it did by doing
something other than reading the text back.

`verified(tool, verifier)` wraps any `Tool`: it runs the tool and, when the tool succeeded,
hands the changed files to the verifier and appends a `Verification:` section to the output
(structured findings in `data["verification"]`). Hooks cannot change results, hence a wrapper.
The tool's success is kept: the change happened, and the model reads the findings to fix it.

`FileVerifier` checks by file type:

- **Python**: `python -m py_compile`, then the file's behaviour — a configured command (its
  tests), else its doctests (`python -m doctest`), else importing it in a subprocess (with
  `__name__` not `"__main__"`, so guarded script code does not run).
- **JSON / YAML / TOML**: loaded, not only parsed (duplicate keys, values that do not construct),
  then a configured command (the consuming program's own config check) when there is one.
- **HTML / Markdown**: rendered (Markdown by a tiny line-preserving converter) and the result
  checked with `html.parser`: unclosed and mismatched tags, duplicate ids, `#anchor` links
  without a target, relative links to files that do not exist (`heron.checks.render`).

Subprocesses run in a `heron.sandbox.Sandbox` (default: a `ProcessSandbox` with rlimits and a
timeout; pass the agent's own sandbox for namespaces). A check that cannot run is reported as
`unavailable`, never skipped silently.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import sys
import tempfile
import tomllib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, Literal, Protocol

import yaml

from heron.checks.render import Problems, markdown_to_html, render_check
from heron.sandbox.base import ResourceLimits, Sandbox, SandboxError
from heron.sandbox.process import ProcessSandbox
from heron.tools.definition import Tool, ToolContext, ToolResult, ToolSpec

__all__ = [
    "FileVerifier",
    "Finding",
    "VerifiedTool",
    "Verifier",
    "changed_paths",
    "markdown_to_html",
    "render_verification",
    "verified",
]

Status = Literal["passed", "failed", "unavailable", "skipped"]
MAX_FILE_BYTES = 2_000_000
MAX_PROBLEMS = 20
"""Problems reported per file and check; more are counted in one extra finding."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One verification outcome for one file."""

    path: str
    check: str
    """`compile`, `doctest`, `import`, `command`, `load` or `render`."""
    status: Status
    message: str = ""
    line: int | None = None

    def render(self) -> str:
        where = f"{self.path} line {self.line}" if self.line is not None else self.path
        text = f"- {where}: {self.check} {self.status}"
        return text + (f": {self.message}" if self.message else "")


class Verifier(Protocol):
    async def verify(self, paths: Sequence[Path], ctx: ToolContext) -> list[Finding]: ...


def render_verification(findings: Sequence[Finding]) -> str:
    """The `Verification:` section: a one-line tally, then one line per finding."""
    if not findings:
        return "Verification: nothing was checked."
    tally = Counter(f.status for f in findings)
    failed = tally["failed"]
    head = f"Verification: {failed} problem{'s' if failed != 1 else ''}, {tally['passed']} passed"
    head += "".join(f", {tally[s]} {s}" for s in ("unavailable", "skipped") if tally[s])
    return "\n".join([head, *(f.render() for f in findings)])


ChangedPaths = Callable[[dict[str, Any], ToolResult, ToolContext], list[Path]]


def changed_paths(arguments: dict[str, Any], result: ToolResult, ctx: ToolContext) -> list[Path]:
    """The files a call changed: `path`/`dst`/`paths` from the result's data, else the same
    keys (and `file`, `target`) from the arguments. Relative paths stay relative."""
    for source, keys in ((result.data, ("path", "dst")), (arguments, ("path", "dst", "file"))):
        if not isinstance(source, dict):
            continue
        names = [source[k] for k in (*keys, "target") if isinstance(source.get(k), str)]
        for key in ("paths", "files", "changed"):
            names += [v for v in source.get(key) or () if isinstance(v, str)]
        if names:
            return list(dict.fromkeys(Path(n) for n in names))
    return []


class VerifiedTool:
    """A tool whose successful calls are followed by verification of the files they changed."""

    def __init__(self, inner: Tool, verifier: Verifier, changed: ChangedPaths) -> None:
        self.inner = inner
        self.verifier = verifier
        self._changed = changed
        self._spec = dataclasses.replace(
            inner.spec,
            description=inner.spec.description.rstrip()
            + "\n\nAfter each successful call heron verifies the changed files (runs code, "
            "loads configuration, renders documents) and appends a 'Verification:' section.",
        )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return self.inner.validate(arguments)

    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        result = await self.inner.execute(arguments, ctx)
        if not result.success:
            return result
        paths = self._changed(arguments, result, ctx)
        try:
            findings = await self.verifier.verify(paths, ctx)
        except Exception as exc:  # the change happened; a broken verifier must not hide it
            shown = ", ".join(str(p) for p in paths) or "(no files)"
            findings = [
                Finding(path=shown, check="verifier", status="unavailable", message=repr(exc))
            ]
        data = result.data if isinstance(result.data, dict) else {}
        if result.data is not None and not isinstance(result.data, dict):
            data = {"result": result.data}  # keep non-mapping data beside the report
        report = {
            "ok": all(f.status != "failed" for f in findings),
            "findings": [dataclasses.asdict(f) for f in findings],
        }
        output = (result.output.rstrip() + "\n\n" if result.output else "") + render_verification(
            findings
        )
        return ToolResult.ok(output, data={**data, "verification": report})


def verified(tool: Tool, verifier: Verifier, *, changed: ChangedPaths = changed_paths) -> Tool:
    """Wrap `tool` so that its changed files are verified after every successful call."""
    return VerifiedTool(tool, verifier, changed)


# --- the file verifier ----------------------------------------------------------------------

_CONFIG = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml"}
_DOCUMENTS = {".html": False, ".htm": False, ".md": True, ".markdown": True}
_IMPORT = (
    "import importlib.util as u, os, sys; p = sys.argv[1]; sys.path.insert(0, os.path.dirname(p))"
    "; s = u.spec_from_file_location('heron_verified_module', p)"
    "; s.loader.exec_module(u.module_from_spec(s))"
)
Note = Callable[..., Finding]


class FileVerifier:
    """Verifies changed files by type (see the module docstring).

    `root` resolves relative paths and is the working directory of commands (default: the
    agent's workspace, else the current directory). `commands` maps glob patterns (matched
    against the path relative to root, and the file name) to argv lists; `{path}` and
    `{python}` in an argument are replaced by the file and the interpreter. With
    `import_modules=False`, Python files without a command or doctests are only compiled.
    """

    def __init__(
        self,
        *,
        root: Path | None = None,
        commands: Mapping[str, Sequence[str]] | None = None,
        sandbox: Sandbox | None = None,
        python: str = sys.executable,
        timeout_s: float = 60.0,
        import_modules: bool = True,
    ) -> None:
        self.root = root
        self.commands = dict(commands or {})
        self.sandbox = sandbox or ProcessSandbox(limits=ResourceLimits(max_processes=None))
        self.python = python
        self.timeout_s = timeout_s
        self.import_modules = import_modules

    async def verify(self, paths: Sequence[Path], ctx: ToolContext) -> list[Finding]:
        root = (self.root or ctx.workspace or Path.cwd()).resolve()
        findings: list[Finding] = []
        with tempfile.TemporaryDirectory(prefix="heron-verify-") as scratch:
            env = {  # bytecode goes to scratch, never into the workspace
                "PATH": os.environ.get("PATH", os.defpath),
                "HOME": os.environ.get("HOME", scratch),
                "LANG": "C.UTF-8",
                "PYTHONPYCACHEPREFIX": scratch,
                "PYTHONDONTWRITEBYTECODE": "1",
            }
            for path in paths:
                file = (root / path).resolve()
                shown = (
                    file.relative_to(root).as_posix() if file.is_relative_to(root) else str(file)
                )
                ctx.progress(f"verifying {shown} …")
                findings += await self._file(file, shown, root, env)
        return findings

    async def _file(self, file: Path, shown: str, root: Path, env: dict[str, str]) -> list[Finding]:
        def note(check: str, status: Status, message: str = "", line: int | None = None) -> Finding:
            return Finding(path=shown, check=check, status=status, message=message, line=line)

        async def run(check: str, argv: list[str], cwd: Path) -> list[Finding]:
            return await self._run(check, argv, cwd, env, note, file)

        text, why_not = await asyncio.to_thread(_read, file)
        if why_not:
            return [note("file", "skipped", why_not)]
        suffix = file.suffix.lower()
        command = self._command_for(file, shown)
        out: list[Finding] = []
        if suffix == ".py":
            out += await run("compile", [self.python, "-m", "py_compile", str(file)], file.parent)
            if out[-1].status != "passed":
                return out  # running a file that does not compile tells nothing more
            if command is None and ">>>" in text:
                out += await run("doctest", [self.python, "-m", "doctest", str(file)], file.parent)
            elif command is None and self.import_modules:
                out += await run("import", [self.python, "-c", _IMPORT, str(file)], file.parent)
        elif suffix in _CONFIG:
            out += _limit(_load_config(_CONFIG[suffix], text), note, "load")
        elif suffix in _DOCUMENTS:
            out += _limit(render_check(text, file.parent, _DOCUMENTS[suffix]), note, "render")
        elif command is None:
            return [note("file", "skipped", "no verifier for this file type")]
        if command is not None:
            out += await run("command", [a.replace("{path}", str(file)) for a in command], root)
        return out

    def _command_for(self, file: Path, shown: str) -> list[str] | None:
        for pattern, argv in self.commands.items():
            if fnmatch(shown, pattern) or fnmatch(file.name, pattern):
                return [a.replace("{python}", self.python) for a in argv]
        return None

    async def _run(
        self, check: str, argv: list[str], cwd: Path, env: dict[str, str], note: Note, file: Path
    ) -> list[Finding]:
        try:
            res = await self.sandbox.run(argv, cwd=cwd, env=env, timeout_s=self.timeout_s)
        except (OSError, SandboxError) as exc:
            return [note(check, "unavailable", f"could not run: {exc}")]
        shown = " ".join(argv)
        if res.timed_out:
            return [note(check, "failed", f"no result within {self.timeout_s:g} s")]
        if res.exit_code == 0:
            return [note(check, "passed", f"`{shown}`" if check == "command" else "")]
        text = (res.stderr + res.stdout).decode("utf-8", errors="replace")
        problems: Problems = []
        if check == "doctest":
            problems = _doctest_failures(text)
        elif check != "command":
            lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
            where = re.findall(
                rf'File "(?:{re.escape(str(file))}|{re.escape(file.name)})", line (\d+)', text
            )
            problems = [(_int(where), lines[-1])] if lines else []
        return _limit(
            problems or [(None, f"`{shown}` exited with {res.exit_code}:\n{_tail(text)}")],
            note,
            check,
        )


def _read(file: Path) -> tuple[str, str]:
    """The file's text, or why it cannot be verified."""
    if not file.is_file():
        return "", "no such file after the call"
    if file.stat().st_size > MAX_FILE_BYTES:
        return "", f"larger than {MAX_FILE_BYTES:,} bytes"
    return file.read_text(encoding="utf-8", errors="replace"), ""


def _limit(problems: Problems, note: Note, check: str) -> list[Finding]:
    if not problems:
        return [note(check, "passed")]
    out = [note(check, "failed", msg, line) for line, msg in problems[:MAX_PROBLEMS]]
    if len(problems) > MAX_PROBLEMS:
        out.append(note(check, "failed", f"… and {len(problems) - MAX_PROBLEMS} more problems"))
    return out


def _int(found: list[str]) -> int | None:
    return int(found[-1]) if found else None


def _tail(text: str, lines: int = 8) -> str:
    kept = [ln.rstrip() for ln in text.strip().splitlines()][-lines:]
    return "\n".join("    " + ln for ln in kept)[-1500:]


def _doctest_failures(output: str) -> Problems:
    """`(line, "<example> expected …, got …")` for each failed doctest example."""
    problems: Problems = []
    for block in output.split("*" * 70):
        lines = [ln.strip() for ln in block.strip().splitlines() if ln.strip()]
        if len(lines) < 3 or lines[1] != "Failed example:":
            continue
        line = _int(re.findall(r", line (\d+)", lines[0]))
        if "Exception raised:" in lines:
            problems.append((line, f"`{lines[2]}` raised {lines[-1]}"))
        else:
            problems.append((line, f"`{lines[2]}`: " + " ".join(lines[3:])))
    return problems


# --- configuration ----------------------------------------------------------------------------


class _YamlLoader(yaml.SafeLoader):
    """Safe loading that rejects duplicate keys and accepts application tags (`!Ref`)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key_node.value!r}", key_node.start_mark
                    )
                seen.add(key_node.value)
        return super().construct_mapping(node, deep)


_YamlLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def _unique(items: list[tuple[str, Any]]) -> dict[str, Any]:
    for key, count in Counter(k for k, _ in items).items():
        if count > 1:
            raise ValueError(f"duplicate key {key!r}")
    return dict(items)


def _load_config(kind: str, text: str) -> Problems:
    """Problems found loading a configuration file the way its program would."""
    try:
        if kind == "json":
            json.loads(text, object_pairs_hook=_unique)
        elif kind == "yaml":
            for _ in yaml.load_all(text, Loader=_YamlLoader):
                pass
        else:
            tomllib.loads(text)
    except json.JSONDecodeError as exc:
        return [(exc.lineno, exc.msg)]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        return [(mark.line + 1 if mark else None, exc.problem or str(exc))]
    except tomllib.TOMLDecodeError as exc:
        line = _int(re.findall(r"at line (\d+)", str(exc)))
        return [(line, re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc)))]
    except (ValueError, yaml.YAMLError) as exc:  # duplicate JSON keys; YAML without a mark
        return [(None, str(exc))]
    return []
