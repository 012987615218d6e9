"""The `heron` command: builds the parser from the command modules and dispatches.

Each command module adds its parsers and sets their `handler`; only the module of the command
given is imported (`COMMANDS`), and heavy modules are imported inside the handlers, so
`heron --help` and every command's start stay fast. A usage error exits 2 with one line on stderr; a
closed stdout (`heron sessions show NAME | head -1`) ends any command quietly.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "run one prompt to a final answer"),
    "tools": ("run", "list or show the tools an agent gets"),
    "chat": ("chat", "interactive chat with live tool cards and approvals"),
    "serve": ("serve", "run the always-on, event-driven agent"),
    "events": ("bus", "inspect the event bus"),
    "jobs": ("bus", "inspect background jobs"),
    "timers": ("bus", "inspect timers"),
    "sessions": ("sessions", "list, show, resume, fork, export, import sessions"),
    "mcp": ("mcp", "MCP servers: list, call, approve, scan, …"),
    "skills": ("skills", "Agent Skills: list, show, check, approve, revoke"),
    "audit": ("audit", "executed tool calls: who, in what context, why, what happened"),
    "messages": ("messages", "the messages the agent sent: list, show, act"),
    "receipts": ("receipts", "verify tool receipts"),
    "approvals": (
        "approvals",
        "list and answer requests to a human (approvals, questions) from any terminal",
    ),
    "agents": (
        "agents",
        "agent definitions and the sub-agents that ran (list, show, tree, cancel, approve)",
    ),
    "acp": ("acp", "serve the Agent Client Protocol on stdio, for editors (Zed, …)"),
    "doctor": ("doctor", "check the installation and configuration"),
    "gateway": ("gateway", "the HTTP API and web console of heron serve: hash a token"),
    "db": ("db", "the store's schema versions: migrate, status"),
    "demo": (
        "demo",
        "the demos: quick start, then the event-driven agent (scripted models, real tools)",
    ),
}
"""Each command, the `heron.cli` module that registers it, and its line in `heron --help`.
`heron --help` is printed from this table alone and `heron COMMAND` imports only its module,
so neither pays for the others' imports (pydantic, asyncio, the engine); a unit test checks
the lines against what the modules register."""


def _register(sub: argparse._SubParsersAction[argparse.ArgumentParser], module: str) -> None:
    # Imported here, by name: the one place a command's module is loaded.
    commands = importlib.import_module(f"heron.cli.{module}")
    if module == "sessions":
        commands.add_parser(sub, resume=importlib.import_module("heron.cli.chat").cmd_resume)
    elif hasattr(commands, "add_parsers"):
        commands.add_parsers(sub)
    else:
        commands.add_parser(sub)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or (`command`) one with that command's module only."""
    parser = argparse.ArgumentParser(
        prog="heron",
        description="heron: an agent runtime built around tools.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = (
        [COMMANDS[command][0]]
        if command in COMMANDS
        else list(dict.fromkeys(module for module, _ in COMMANDS.values()))
    )
    for module in modules:
        _register(sub, module)
    return parser


class _Listed(argparse.ArgumentParser):
    """A command as the overview lists it: its help line, no parser of its own. The overview
    only prints (help, or the missing command) and never parses a command's arguments, and a
    real parser per command is most of `heron --help`'s own time (argparse looks up its message
    catalogue on disk three times for each one)."""

    def __init__(self, **_: object) -> None:
        pass


def overview_parser() -> argparse.ArgumentParser:
    """The parser `heron --help` (and a missing command) print: every command's line, from
    `COMMANDS`, with no command module imported."""
    parser = argparse.ArgumentParser(
        prog="heron",
        description="heron: an agent runtime built around tools.",
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Listed
    )
    for name, (_, line) in COMMANDS.items():
        sub.add_parser(name, help=line)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()  # here, not at exit, so that a closed pipe is handled below
    except BrokenPipeError:
        from heron.cli.common import EXIT_BROKEN_PIPE, stdout_is_gone

        if not stdout_is_gone():
            raise
        # The reader has gone: say nothing more, and keep the interpreter's final flush from
        # complaining about the same pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _run(argv: Sequence[str] | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    first = words[0] if words else None
    if first is None or first in ("-h", "--help"):
        overview_parser().parse_args(words)  # prints the overview or the usage error, exits
    from heron.cli.common import EXIT_ERROR, EXIT_USAGE, UsageError, err
    from heron.errors import StoreError
    from heron.safety.secrets import install_log_masking

    install_log_masking()  # no known secret in a log line, whoever logs it
    args = build_parser(first).parse_args(words)
    try:
        code: int = args.handler(args)
    except UsageError as exc:
        err(str(exc))
        return EXIT_USAGE
    except StoreError as exc:  # a damaged entry, a store out of reach: its message, no trace
        err(str(exc))
        return EXIT_ERROR
    return code


if __name__ == "__main__":
    raise SystemExit(main())
