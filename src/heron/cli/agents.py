"""`heron agents list|show|tree|cancel|approve`: the agents that can be spawned and the
sub-agents that ran, from any terminal.

The records live in the state directory (`heron.always_on.subagents`), or on the shared store
`--store` names (`[store] url`: the workers of `heron serve --store`), so `tree` shows the
children of a `heron serve` or a `heron run` in another process, and `cancel` reaches them
there: it asks the process that runs the child (which cancels it and its descendants), or —
when that process is gone — ends the record itself. Project agent files are approved per state
directory (`approve`), as they sit in each host's project.

Exit status: 0 done; 1 unknown agent or sub-agent; 2 a usage mistake; 3 nothing to do (the
sub-agent had already ended, the file is approved as it is).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from heron.cli import common
from heron.cli.common import EXIT_ERROR, EXIT_OK

if TYPE_CHECKING:
    from heron.always_on.subagents.definitions import AgentDefinition
    from heron.always_on.subagents.ownership import Ownership
    from heron.always_on.subagents.store import SubagentRecord

EXIT_NOTHING_TO_DO = 3
_CANCEL_WAIT_S = 10.0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `agents` to the `heron` parser."""
    agents = sub.add_parser(
        "agents",
        help="agent definitions and the sub-agents that ran (list, show, tree, cancel, approve)",
        description="Exit status: 0 done, 1 unknown, 2 usage, 3 nothing to do.",
    )
    asub = agents.add_subparsers(dest="agents_command", required=True, metavar="ACTION")
    ls = asub.add_parser("list", help="the agents that can be spawned")
    ls.add_argument("--json", action="store_true", help="one JSON array")
    show = asub.add_parser("show", help="one agent definition in full (and its pending changes)")
    show.add_argument("name")
    tree = asub.add_parser("tree", help="sub-agents and their final or current status")
    tree.add_argument("--session", help="only the tree of this hosted session")
    tree.add_argument("--json", action="store_true", help="one JSON array, children nested")
    cancel = asub.add_parser("cancel", help="cancel a sub-agent and everything it started")
    cancel.add_argument("id")
    approve = asub.add_parser("approve", help="approve a project agent file as it is now")
    approve.add_argument("name")
    for parser in (ls, show, tree, cancel, approve):
        common.add_config_flags(parser)
    for parser in (tree, cancel):
        common.add_store_flag(parser)
    agents.set_defaults(handler=cmd_agents)


def cmd_agents(args: argparse.Namespace) -> int:
    handlers = {
        "list": _list,
        "show": _show,
        "tree": _tree,
        "cancel": _cancel,
        "approve": _approve,
    }
    return handlers[args.agents_command](args)


def _definitions(args: argparse.Namespace) -> dict[str, AgentDefinition]:
    from heron.always_on.subagents.definitions import AgentFileError, load_definitions
    from heron.always_on.subagents.runtime import GENERAL
    from heron.config.build import subagents_setup
    from heron.mcp.trust.sqlite_store import SqliteTrustStore

    config = common.load_config(args)
    project = Path(args.config).parent if vars(args).get("config") else None
    setup = subagents_setup(config, project)
    pins = SqliteTrustStore(common.state_dir(args), table="agent_pins")
    try:
        found = load_definitions(setup.entries, setup.agents_dir, pins)
    except AgentFileError as exc:
        raise common.UsageError(str(exc)) from exc
    return {GENERAL.name: GENERAL, **found}


def _list(args: argparse.Namespace) -> int:
    from heron.cli.render import print_json

    definitions = _definitions(args)
    if args.json:
        print_json([d.to_data() for d in definitions.values()])
        return EXIT_OK
    for d in definitions.values():
        model = d.model or "(the parent's model)"
        common.out(f"{d.name:<16} {d.trust:<10} {model:<28} {d.description}")
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    definition = _definitions(args).get(args.name)
    if definition is None:
        common.err(f"no agent named {args.name!r}")
        return EXIT_ERROR
    d = definition
    common.out(f"name:        {d.name}")
    common.out(f"description: {d.description}")
    common.out(f"model:       {d.model or '(the parent model)'}")
    common.out(f"tools:       {', '.join(d.tools) if d.tools is not None else '(all granted)'}")
    common.out(f"source:      {d.source}")
    common.out(f"trust:       {d.trust}")
    if d.trust == "unapproved":
        common.out(f"             takes effect after `heron agents approve {d.name}`")
    common.out("")
    common.out(d.prompt or "(no role prompt)")
    if d.changes:
        common.out("")
        common.out("changes since the approval:")
        common.out(d.changes)
    return EXIT_OK


def _store(args: argparse.Namespace) -> tuple[Any, Ownership]:
    """The records `--store` names (or the state directory's), and how to tell whether the
    runner of one still lives."""
    from heron.always_on.subagents.ownership import LeaseOwnership, ProcessOwnership

    url = common.store_url(args)
    if url is not None:
        from heron._support.postgres import open_pool
        from heron.always_on.subagents.postgres_store import PostgresSubagentStore
        from heron.sessions.postgres_leases import PostgresLeases

        pool = open_pool(url, max_size=2)
        leases = PostgresLeases(pool, owner="heron agents", ttl_s=0.0)  # reads leases only
        return PostgresSubagentStore(pool), LeaseOwnership(leases)
    from heron.always_on.subagents.sqlite_store import SqliteSubagentStore

    return SqliteSubagentStore.open_dir(common.state_dir(args)), ProcessOwnership()


def _nested(records: list[SubagentRecord]) -> list[dict[str, Any]]:
    nodes = {r.id: {**r.to_data(), "children": []} for r in records}
    roots: list[dict[str, Any]] = []
    for record in records:
        node = nodes[record.id]
        parent = nodes.get(record.parent) if record.parent is not None else None
        (parent["children"] if parent is not None else roots).append(node)
    return roots


def _tree(args: argparse.Namespace) -> int:
    from heron.cli.render import print_json

    store, _ = _store(args)
    try:
        records = store.list(root_session=args.session)
    finally:
        store.close()
    roots = _nested(records)
    if args.json:
        print_json(roots)
        return EXIT_OK

    def show(node: dict[str, Any], depth: int) -> None:
        status = node["status"] + (f" ({node['outcome']})" if node["outcome"] else "")
        usage = node["usage"]
        common.out(
            f"{'  ' * depth}{node['id']} {node['agent']} [{node['mode']}] {status} "
            f"- {usage['model_calls']} model calls, "
            f"{usage['input_tokens'] + usage['output_tokens']} tokens"
        )
        for child in node["children"]:
            show(child, depth + 1)

    for root in roots:
        show(root, 0)
    return EXIT_OK


def _cancel(args: argparse.Namespace) -> int:
    from heron.always_on.subagents.store import descendants

    store, ownership = _store(args)
    try:
        record = store.get(args.id)
        if record is None:
            common.err(f"no sub-agent {args.id!r}")
            return EXIT_ERROR
        if record.finished:
            common.err(f"sub-agent {record.id} had already ended: {record.status}")
            return EXIT_NOTHING_TO_DO
        if not ownership.alive(record):
            # Nobody runs it any more: end the record (and its unfinished descendants) here.
            for below in [*descendants(store, record.id), record]:
                store.finish(
                    below.id,
                    status="cancelled",
                    outcome=None,
                    result="",
                    error="cancelled by the operator; the process that ran it had ended",
                    usage=below.usage,
                    ended_at=time.time(),
                )
        else:
            store.request_cancel(record.id)
            until = time.monotonic() + _CANCEL_WAIT_S
            while not store.get(record.id).finished and time.monotonic() < until:
                time.sleep(0.1)  # another process ends it; there is no event to wait for
        final = store.get(record.id)
        common.out(f"{final.id} {final.agent}: {final.status}")
        return EXIT_OK if final.finished else EXIT_ERROR
    finally:
        store.close()


def _approve(args: argparse.Namespace) -> int:
    from heron.always_on.subagents.definitions import approve_file
    from heron.mcp.trust.sqlite_store import SqliteTrustStore

    definition = _definitions(args).get(args.name)
    if definition is None:
        common.err(f"no agent named {args.name!r}")
        return EXIT_ERROR
    if definition.trust in ("config", "approved"):
        common.err(f"agent {definition.name!r} needs no approval ({definition.trust})")
        return EXIT_NOTHING_TO_DO
    if definition.changes:
        common.out(definition.changes)
    approve_file(definition, SqliteTrustStore(common.state_dir(args), table="agent_pins"))
    common.out(f"approved {definition.name} ({definition.source})")
    return EXIT_OK
