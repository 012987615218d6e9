"""`heron run PROMPT` (one turn to a final answer), `heron tools list|show` (the tools the
configured agent gets) and `heron tools search` (what discovery finds in a catalogue file)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from heron.cli import common
from heron.cli.common import EXIT_CANCELLED, EXIT_ERROR, EXIT_OK, UsageError

if TYPE_CHECKING:
    from heron.agent import Agent
    from heron.sessions.session import CliSession
    from heron.tools.definition import ToolSpec
    from heron.turn.events import BaseEvent


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `run` and `tools` to the `heron` parser."""
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
    common.add_agent_flags(run)
    run.set_defaults(handler=cmd_run)

    tools = sub.add_parser("tools", help="list or show the tools an agent gets")
    tools_sub = tools.add_subparsers(dest="tools_command", required=True, metavar="ACTION")
    listing = tools_sub.add_parser("list", help="list tools")
    listing.add_argument("--json", action="store_true")
    common.add_agent_flags(listing)
    show = tools_sub.add_parser("show", help="show one tool's full spec")
    show.add_argument("name")
    common.add_agent_flags(show)
    search = tools_sub.add_parser(
        "search",
        help="rank a catalogue file's tools for needs in plain words, as discover_tools does",
        description="FILE is JSON: an object mapping a server name to that server's "
        'tools/list result (a list of {name, description, inputSchema}, or {"tools": [...]}).',
    )
    search.add_argument("--catalogue", type=Path, required=True, metavar="FILE")
    needs = search.add_mutually_exclusive_group(required=True)
    needs.add_argument("--query", metavar="TEXT", help="one need")
    needs.add_argument(
        "--queries",
        type=Path,
        metavar="FILE.jsonl",
        help='one {"query": ...} per line; prints one JSON line of ranked results per query',
    )
    search.add_argument("--limit", type=int, default=5, metavar="K", help="results per query")
    search.add_argument("--json", action="store_true", help="JSON output for --query")
    tools.set_defaults(handler=cmd_tools)


def cmd_run(args: argparse.Namespace) -> int:
    from heron.cli.render import JsonLinesRenderer, PrettyRenderer
    from heron.turn.approval import Approver, NoApprover, TerminalApprover

    config = common.require_model(common.load_config(args))
    renderer: Any = JsonLinesRenderer() if args.events == "jsonl" else PrettyRenderer()
    approver: Approver = NoApprover()
    if not args.non_interactive and common.has_tty():
        approver = TerminalApprover(before_prompt=renderer.pause)
    tools = common.user_tools(config)

    async def run() -> int:
        session = common.open_session(config.state.path(), args.session)
        children = None
        try:
            children = common.open_children(config)
            own = children.tools(session.name) if children is not None else []
            async with common.open_agent(config, approver=approver, tools=[*tools, *own]) as agent:
                session.attach(agent)
                code = await run_prompt(agent, args.prompt, renderer, session=session)
                if children is not None:
                    await common.settle_children(children, config.subagents.run_deadline_s)
                return code
        finally:
            if children is not None:
                await children.aclose()
            session.close()
            common.announce_session(session, always=args.events == "pretty")

    try:
        return asyncio.run(run())
    except common.session_errors() as exc:
        return common.session_failed(exc)


async def run_prompt(
    agent: Agent, prompt: str, renderer: Any, *, session: CliSession | None = None
) -> int:
    """Run one turn (stored and audited in `session` when given); the first Ctrl-C cancels
    the step cleanly, a second one exits."""
    from heron.turn.cancel import CancelScope

    cancel = CancelScope()
    loop = asyncio.get_running_loop()
    loop.set_default_executor(common.DaemonThreadExecutor())
    reader_gone = False

    def sink(event: BaseEvent) -> None:
        # A closed stdout (`heron run … | head`) means nobody reads on: stop the run cleanly
        # (every call answered, the session valid) instead of working on for nobody.
        nonlocal reader_gone
        if reader_gone:
            return
        try:
            renderer(event)
        except BrokenPipeError:
            reader_gone = True
            cancel.cancel("the reader of heron's output has gone")

    def on_sigint() -> None:
        if cancel.cancelled:
            renderer.close()
            if session is not None:
                session.abandon()
            os._exit(EXIT_CANCELLED)
        cancel.cancel("interrupted by the operator (Ctrl-C)")

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        if session is None:
            outcome = (await agent.run(prompt, sink=sink, cancel=cancel, channel="cli")).outcome
        else:
            outcome = await session.run_turn(agent, prompt, sink=sink, cancel=cancel, channel="cli")
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        if not reader_gone:
            renderer.close()
    if reader_gone:
        raise BrokenPipeError("stdout closed")  # `heron` exits quietly (cli/main.py)
    if outcome.status == "final":
        return EXIT_OK
    return EXIT_CANCELLED if outcome.status == "cancelled" else EXIT_ERROR


def cmd_tools(args: argparse.Namespace) -> int:
    if args.tools_command == "search":
        return _search(args)
    from heron.cli.render import print_json, tool_line
    from heron.models.scripted import ScriptedModel
    from heron.turn.approval import NoApprover

    config = common.load_config(args)
    tools = common.user_tools(config)
    # Listing asks no model anything: without a configured one, a script with no turns will do.
    model = ScriptedModel([], name="none") if config.agent.model is None else None

    async def assemble() -> Agent:
        # Listing needs no running server afterwards (pinned servers are not even started).
        async with common.open_agent(
            config, approver=NoApprover(), tools=tools, model=model
        ) as agent:
            return agent

    specs = asyncio.run(assemble()).registry.specs()
    if args.tools_command == "show":
        spec = next((s for s in specs if s.name == args.name), None)
        if spec is None:
            raise UsageError(f"no tool named {args.name!r}; see `heron tools list`")
        print_json(_spec_json(spec))
        return EXIT_OK
    if args.json:
        print_json([_spec_json(s) for s in specs])
        return EXIT_OK
    for spec in specs:
        flags, first = tool_line(spec)
        common.out(f"{spec.name:28} {spec.owner:10} {flags:28} {first}")
    return EXIT_OK


MAX_QUERIES_BYTES = 16 * 1024 * 1024
"""A `--queries` file read at most."""


def _read_queries(path: Path) -> list[str]:
    from heron._support.folder_files import open_regular, read_at_most

    try:
        with open_regular(path, follow=True) as (handle, size):  # never /dev/zero or a FIFO
            lines = read_at_most(handle, size, MAX_QUERIES_BYTES).decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--queries {path}: {exc}") from exc
    queries: list[str] = []
    bad: list[int] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            item = None
        if isinstance(item, dict) and isinstance(item.get("query"), str):
            queries.append(item["query"])
        else:
            bad.append(n)
    if bad:
        shown = ", ".join(map(str, bad[:10])) + (" …" if len(bad) > 10 else "")
        raise UsageError(f'--queries {path}: lines {shown} are not {{"query": "..."}} objects')
    return queries


def _search(args: argparse.Namespace) -> int:
    from heron.discovery import CatalogueError, search_catalogue

    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    queries = [args.query] if args.query is not None else _read_queries(args.queries)
    try:
        rankings = search_catalogue(args.catalogue, queries, limit=args.limit)
        if args.queries is not None or args.json:
            for ranking in rankings:
                line = [r.to_json() for r in ranking.results]
                common.out(json.dumps(line, ensure_ascii=False))
            return EXIT_OK
        for ranking in rankings:
            if not ranking.found:
                common.out(f"nothing close to {ranking.query!r} ({ranking.mode}); the servers:")
                for server in ranking.directory:
                    common.out(f"  {server.server} ({server.tools} tools): {server.summary}")
                continue
            common.out(f"{ranking.query!r} ({ranking.mode}):")
            for r in ranking.results:
                mark = " (exact name)" if r.exact else ""
                common.out(f"  {r.score:7.3f}  {r.server}__{r.name}{mark}")
    except CatalogueError as exc:
        raise UsageError(f"--catalogue: {exc}") from exc
    return EXIT_OK


def _spec_json(spec: ToolSpec) -> dict[str, Any]:
    from heron.cli.render import annotation_flags

    return {
        "name": spec.name,
        "owner": spec.owner,
        "description": spec.description,
        "parameters": spec.parameters,
        "annotations": annotation_flags(spec),
        "runtime_args": list(spec.runtime_args),
        "runs_in": spec.runs_in,
    }
