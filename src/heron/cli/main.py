"""The `heron` command. Heavy modules are imported inside each command so `--help` stays fast."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_CANCELLED = 0, 1, 2, 130


def _add_agent_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        help="openai:MODEL, anthropic:MODEL, ollama:MODEL, openai-compatible:MODEL or "
        "scripted:FILE (default from config)",
    )
    p.add_argument("--base-url", help="endpoint for ollama: and openai-compatible: models")
    p.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="FILE.py",
        help="load every @heron.tool in FILE.py (repeatable; adds to tools.modules)",
    )
    p.add_argument("--config", type=Path, help="configuration file (default ./heron.toml)")
    p.add_argument("--state-dir", type=Path, help="state directory (audit, receipt keys)")
    p.add_argument("--autonomy", choices=["read-only", "supervised", "full"])
    p.add_argument("--parallel", choices=["off", "read-only", "all"])
    p.add_argument("--no-parallel", action="store_true", help="same as --parallel off")
    p.add_argument(
        "--receipts",
        action="store_true",
        default=None,
        help="sign successful tool results with HMAC receipts",
    )
    p.add_argument("--max-iterations", type=int, metavar="N")
    p.add_argument("--max-tool-result-chars", type=int, metavar="N")
    p.add_argument(
        "--exclude-tool",
        action="append",
        default=[],
        metavar="NAME",
        help="remove a tool from this run (repeatable)",
    )


def _add_builtin_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--builtin",
        action="append",
        default=[],
        choices=["perception", "execution", "connectors", "events"],
        metavar="SET",
        help="give the agent heron's SET tools: perception, execution, connectors, events "
        "(repeatable; replaces tools.builtin.sets)",
    )
    p.add_argument("--workspace", type=Path, help="root of the built-in tools (default: cwd)")
    p.add_argument(
        "--sandbox", choices=["process", "bwrap"], help="where shell, run_python and jobs run"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="heron",
        description="heron: an agent runtime built around tools.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run one prompt to a final answer")
    run.add_argument("prompt")
    run.add_argument(
        "--events",
        choices=["pretty", "jsonl"],
        default="pretty",
        help="live tool cards (pretty) or one JSON event per line (jsonl)",
    )
    run.add_argument(
        "--non-interactive",
        action="store_true",
        help="never prompt; approval-required calls are denied by policy",
    )
    run.add_argument(
        "--session",
        metavar="NAME",
        help="store the conversation in session NAME, resuming it if it exists "
        "(default: a new session)",
    )
    _add_agent_flags(run)
    _add_builtin_flags(run)

    tools = sub.add_parser("tools", help="list or show the tools an agent gets")
    tools_sub = tools.add_subparsers(dest="tools_command", required=True, metavar="ACTION")
    tl = tools_sub.add_parser("list", help="list tools")
    tl.add_argument("--json", action="store_true")
    _add_agent_flags(tl)
    _add_builtin_flags(tl)
    ts = tools_sub.add_parser("show", help="show one tool's full spec")
    ts.add_argument("name")
    _add_agent_flags(ts)
    _add_builtin_flags(ts)

    receipts = sub.add_parser("receipts", help="verify tool receipts")
    rsub = receipts.add_subparsers(dest="receipts_command", required=True, metavar="ACTION")
    rv = rsub.add_parser("verify", help="check a receipt against a tool, its arguments and output")
    rv.add_argument("receipt")
    rv.add_argument("--tool", required=True)
    rv.add_argument("--args", required=True, help="the executed arguments as JSON")
    out = rv.add_mutually_exclusive_group(required=True)
    out.add_argument("--output", help="the raw tool output")
    out.add_argument("--output-file", type=Path, help="file holding the raw tool output")
    rv.add_argument("--state-dir", type=Path, help="default: [state] dir of the configuration")
    rv.add_argument("--config", type=Path, help="configuration file (default ./heron.toml)")

    doctor = sub.add_parser("doctor", help="check the installation and configuration")
    doctor.add_argument("--config", type=Path)
    doctor.add_argument("--state-dir", type=Path)

    demo = sub.add_parser(
        "demo",
        help="the demos: quick start, then the event-driven agent (scripted models, real tools)",
        description="Without a name: the quick start, then the events demo (with --events jsonl, "
        "the quick start alone, so each JSON stream is one demo's).",
    )
    demo.add_argument(
        "which",
        nargs="?",
        choices=["quickstart", "events", "multimodal"],
        help="run one demo: quickstart (tools, approval, receipts), events (background job on "
        "the event bus) or multimodal (one file through the three multimodal paths)",
    )
    demo.add_argument("--events", choices=["pretty", "jsonl"], default="pretty")
    demo.add_argument(
        "--workspace", type=Path, help="quickstart: where the demo writes (default: a temp dir)"
    )
    demo.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        metavar="X",
        help="events: seconds per step of the background build (default 1; 3 steps)",
    )
    demo.add_argument(
        "--file", type=Path, help="multimodal: the file to ask about (default: a sample PDF)"
    )
    demo.add_argument("--question", help="multimodal: the question to ask about the file")

    from heron.cli.mcp_commands import add_mcp_parser

    add_mcp_parser(sub)

    from heron.cli.serve_commands import add_parsers as add_serve_parsers

    add_serve_parsers(sub, agent_flags=_add_agent_flags)

    from heron.cli import audit_commands, session_commands

    session_commands.add_parsers(sub, agent_flags=_add_agent_flags)
    audit_commands.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from heron.cli import commands, mcp_commands

    handlers: dict[str, Any] = {
        "run": commands.cmd_run,
        "tools": commands.cmd_tools,
        "receipts": commands.cmd_receipts,
        "doctor": commands.cmd_doctor,
        "demo": commands.cmd_demo,
        "mcp": mcp_commands.cmd_mcp,
    }
    from heron.cli import serve_commands

    handlers.update(serve_commands.handlers())
    from heron.cli import audit_commands, session_commands

    handlers.update(session_commands.handlers())
    handlers.update(audit_commands.handlers())
    try:
        code: int = handlers[args.command](args)
    except commands.UsageError as exc:
        sys.stderr.write(f"heron: {exc}\n")
        return EXIT_USAGE
    return code


if __name__ == "__main__":
    raise SystemExit(main())
