"""`heron --help` is printed from the command table alone; it must say what the modules say."""

from __future__ import annotations

import subprocess
import sys

import pytest

from heron.cli.main import COMMANDS, build_parser, overview_parser


def test_overview_help_is_the_whole_parsers_help() -> None:
    assert overview_parser().format_help() == build_parser().format_help()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_one_commands_parser_is_that_command_of_the_whole_parser(command: str) -> None:
    def command_help(parser: object) -> str:
        sub = next(a for a in parser._actions if a.dest == "command")  # type: ignore[attr-defined]
        return str(sub.choices[command].format_help())

    assert command_help(build_parser(command)) == command_help(build_parser())


def test_help_imports_no_command_module_and_no_pydantic() -> None:
    code = (
        "import sys\n"
        "from heron.cli.main import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = [m for m in sys.modules if m.startswith(('heron.cli.', 'pydantic', 'asyncio'))]\n"
        "print(sorted(loaded))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip().splitlines()[-1] == "['heron.cli.main']"
