"""Implementations of the CLI commands."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

from heron._support.state import default_state_dir, open_db
from heron.agent import Agent
from heron.audit.approvals import AuditStore
from heron.cli.render import JsonLinesRenderer, PrettyRenderer, print_json
from heron.config import ConfigError, HeronConfig, load_config
from heron.errors import HeronError
from heron.models.base import Model, ModelError
from heron.tools.definition import Tool, ToolDefinitionError
from heron.tools.loader import load_tools
from heron.tools.registry import ActivatedToolSet, ToolRegistry
from heron.turn.approval import Approver, NoApprover, TerminalApprover
from heron.turn.cancel import CancelScope
from heron.turn.receipts import ReceiptKeyStore, ReceiptScope, parse_receipt, verify_receipt

if TYPE_CHECKING:
    from heron.mcp.assembly import McpAssembly
    from heron.sessions.session import CliSession
    from heron.toolsets.builtin import Builtin

EXIT_OK, EXIT_ERROR, EXIT_CANCELLED = 0, 1, 130

_P = ParamSpec("_P")
_T = TypeVar("_T")


class UsageError(HeronError):
    """A mistake in how heron was invoked or configured."""


def resolve_model(
    spec: str,
    *,
    base_url: str | None = None,
    tool_protocol: Literal["auto", "native", "text"] = "auto",
) -> Model:
    """`scripted:FILE`, `openai:M`, `anthropic:M`, `ollama:M`, `openai-compatible:M`."""
    from heron.models.resolve import ProviderConfig
    from heron.models.resolve import resolve_model as resolve

    config = None if tool_protocol == "auto" else ProviderConfig(protocols={spec: tool_protocol})
    try:
        return resolve(spec, base_url=base_url, config=config)
    except ModelError as exc:
        raise UsageError(str(exc)) from exc


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    agent: dict[str, Any] = {}
    if args.model:
        agent["model"] = args.model
    if args.base_url:
        agent["base_url"] = args.base_url
    if args.autonomy:
        agent["autonomy"] = args.autonomy
    if args.no_parallel:
        agent["parallel"] = "off"
    elif args.parallel:
        agent["parallel"] = args.parallel
    if args.receipts:
        agent["receipts"] = True
    if args.max_iterations is not None:
        agent["max_iterations"] = args.max_iterations
    if args.max_tool_result_chars is not None:
        agent["max_tool_result_chars"] = args.max_tool_result_chars
    overrides: dict[str, Any] = {"agent": agent} if agent else {}
    if args.state_dir:
        overrides["state"] = {"dir": str(args.state_dir)}
    builtin: dict[str, Any] = {}
    if getattr(args, "builtin", None):
        builtin["sets"] = list(dict.fromkeys(args.builtin))
    if getattr(args, "workspace", None):
        builtin["workspace"] = str(Path(args.workspace).resolve())
    if getattr(args, "sandbox", None):
        builtin["sandbox"] = args.sandbox
    if builtin:
        overrides["tools"] = {"builtin": builtin}
    return overrides


def _config(args: argparse.Namespace) -> HeronConfig:
    try:
        return load_config(config_file=args.config, overrides=_overrides(args))
    except ConfigError as exc:
        raise UsageError(f"configuration error: {exc}") from exc


def _state_dir(config: HeronConfig) -> Path:
    return Path(config.state.dir).expanduser() if config.state.dir else default_state_dir()


def _tools(args: argparse.Namespace, config: HeronConfig) -> list[Tool]:
    try:
        return load_tools([*config.tools.modules, *args.tools])
    except ToolDefinitionError as exc:
        raise UsageError(f"cannot load tools: {exc}") from exc
    except (TypeError, ImportError, SyntaxError) as exc:
        raise UsageError(f"cannot load tools: {type(exc).__name__}: {exc}") from exc


def _excluded_tools(args: argparse.Namespace, config: HeronConfig) -> list[str]:
    return [*config.agent.excluded_tools, *getattr(args, "exclude_tool", [])]


async def open_builtin(config: HeronConfig) -> Builtin | None:
    """The built-in tool sets of `[tools.builtin]` (None when no set is named); the caller
    `aclose()`s them."""
    if not config.tools.builtin.sets:
        return None
    from heron.toolsets.builtin import BuiltinError, build_builtin

    try:
        return await build_builtin(config.tools.builtin, state_dir=_state_dir(config))
    except BuiltinError as exc:
        raise UsageError(f"built-in tools: {exc}") from exc


async def open_mcp(
    args: argparse.Namespace, config: HeronConfig, tools: list[Tool]
) -> McpAssembly | None:
    """Connect the `[mcp.servers]` of the configuration (None when there are none) and tell
    the operator, on stderr, about servers left out and shadowed names."""
    if not config.mcp.enabled_servers():
        return None
    from heron.mcp.assembly import assemble_mcp

    a = config.agent
    assembly = await assemble_mcp(
        config.mcp,
        state_dir=_state_dir(config),
        autonomy=a.autonomy,
        allowed_tools=a.allowed_tools,
        excluded_tools=_excluded_tools(args, config),
        builtin_names=[t.spec.name for t in tools],
        activated=ActivatedToolSet(),
    )
    for problem in assembly.problems:
        sys.stderr.write(f"heron: mcp: {problem}\n")
    return assembly


def build_agent(
    args: argparse.Namespace,
    config: HeronConfig,
    *,
    approver: Approver,
    tools: list[Tool],
    mcp: McpAssembly | None = None,
    builtin: Builtin | None = None,
) -> Agent:
    """The configured agent; `mcp` (from `open_mcp`) adds its MCP tools, catalogue section,
    activated set, never-unreachable resolver and per-turn filter groups; `builtin` (from
    `open_builtin`) adds heron's tool sets as bundles, with their spill, cache and workspace."""
    from heron.turn.approval import ApprovalManager, ApprovalPolicy

    state_dir = _state_dir(config)
    a = config.agent
    approval = ApprovalManager(
        policy=ApprovalPolicy(
            autonomy=a.autonomy,
            auto_approve=config.approval.auto_approve,
            always_ask=config.approval.always_ask,
            timeout_s=config.approval.timeout_s,
            record_auto_approvals=config.approval.record_auto_approvals,
        ),
        approver=approver,
        audit=AuditStore(open_db(state_dir)),
    )
    receipts = ReceiptScope("run", store=ReceiptKeyStore(state_dir)) if a.receipts else None
    model = resolve_model(a.model, base_url=a.base_url, tool_protocol=a.tool_protocol)
    try:
        registry = ToolRegistry(tools)
        if builtin is not None:
            for bundle, bundled in builtin.tools.items():
                registry.add_all(bundled, bundle=bundle)
        system_prompt, allowed = a.system_prompt, a.allowed_tools
        if builtin is not None and (section := builtin.catalogue_section()):
            system_prompt = f"{system_prompt}\n\n{section}" if system_prompt else section
        if mcp is not None:
            mcp.register(registry)
            system_prompt = mcp.system_prompt(
                system_prompt,
                native_tools=model.native_tools,
                strict_tool_parsing=a.strict_tool_parsing,
            )
            allowed = mcp.admit(allowed)
        observer, telemetry = _telemetry(config)
        return Agent(
            model=model,
            tools=registry,
            observer=observer,
            **telemetry,
            **_budgets(config, model.name),
            system_prompt=system_prompt,
            autonomy=a.autonomy,
            approval=approval,
            knobs=config.knobs(),
            receipts=receipts,
            allowed_tools=allowed,
            excluded_tools=_excluded_tools(args, config),
            activated=mcp.activated if mcp is not None else None,
            catalogue=mcp.catalogue if mcp is not None else None,
            turn_exclusions=mcp.turn_exclusions if mcp is not None else None,
            spill=builtin.spill if builtin is not None else None,
            cache=builtin.cache if builtin is not None else None,
            workspace=builtin.workspace if builtin is not None else None,
        )
    except ToolDefinitionError as exc:
        # E.g. one tools file listed in heron.toml and again with --tools.
        raise UsageError(f"cannot build the tool set: {exc}") from exc


def _budgets(config: HeronConfig, model: str) -> dict[str, Any]:
    """Run budgets and the context-window trimmer from `[budgets]` and `[agent]`."""
    b = config.budgets
    extra: dict[str, Any] = {}
    if config.agent.context_window_tokens is not None:
        from heron.models.context_window import HistoryTrimmer
        from heron.models.tokens import CalibratedCounter, counter_for_model

        extra["trimmer"] = HistoryTrimmer(
            CalibratedCounter(counter_for_model(model)),
            budget_tokens=config.agent.context_window_tokens,
        )
    limits = (b.model_calls, b.tool_calls, b.total_tokens, b.cost_usd, b.wall_time_s)
    if all(v is None for v in limits):
        return extra
    from heron.turn.budgets import BudgetLimits, ModelPrice, PriceTable

    extra["budget_limits"] = BudgetLimits(
        model_calls=b.model_calls,
        tool_calls=b.tool_calls,
        total_tokens=b.total_tokens,
        cost_usd=b.cost_usd,
        wall_time_s=b.wall_time_s,
    )
    try:
        extra["prices"] = PriceTable({k: ModelPrice(**v) for k, v in b.prices.items()})
    except TypeError as exc:
        raise UsageError(f"configuration error: [budgets.prices]: {exc}") from exc
    return extra


def _telemetry(config: HeronConfig) -> tuple[Any, dict[str, Any]]:
    """The observer (audit-free: metrics, alerts, OTel) and the agent's telemetry parts."""
    from heron.telemetry.alerts import AlertManager, ConsoleChannel, WebhookChannel
    from heron.telemetry.metrics import MetricsObserver, MetricsRegistry
    from heron.turn.observer import FanOutObserver

    t = config.telemetry
    metrics = MetricsRegistry()
    channels: list[Any] = [ConsoleChannel()] if t.alerts_console else []
    if t.alerts_webhook_url:
        channels.append(
            WebhookChannel(t.alerts_webhook_url, secret_env=t.alerts_webhook_secret_env)
        )
    alerts = AlertManager(channels) if channels else None
    observers: list[Any] = [MetricsObserver(metrics)]
    parts: dict[str, Any] = {"metrics": metrics, "alerts": alerts}
    if alerts is not None:
        observers.append(alerts)
    if t.otel != "off":
        from heron.telemetry.otel import OtelConfig, TelemetryUnavailable, configure

        try:
            tracer = configure(OtelConfig(exporter=t.otel, tool_io=t.tool_io))
        except TelemetryUnavailable as exc:
            raise UsageError(str(exc)) from exc
        observers.append(tracer)
        parts["tracer"] = tracer
    return FanOutObserver(*observers), parts


def _has_tty() -> bool:
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True


class DaemonThreadExecutor(ThreadPoolExecutor):
    """Runs each job (a sync tool, a terminal read) in its own daemon thread.

    A thread cannot be interrupted, so a sync tool cancelled by Ctrl-C or a timeout keeps
    running. Pool threads are joined when the event loop and the interpreter shut down, which
    would keep `heron run` alive until such a tool returned; daemon threads are left behind.
    """

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        future: Future[_T] = Future()

        def work() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:
                future.set_exception(exc)

        threading.Thread(target=work, name="heron-worker", daemon=True).start()
        return future


async def run_prompt(
    agent: Agent, prompt: str, renderer: Any, *, session: CliSession | None = None
) -> int:
    """Run one turn (stored and audited in `session` when given); the first Ctrl-C cancels
    the step cleanly, a second one exits."""
    cancel = CancelScope()
    loop = asyncio.get_running_loop()
    loop.set_default_executor(DaemonThreadExecutor())

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
            outcome = (await agent.run(prompt, sink=renderer, cancel=cancel, channel="cli")).outcome
        else:
            outcome = await session.run_turn(
                agent, prompt, sink=renderer, cancel=cancel, channel="cli"
            )
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        renderer.close()
    if outcome.status == "final":
        return EXIT_OK
    return EXIT_CANCELLED if outcome.status == "cancelled" else EXIT_ERROR


def cmd_run(args: argparse.Namespace) -> int:
    config = _config(args)
    renderer: Any = JsonLinesRenderer() if args.events == "jsonl" else PrettyRenderer()
    approver: Approver = NoApprover()
    if not args.non_interactive and _has_tty():
        approver = TerminalApprover(before_prompt=renderer.pause)
    tools = _tools(args, config)
    from heron.cli.session_commands import (
        announce_session,
        open_session,
        session_errors,
        session_failed,
    )

    async def run() -> int:
        session = open_session(_state_dir(config), args.session)
        try:
            builtin = await open_builtin(config)
            try:
                known = [*tools, *(builtin.all_tools() if builtin is not None else [])]
                mcp = await open_mcp(args, config, known)
                try:
                    agent = build_agent(
                        args, config, approver=approver, tools=tools, mcp=mcp, builtin=builtin
                    )
                    session.attach(agent)
                    return await run_prompt(agent, args.prompt, renderer, session=session)
                finally:
                    if mcp is not None:
                        await mcp.aclose()
            finally:
                if builtin is not None:
                    await builtin.aclose()
        finally:
            session.close()
            announce_session(session, always=args.events == "pretty")

    try:
        return asyncio.run(run())
    except session_errors() as exc:
        return session_failed(exc)


def cmd_tools(args: argparse.Namespace) -> int:
    config = _config(args)
    tools = _tools(args, config)

    async def assemble() -> Agent:
        # Listing needs no running server afterwards (pinned servers are not even started).
        builtin = await open_builtin(config)
        try:
            known = [*tools, *(builtin.all_tools() if builtin is not None else [])]
            mcp = await open_mcp(args, config, known)
            try:
                return build_agent(
                    args, config, approver=NoApprover(), tools=tools, mcp=mcp, builtin=builtin
                )
            finally:
                if mcp is not None:
                    await mcp.aclose()
        finally:
            if builtin is not None:
                await builtin.aclose()

    agent = asyncio.run(assemble())
    specs = agent.registry.specs()
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
        flags = [k for k, v in _annotations(spec).items() if v]
        first = spec.description.strip().splitlines()[0] if spec.description.strip() else ""
        sys.stdout.write(f"{spec.name:28} {spec.owner:10} {','.join(flags):28} {first}\n")
    return EXIT_OK


def _annotations(spec: Any) -> dict[str, bool]:
    ann = spec.annotations
    return {
        "read_only": ann.read_only,
        "destructive": ann.destructive,
        "idempotent": ann.idempotent,
        "irreversible": ann.irreversible,
        "open_world": ann.open_world,
        "requires_approval": ann.requires_approval,
    }


def _spec_json(spec: Any) -> dict[str, Any]:
    return {
        "name": spec.name,
        "owner": spec.owner,
        "description": spec.description,
        "parameters": spec.parameters,
        "annotations": _annotations(spec),
        "runtime_args": list(spec.runtime_args),
    }


def cmd_receipts(args: argparse.Namespace) -> int:
    if args.state_dir is not None:
        state_dir = args.state_dir
    else:
        try:
            state_dir = _state_dir(load_config(config_file=args.config))
        except ConfigError as exc:
            raise UsageError(f"configuration error: {exc}") from exc
    # Invocation mistakes first (exit 2), whatever the receipt's fate.
    try:
        arguments = json.loads(args.args)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--args is not JSON: {exc}") from exc
    if not isinstance(arguments, dict):
        raise UsageError("--args must be a JSON object")
    try:
        output = args.output if args.output is not None else args.output_file.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read --output-file {args.output_file}: {exc}") from exc
    parsed = parse_receipt(args.receipt)
    if parsed is None:
        sys.stdout.write("invalid: not a well-formed heron receipt\n")
        return EXIT_ERROR
    key = ReceiptKeyStore(state_dir).load(parsed[0])
    if key is None:
        sys.stdout.write(f"invalid: no receipt key {parsed[0]} in {state_dir}\n")
        return EXIT_ERROR
    if verify_receipt(args.receipt, key=key, tool=args.tool, arguments=arguments, output=output):
        sys.stdout.write(f"valid: {args.tool} produced this output at epoch {parsed[1]}\n")
        return EXIT_OK
    sys.stdout.write("invalid: the receipt does not match this tool, arguments and output\n")
    return EXIT_ERROR


def cmd_doctor(args: argparse.Namespace) -> int:
    from heron.cli.doctor import run_doctor

    return run_doctor(config_file=args.config, state_dir=args.state_dir)


def cmd_demo(args: argparse.Namespace) -> int:
    from heron.demo.events import run_events_demo
    from heron.demo.quickstart import run_demo

    if args.which == "multimodal":
        return _demo_multimodal(args.file, args.question, events=args.events)
    if args.which == "events":
        return run_events_demo(events=args.events, scale=args.time_scale)
    code = run_demo(events=args.events, workspace=args.workspace)
    if args.which == "quickstart" or args.events == "jsonl" or code != EXIT_OK:
        return code
    sys.stdout.write("\n")
    return run_events_demo(events=args.events, scale=args.time_scale)


SAMPLE_QUESTION = "How much did revenue grow this quarter?"
SAMPLE_LINES = (
    "Quarterly report, third quarter",
    "Revenue grew 12% over the second quarter, to 4.2 million.",
    "Costs stayed flat; the team grew by two engineers.",
)


def _demo_multimodal(file: Path | None, question: str | None, *, events: str) -> int:
    """`heron demo multimodal`: the given file, or a sample PDF (a PNG without reportlab)."""
    import tempfile

    from heron.demo.multimodal import run_multimodal_demo

    if file is not None:
        return run_multimodal_demo(file, question or SAMPLE_QUESTION, events=events)
    with tempfile.TemporaryDirectory(prefix="heron-demo-sample-") as scratch:
        sample = _write_sample(Path(scratch))
        if sample is None:
            sys.stderr.write(
                "heron: the sample file needs reportlab (PDF) or Pillow (PNG), which come with "
                "the dev extras: pip install -e '.[dev]' (or run `make demo`), or pass --file\n"
            )
            return EXIT_ERROR
        sys.stderr.write(f"sample file: {sample.name} ({len(SAMPLE_LINES)} lines of text)\n")
        return run_multimodal_demo(sample, question or SAMPLE_QUESTION, events=events)


def _write_sample(directory: Path) -> Path | None:
    try:
        from reportlab.lib.pagesizes import A5  # type: ignore[import-untyped]
        from reportlab.pdfgen.canvas import Canvas  # type: ignore[import-untyped]
    except ImportError:
        pass
    else:
        target = directory / "report.pdf"
        canvas = Canvas(str(target), pagesize=A5)
        for row, line in enumerate(SAMPLE_LINES):
            canvas.drawString(40, 540 - 24 * row, line)
        canvas.save()
        return target
    try:
        from PIL import Image, ImageDraw
    except ImportError:
        return None
    target = directory / "report.png"
    image = Image.new("RGB", (900, 60 + 40 * len(SAMPLE_LINES)), "white")
    draw = ImageDraw.Draw(image)
    for row, line in enumerate(SAMPLE_LINES):
        draw.text((30, 30 + 40 * row), line, fill="black", font_size=24)
    image.save(target)
    return target
