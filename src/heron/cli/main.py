"""The `heron` command: builds the parser from the command modules and dispatches.

Each command module adds its parsers and sets their `handler`; heavy modules are imported inside
the handlers, so `heron --help` stays fast. A usage error exits 2 with one line on stderr; a
closed stdout (`heron sessions show NAME | head -1`) ends any command quietly.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from heron.cli import (
    acp,
    agents,
    approvals,
    audit,
    chat,
    demo,
    doctor,
    mcp,
    messages,
    receipts,
    run,
    serve,
    sessions,
)
from heron.cli.common import EXIT_BROKEN_PIPE, EXIT_USAGE, UsageError, err, stdout_is_gone


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="heron",
        description="heron: an agent runtime built around tools.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run.add_parsers(sub)  # run, tools
    chat.add_parser(sub)
    serve.add_parsers(sub)  # serve, events, jobs, timers
    sessions.add_parser(sub, resume=chat.cmd_resume)
    mcp.add_parser(sub)
    audit.add_parser(sub)
    messages.add_parser(sub)
    receipts.add_parser(sub)
    approvals.add_parser(sub)
    acp.add_parser(sub)
    agents.add_parser(sub)
    doctor.add_parser(sub)
    demo.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()  # here, not at exit, so that a closed pipe is handled below
    except BrokenPipeError:
        if not stdout_is_gone():
            raise
        # The reader has gone: say nothing more, and keep the interpreter's final flush from
        # complaining about the same pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _run(argv: Sequence[str] | None) -> int:
    from heron.safety.secrets import install_log_masking

    install_log_masking()  # no known secret in a log line, whoever logs it
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except UsageError as exc:
        err(str(exc))
        return EXIT_USAGE
    return code


if __name__ == "__main__":
    raise SystemExit(main())
