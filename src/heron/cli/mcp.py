"""`heron mcp …`: operator commands over the MCP client manager and the trust store.

- `list`      configured servers, how they are launched, their pin and credentials (starts nothing)
- `tools`     the tools of each server (pinned servers answer from their pin)
- `call`      call one tool by its namespaced name with JSON arguments
- `import`    convert an `mcpServers` JSON file into `[mcp.servers.*]` TOML (`--write` appends it)
- `status`    start every server and report its state (and its OAuth login)
- `login`     log in to an OAuth server: the operator consents in a browser (`--paste`)
- `logout`    revoke and delete an OAuth server's tokens
- `inspect`   what approving a server would pin: identity, tools, findings, diff to the pin
- `approve`   pin a server as it is now (shows what changed and the diff first)
- `revoke`    forget a server's pin
- `scan`      scan every server's definitions for injected instructions and shadowing
- `trifecta`  capability labels of the configured agent's tools; flags the lethal trifecta
- `serve`     serve heron's built-in tool sets to other MCP clients (stdio or Streamable HTTP)

Exit codes: 0 when all is well, 1 when something needs the operator (a server unavailable, a
failed call, a high-severity finding, a lethal trifecta), 2 for invocation mistakes.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from heron._support.limits import InputRejected, parse_json
from heron.cli import common, mcp_login
from heron.cli.common import BUILTIN_SETS, UsageError, err, out, when

if TYPE_CHECKING:
    from heron.config import HeronConfig
    from heron.mcp.client import McpClientManager
    from heron.mcp.config import McpServerConfig
    from heron.mcp.trust import Finding, PinCheck, ServerIdentity, ServerPin, ToolDefinition

EXIT_OK, EXIT_ATTENTION = 0, 1


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `heron mcp` and its actions to the `heron` parser."""
    mcp = sub.add_parser("mcp", help="MCP servers: list, call, approve, scan, …")
    actions = mcp.add_subparsers(dest="mcp_command", required=True, metavar="ACTION")
    mcp.set_defaults(handler=cmd_mcp)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
        common.add_config_flags(p)
        common.add_store_flag(p)  # where the OAuth tokens are (a shared store's, encrypted)
        return p

    action("list", "configured servers, their pins and credentials (starts nothing)")
    tools = action("tools", "tools of every (or the named) server")
    tools.add_argument("servers", nargs="*", metavar="SERVER")
    tools.add_argument("--json", action="store_true")
    call = action("call", "call one MCP tool: heron mcp call SERVER__TOOL '{\"arg\": 1}'")
    call.add_argument("name", metavar="SERVER__TOOL")
    call.add_argument("arguments", nargs="?", default="{}", metavar="JSON")
    call.add_argument("--json", action="store_true", help="print success, output and data")
    imp = action("import", "convert an mcpServers JSON file (Claude Desktop, Cursor, …)")
    imp.add_argument("file", type=Path)
    imp.add_argument(
        "--write", action="store_true", help="append the servers to the configuration file"
    )
    action("status", "start every server and report its state")
    mcp_login.add_arguments(
        action("login", "log in to an OAuth MCP server (you consent in a browser)"),
        action("logout", "revoke and delete an OAuth MCP server's tokens"),
    )
    for name, text in (
        ("inspect", "what approving SERVER would pin (tools, findings, diff); pins nothing"),
        ("approve", "pin SERVER as it is now, after showing what changed"),
        ("revoke", "forget SERVER's pin; it needs approval again"),
    ):
        action(name, text).add_argument("server", metavar="SERVER")
    action("scan", "scan every server's tool definitions (injection, shadowing)")
    trifecta = action("trifecta", "capability labels of the agent's tools; the lethal trifecta")
    trifecta.add_argument(
        "--tools", action="append", default=[], metavar="FILE.py", help="also these tools"
    )
    serve = action("serve", "serve heron's built-in tool sets as an MCP server")
    serve.add_argument(
        "sets",
        nargs="+",
        choices=BUILTIN_SETS,
        metavar="SET",
        help="perception, execution, connectors, events, planning and/or collaboration",
    )
    serve.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=0, help="HTTP port (default: a free one)")
    serve.add_argument("--workspace", type=Path, help="root of the tools (default: cwd)")
    serve.add_argument("--sandbox", choices=["process", "bwrap"])
    serve.add_argument(
        "--autonomy",
        choices=["read-only", "supervised", "full"],
        help="calls needing approval under it are refused; `full` runs every call",
    )


def cmd_mcp(args: argparse.Namespace) -> int:
    """Dispatch `heron mcp ACTION`."""
    import asyncio

    config = common.load_config(args)
    plain = {"list": _list, "import": _import, "revoke": _revoke}
    if args.mcp_command in plain:
        return plain[args.mcp_command](args, config)
    running = {
        "tools": _tools,
        "call": _call,
        "status": _status,
        "inspect": _inspect,
        "approve": _approve,
        "scan": _scan,
        "trifecta": _trifecta,
        "serve": _serve,
        "login": mcp_login.login,
        "logout": mcp_login.logout,
    }
    result: int = asyncio.run(running[args.mcp_command](args, config))
    return result


# -- shared -----------------------------------------------------------------------------------


def _manager(
    config: HeronConfig, servers: Sequence[str] = (), builtin_names: Sequence[str] = ()
) -> McpClientManager:
    """A manager over the enabled servers (or only `servers`, which must be configured)."""
    from heron.mcp.auth import McpAuth
    from heron.mcp.client import McpClientManager
    from heron.mcp.trust.pin_store import pin_store

    cfg = config.mcp
    enabled = cfg.enabled_servers()
    if servers:
        missing = [s for s in servers if s not in enabled]
        if missing:
            known = ", ".join(enabled) or "none"
            raise UsageError(
                f"no enabled MCP server named {', '.join(map(repr, missing))} "
                f"(configured and enabled: {known})"
            )
        cfg = cfg.model_copy(update={"servers": {s: enabled[s] for s in servers}})
    state_dir = config.state.path()
    return McpClientManager(
        cfg,
        trust=pin_store(state_dir, store_url=config.store.url),
        auth=McpAuth(cfg, state_dir=state_dir, store_url=config.store.url),
        builtin_names=tuple(builtin_names),
    )


def _summary(text: str) -> str:
    from heron.mcp.catalogue import summary_line

    return summary_line(text)


def _finding_line(f: Finding) -> str:
    excerpt = f" — {f.excerpt!r}" if f.excerpt else ""
    return f"[{f.severity}] {f.server}__{f.tool}: {f.message}{excerpt}"


# -- list, tools, call -----------------------------------------------------------------------


def _list(args: argparse.Namespace, config: HeronConfig) -> int:
    from datetime import UTC, datetime

    from heron.mcp.trust import launch_identity
    from heron.mcp.trust.pin_store import pin_store

    servers = config.mcp.servers
    if not servers:
        out("no MCP servers are configured ([mcp.servers.NAME] in heron.toml)")
        return EXIT_OK
    if not config.mcp.enabled:
        out("MCP is disabled ([mcp] enabled = false); servers as configured:")
    trust = pin_store(config.state.path(), store_url=config.store.url)
    now = datetime.now(UTC)
    for name, server in sorted(servers.items()):
        pin = trust.get(name)
        if not server.enabled:
            state = "disabled"
        elif pin is None:
            state = "not approved yet"
        else:
            state = f"approved {when(pin.approved_at)}, {len(pin.definitions)} tools"
        out(f"{name}  {launch_identity(server).launch}  [{state}]")
        problems = server.credential_problems(now)
        for cred_name, cred in sorted(server.credentials.items()):
            target = f"env {cred.env}" if cred.env is not None else f"header {cred.header}"
            expires = f", expires {cred.expires.isoformat()}" if cred.expires else ""
            scope = f", scope: {cred.scope}" if cred.scope else ""
            out(f"  credential {cred_name}: ${cred.from_env} -> {target}{expires}{scope}")
        for problem in problems:
            out(f"  problem: {problem}")
    return EXIT_OK


def _hint_flags(hints: Mapping[str, Any]) -> str:
    names = {
        "readOnlyHint": "read-only",
        "destructiveHint": "destructive",
        "idempotentHint": "idempotent",
        "openWorldHint": "open-world",
    }
    return ",".join(label for key, label in names.items() if hints.get(key) is True)


async def _tools(args: argparse.Namespace, config: HeronConfig) -> int:
    from heron.cli.render import print_json

    async with _manager(config, args.servers) as manager:
        tools, problems = await manager.tools()
    for server, reason in problems.items():
        err(f"mcp: MCP server {server!r} is unavailable: {reason}")
    if args.json:
        print_json(
            [
                {
                    "name": t.spec.name,
                    "server": t.server,
                    "description": t.spec.description,
                    "parameters": t.spec.parameters,
                    "hints": dict(t.hints),
                    "trusted": t.trusted,
                }
                for t in tools
            ]
        )
    else:
        for t in tools:
            flags = _hint_flags(t.hints)
            out(f"{t.spec.name}  [{flags}]  {_summary(t.spec.description)}")
    return EXIT_ATTENTION if problems else EXIT_OK


async def _call(args: argparse.Namespace, config: HeronConfig) -> int:
    import sys

    from heron.cli.render import print_json
    from heron.mcp.client import McpTool, ServerUnavailable
    from heron.safety.redact import scrub_text
    from heron.tools.definition import ToolArgumentsError, ToolContext

    server, sep, tool_name = args.name.partition("__")
    if not sep or not server or not tool_name:
        raise UsageError(f"name the tool as SERVER__TOOL, got {args.name!r}")
    try:
        arguments = parse_json(args.arguments)
    except InputRejected as exc:
        raise UsageError(f"the arguments are not JSON heron takes in: {exc.problem}") from exc
    if not isinstance(arguments, dict):
        raise UsageError("the arguments must be a JSON object")

    def progress(line: str) -> None:
        sys.stderr.write(f"progress: {scrub_text(line)}\n")

    async with _manager(config, [server]) as manager:
        try:
            definitions = await manager.definitions(server)
        except ServerUnavailable as exc:
            err(str(exc))
            return EXIT_ATTENTION
        definition = next((d for d in definitions if d.name == tool_name), None)
        cfg = manager.config(server)
        if definition is None or not cfg.tool_enabled(tool_name):
            names = ", ".join(d.prefixed for d in definitions if cfg.tool_enabled(d.name))
            raise UsageError(f"server {server!r} has no tool {tool_name!r}; its tools: {names}")
        tool = McpTool(manager, definition, trusted=cfg.trusted)
        try:
            validated = tool.validate(arguments)
        except ToolArgumentsError as exc:
            raise UsageError(f"invalid arguments: {'; '.join(exc.problems)}") from exc
        ctx = ToolContext(call_id="cli", turn_id="cli", channel="cli", progress=progress)
        result = await tool.execute(validated, ctx)
    if args.json:
        print_json(
            {
                "success": result.success,
                "output": result.output,
                "error": result.error,
                "data": result.data,
            }
        )
    elif result.success:
        out(result.output)
    else:
        err(f"{args.name} failed: {result.error}")
    return EXIT_OK if result.success else EXIT_ATTENTION


# -- import ---------------------------------------------------------------------------------


def _toml_value(value: Any) -> str:
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        # A JSON string is a valid TOML basic string (same escapes).
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{_toml_value(str(k))} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def servers_toml(servers: Mapping[str, McpServerConfig]) -> str:
    """`[mcp.servers.NAME]` tables for `servers` (only fields that differ from the defaults)."""
    blocks = []
    for name, server in servers.items():
        fields = server.model_dump(exclude_defaults=True)
        lines = [f"[mcp.servers.{name}]"]
        lines += [f"{key} = {_toml_value(value)}" for key, value in fields.items()]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def _import(args: argparse.Namespace, config: HeronConfig) -> int:
    import tomllib

    from heron.config import PROJECT_FILE, ConfigError, load_config
    from heron.mcp.config import McpConfigError, import_mcp_json

    try:
        servers = import_mcp_json(args.file)
    except McpConfigError as exc:
        raise UsageError(str(exc)) from exc
    text = servers_toml(servers)
    if not args.write:
        out(text.rstrip("\n"))
        return EXIT_OK
    target: Path = args.config or Path.cwd() / PROJECT_FILE
    existing = ""
    if target.is_file():
        existing = target.read_text(encoding="utf-8")
        current = tomllib.loads(existing).get("mcp", {}).get("servers", {})
        clash = sorted(set(current) & set(servers))
        if clash:
            raise UsageError(
                f"{target} already configures {', '.join(map(repr, clash))}; "
                "rename or remove them first"
            )
    separator = "" if not existing else ("\n" if existing.endswith("\n") else "\n\n")
    target.write_text(existing + separator + text, encoding="utf-8")
    try:
        load_config(config_file=target)
    except ConfigError as exc:
        # Never leave a broken configuration behind.
        target.write_text(existing, encoding="utf-8")
        raise UsageError(f"the imported servers do not fit {target}: {exc}") from exc
    out(f"added {len(servers)} MCP server(s) to {target}: {', '.join(servers)}")
    out("each is approved (pinned) the first time it starts; see `heron mcp inspect NAME`")
    return EXIT_OK


# -- status, inspect, approve, revoke, scan ----------------------------------------------------


async def _status(args: argparse.Namespace, config: HeronConfig) -> int:
    import contextlib

    from heron.mcp.client import ServerUnavailable

    async with _manager(config) as manager:
        for server in manager.servers:
            with contextlib.suppress(ServerUnavailable):  # shown in its status below
                await manager.start(server)
        rows = manager.status()
    if not rows:
        out("no enabled MCP servers are configured")
    for row in rows:
        parts = [row.name, row.state, row.transport]
        if row.server_version:
            parts.append(row.server_version)
        if row.tools is not None:
            parts.append(f"{row.tools} tools")
        out("  ".join(parts))
        if row.login is not None:
            out(f"  login: {row.login.detail}")
        if row.last_error:
            out(f"  error: {row.last_error}")
    return EXIT_OK if all(r.state == "running" for r in rows) else EXIT_ATTENTION


def _show_inspection(
    server: str,
    identity: ServerIdentity,
    definitions: Sequence[ToolDefinition],
    findings: Sequence[Finding],
    check: PinCheck,
    pin: ServerPin | None,
) -> None:
    out(f"server: {server}")
    out(f"launch: {identity.launch}")
    if identity.package_version:
        out(f"package: {identity.package_version}")
    if identity.server_version:
        out(f"reports: {identity.server_version}")
    if check.status == "unpinned":
        out("pin: none (never approved)")
    elif check.status == "match":
        assert pin is not None
        out(f"pin: matches the pin approved {when(pin.approved_at)}")
    else:
        assert pin is not None
        out(f"pin: CHANGED since it was approved {when(pin.approved_at)}:")
        for change in check.changes:
            out(f"  - {change}")
    out(f"tools ({len(definitions)}):")
    for d in sorted(definitions, key=lambda d: d.name):
        out(f"  {d.prefixed} - {_summary(d.description)}")
    if findings:
        out(f"findings ({len(findings)}):")
        for f in findings:
            out(f"  {_finding_line(f)}")
    else:
        out("findings: none")
    if check.diff:
        out("diff (pinned -> live):")
        out(check.diff)


async def _inspected(
    config: HeronConfig, server: str
) -> tuple[ServerIdentity, tuple[ToolDefinition, ...], list[Finding], PinCheck] | None:
    """What `server` says now and how it compares to its pin, shown; None (reported) when it
    cannot be reached."""
    from heron.mcp.client import ServerUnavailable
    from heron.mcp.trust.pin_store import pin_store

    async with _manager(config, [server]) as manager:
        try:
            identity, definitions, findings, check = await manager.inspect(server)
        except ServerUnavailable as exc:
            err(str(exc))
            return None
    pin = pin_store(config.state.path(), store_url=config.store.url).get(server)
    _show_inspection(server, identity, definitions, findings, check, pin)
    return identity, definitions, findings, check


async def _inspect(args: argparse.Namespace, config: HeronConfig) -> int:
    return EXIT_ATTENTION if await _inspected(config, args.server) is None else EXIT_OK


async def _approve(args: argparse.Namespace, config: HeronConfig) -> int:
    from heron.mcp.trust.pin_store import pin_store

    inspected = await _inspected(config, args.server)
    if inspected is None:
        return EXIT_ATTENTION
    identity, definitions, _findings, check = inspected
    if check.status == "match":
        out(f"{args.server} is already approved as it is; nothing changed")
        return EXIT_OK
    # Pin exactly what was shown above, not a second listing that could differ.
    pin = pin_store(config.state.path(), store_url=config.store.url).approve(
        args.server, identity, definitions
    )
    out(f"approved {args.server}: {len(pin.definitions)} tools pinned (sha256 {pin.digest[:16]})")
    return EXIT_OK


def _revoke(args: argparse.Namespace, config: HeronConfig) -> int:
    from heron.mcp.trust.pin_store import pin_store

    if pin_store(config.state.path(), store_url=config.store.url).revoke(args.server):
        out(f"revoked the pin of {args.server}; it needs approval again")
        return EXIT_OK
    err(f"{args.server!r} has no pin")
    return EXIT_ATTENTION


async def _scan(args: argparse.Namespace, config: HeronConfig) -> int:
    from heron.mcp.client import ServerUnavailable
    from heron.mcp.trust import scan_definitions

    builtin = [t.spec.name for t in common.user_tools(config)]
    definitions: list[ToolDefinition] = []
    unscanned: dict[str, str] = {}
    changed: list[str] = []
    async with _manager(config, builtin_names=builtin) as manager:
        for server in manager.servers:
            # What each server says now, refused or not: listing runs none of its tools.
            try:
                _identity, listed, _findings, check = await manager.inspect(server)
            except ServerUnavailable as exc:
                unscanned[server] = exc.reason
                continue
            definitions.extend(listed)
            if check.status == "changed":
                changed.append(server)
    for server, reason in unscanned.items():
        err(f"mcp: MCP server {server!r} was not scanned: {reason}")
    for server in changed:
        err(f"mcp: MCP server {server!r} changed since it was approved; see `heron mcp inspect`")
    findings = scan_definitions(definitions, builtin_names=builtin)
    if not findings:
        out("no findings")
    for f in findings:
        out(_finding_line(f))
    high = any(f.severity == "high" for f in findings)
    return EXIT_ATTENTION if high or unscanned else EXIT_OK


# -- the lethal trifecta ------------------------------------------------------------------------


async def _trifecta(args: argparse.Namespace, config: HeronConfig) -> int:
    from heron.mcp.doctor import agent_capabilities
    from heron.mcp.trust import lethal_trifecta

    builtin = common.user_tools(config)
    labels, problems = await agent_capabilities(config, builtin, config.state.path())
    for problem in problems:
        err(f"mcp: {problem}")
    for name, tool_labels in sorted(labels.items()):
        out(f"{name}: {', '.join(sorted(tool_labels)) or '-'}")
    report = lethal_trifecta(labels)
    out(report.describe())
    return EXIT_ATTENTION if report.present else EXIT_OK


# -- serve ------------------------------------------------------------------------------------


async def _serve(args: argparse.Namespace, config: HeronConfig) -> int:
    from heron._support.state import open_db
    from heron.audit.executions import ExecutionAuditTrail
    from heron.audit.sqlite_store import SqliteExecutionStore
    from heron.config.build import lifecycle_parts, open_builtin
    from heron.mcp.server import ToolServer

    # `--workspace`, `--sandbox` and `--autonomy` are in `config` already (`load_config`).
    sets = list(dict.fromkeys(args.sets))
    builtin_cfg = config.tools.builtin.model_copy(update={"sets": sets})
    config = config.model_copy(
        update={"tools": config.tools.model_copy(update={"builtin": builtin_cfg})}
    )
    state_dir = config.state.path()
    with common.library_errors():
        builtin = await open_builtin(config, aliases=True)  # the collaboration profile's names
    assert builtin is not None  # at least one set is named
    # The collaboration profile also drives sub-agents (sync, or async with
    # get_subagent_status: an MCP client receives no events), when agents are defined.
    children = common.open_children(config) if "collaboration" in sets else None
    served = builtin.all_tools()
    if children is not None:
        served = [*served, *children.tools("mcp/collaboration")]
    name = "heron-" + "-".join(builtin_cfg.sets)
    db = open_db(state_dir)
    try:
        # The agent's own assembly: approval and its audit, telemetry, receipts, the knobs.
        with common.library_errors():
            parts = lifecycle_parts(config, tools=served, receipts="runtime")
        # Every executed call in the execution audit (`heron audit --session mcp:NAME`).
        audit = ExecutionAuditTrail(
            SqliteExecutionStore(db), session=f"mcp:{name}", operator=f"mcp:{args.transport}"
        )
        server = ToolServer(
            served,
            name=name,
            approval=parts.approval,
            observer=parts.observer,
            receipts=parts.receipts.signer() if parts.receipts is not None else None,
            spill=builtin.spill,
            workspace=builtin.workspace,
            knobs=parts.knobs,
            audit=audit,
        )
        await server.serve(args.transport, host=args.host, port=args.port)
    finally:
        if children is not None:
            await children.aclose()
        await builtin.aclose()
        db.close()
    return EXIT_OK
