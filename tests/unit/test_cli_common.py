"""The command line's shared toolkit (`heron.cli.common`) and the seams of the `heron.cli`
package: command modules import only `common`, `render` and their own parts (`chat_requests`
is `chat`'s, `mcp_login` is `mcp`'s), and the library never imports the command line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from heron.cli.common import parse_since

SRC = Path(__file__).resolve().parents[2] / "src" / "heron"
SHARED = {"heron.cli.common", "heron.cli.flag_values", "heron.cli.render"}


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, at the top or inside functions (`from a import b` counts
    as `a.b` too, so submodules imported by name are seen)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _cli_modules(imports: set[str]) -> set[str]:
    """The `heron.cli` modules among `imports` (`heron.cli.common.err` is `heron.cli.common`)."""
    return {".".join(name.split(".")[:3]) for name in imports if name.startswith("heron.cli.")}


@pytest.mark.parametrize(
    "module",
    sorted(p.stem for p in (SRC / "cli").glob("*.py") if p.stem not in ("__init__", "main")),
)
def test_a_command_module_imports_only_the_shared_cli_modules(module: str) -> None:
    imported = _cli_modules(_imports(SRC / "cli" / f"{module}.py"))
    own = {m for m in imported if m.startswith(f"heron.cli.{module}_")}

    assert imported - SHARED - own - {f"heron.cli.{module}"} == set()


def test_common_imports_no_other_cli_module() -> None:
    assert _cli_modules(_imports(SRC / "cli" / "common.py")) == set()


def test_the_library_never_imports_the_command_line() -> None:
    offenders = {
        str(path.relative_to(SRC)): sorted(
            name for name in _imports(path) if name == "heron.cli" or name.startswith("heron.cli.")
        )
        for path in SRC.rglob("*.py")
        if path.relative_to(SRC).parts[0] != "cli"
    }

    assert {path: names for path, names in offenders.items() if names} == {}


def test_since_reads_spans_back_from_now_and_iso_times() -> None:
    now = 1_000_000.0
    assert parse_since("90s", now=now) == now - 90
    assert parse_since("15m", now=now) == now - 900
    assert parse_since("2h", now=now) == now - 7200
    assert parse_since("1.5d", now=now) == now - 129_600
    assert parse_since("1w", now=now) == now - 604_800
    assert parse_since("2024-05-01T14:30:00Z") == 1_714_573_800.0
    assert parse_since("2024-05-01T16:30:00+02:00") == 1_714_573_800.0
    with pytest.raises(ValueError, match="use a span back from now"):
        parse_since("last tuesday")
