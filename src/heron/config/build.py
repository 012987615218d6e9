"""From a `HeronConfig` to a running agent.

The pieces, in the order `open_agent` uses them:

- the model: `agent_model` resolves `[agent] model`; `detect_model` picks one the environment
  can reach when none is configured (a provider key, else a local Ollama), `with_model` puts
  the choice into a configuration;
- the user's tools: `load_user_tools` loads every `@heron.tool` of `[tools] modules`;
- heron's built-in sets: `open_builtin` starts `[tools.builtin]` (the caller `aclose()`s it);
- the skills: `open_skills` finds `[skills]` (project skills only once approved);
- the MCP servers and the deferred catalogue: `open_mcp` connects `[mcp.servers]` and, with
  `[discovery] prompt_tools`, puts every other tool behind the search tool too (the caller
  `aclose()`s it);
- `lifecycle_parts` is what every call of the configuration runs through: approval (its audit:
  the SQLite approval trail in the state directory), receipts, telemetry and the knobs
  (`heron mcp serve` uses it as is);
- `build_agent` puts them together with budgets and the prompt;
- `register_secrets` tells the known-secrets registry (`heron.safety.secrets`) which
  environment variables the configuration names as secrets (`open_agent` and `build_agent`
  call it), so their values become placeholders wherever they would enter the data path.

Every mistake found on the way is a `BuildError` — a `ConfigError` whose message says what
could not be built and why — so a front end reports one kind of error.
"""

from __future__ import annotations

import contextlib
import json
import os
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from heron._support.limits import set_input_limits
from heron._support.state import open_db
from heron.agent import Agent
from heron.audit.sqlite_store import SqliteApprovalAudit
from heron.collaboration.prompt import ASKING_TOOLS, collaboration_section
from heron.config.discovery import add_skills, deferred_tools, discovery_options, open_skills
from heron.config.schema import ConfigError, HeronConfig
from heron.models.base import Model, ModelError
from heron.safety.secrets import register_secrets as register_secrets
from heron.tools.definition import Tool, ToolDefinitionError
from heron.tools.loader import load_tools
from heron.tools.registry import ActivatedToolSet, ToolRegistry
from heron.turn.approval import ApprovalManager, ApprovalPolicy, Approver, NoApprover
from heron.turn.context import RuntimeKnobs
from heron.turn.observer import Observer
from heron.turn.receipts import ReceiptScope
from heron.turn.signing_keys import key_store

if TYPE_CHECKING:
    from heron.always_on.subagents.service import SubagentsSetup
    from heron.collaboration.setup import MessagingConfig
    from heron.config.builtin import Builtin
    from heron.mcp.assembly import McpAssembly
    from heron.mcp.auth.consent import ConsentChannel
    from heron.mcp.client.human_input import HumanInput
    from heron.skills import SkillSet
    from heron.telemetry.metrics import MetricsRegistry
    from heron.turn.approval_audit import AuditLog

OPENAI_DEFAULT: Final = "openai:gpt-4o-mini"
"""What `detect_model` picks when `OPENAI_API_KEY` is set."""
ANTHROPIC_DEFAULT: Final = "anthropic:claude-sonnet-4-5"
"""What `detect_model` picks when `ANTHROPIC_API_KEY` is set (and no OpenAI key is)."""
OLLAMA_PORT: Final = "11434"


class BuildError(ConfigError):
    """The configuration cannot be turned into an agent: a model that cannot be resolved,
    tools that do not load, a built-in set that cannot start, two tools with one name."""


class NoModelError(BuildError):
    """No model is configured (`[agent] model` unset) and none was given."""


# -- the model ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelChoice:
    """A model `detect_model` found reachable, and why it chose it."""

    model: str
    """The model string, e.g. `openai:gpt-4o-mini`."""
    base_url: str | None = None
    """The endpoint to use (set for Ollama); None: the provider's default."""
    reason: str
    """Why, for people: `OPENAI_API_KEY is set`."""


def detect_model(
    environ: Mapping[str, str] | None = None, *, timeout_s: float = 0.5
) -> ModelChoice | None:
    """A model this machine can reach, for a configuration that names none: OpenAI when
    `OPENAI_API_KEY` is set, else Anthropic when `ANTHROPIC_API_KEY` is, else the first chat
    model a local Ollama lists (`OLLAMA_HOST`, default 127.0.0.1:11434, asked for at most
    `timeout_s`). None when there is none. The SDKs' own `OPENAI_BASE_URL` and
    `ANTHROPIC_BASE_URL` apply as usual."""
    env = os.environ if environ is None else environ
    if env.get("OPENAI_API_KEY"):
        return ModelChoice(model=OPENAI_DEFAULT, reason="OPENAI_API_KEY is set")
    if env.get("ANTHROPIC_API_KEY"):
        return ModelChoice(model=ANTHROPIC_DEFAULT, reason="ANTHROPIC_API_KEY is set")
    root = ollama_root(env)
    names = [n for n in _ollama_models(root, timeout_s) if "embed" not in n]
    if names:
        return ModelChoice(
            model=f"ollama:{names[0]}",
            base_url=f"{root}/v1",
            reason=f"the Ollama server at {root} has it",
        )
    return None


def ollama_root(environ: Mapping[str, str] | None = None) -> str:
    """The Ollama server's root URL, from `OLLAMA_HOST` read as the `ollama` command reads it
    (`host`, `host:port` or a URL; default `http://127.0.0.1:11434`)."""
    env = os.environ if environ is None else environ
    raw = env.get("OLLAMA_HOST", "").strip()
    scheme, sep, rest = raw.partition("://")
    if sep:
        port = {"http": "80", "https": "443"}.get(scheme, OLLAMA_PORT)
    else:
        scheme, rest, port = "http", raw, OLLAMA_PORT
    parts = urllib.parse.urlsplit("//" + rest.split("/", 1)[0])
    with contextlib.suppress(ValueError):  # not a number: keep the default
        port = str(parts.port or port)
    host = parts.hostname or "127.0.0.1"
    if host in ("0.0.0.0", "::"):  # an address to listen on, not one to connect to
        host = "127.0.0.1"
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def _ollama_models(root: str, timeout_s: float) -> list[str]:
    """The model names `GET /api/tags` lists; empty when nothing answers in time."""
    # Never through a proxy from the environment: the server is local.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{root}/api/tags", timeout=timeout_s) as response:
            data = json.load(response)
    except (OSError, ValueError):
        return []
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, list):
        return []
    return [m["name"] for m in models if isinstance(m, dict) and isinstance(m.get("name"), str)]


def with_model(config: HeronConfig, choice: ModelChoice) -> HeronConfig:
    """`config` with `choice` as its `[agent] model` and `base_url`: the endpoint goes with the
    model, so a key found in the environment is never sent to an endpoint meant for another."""
    update = {"model": choice.model, "base_url": choice.base_url}
    return config.model_copy(update={"agent": config.agent.model_copy(update=update)})


def configured_model(
    spec: str,
    *,
    base_url: str | None = None,
    tool_protocol: Literal["auto", "native", "text"] = "auto",
) -> Model:
    """The model a model string names, with `[agent] tool_protocol` applied."""
    from heron.models.resolve import ProviderConfig, resolve_model

    config = None if tool_protocol == "auto" else ProviderConfig(protocols={spec: tool_protocol})
    try:
        return resolve_model(spec, base_url=base_url, config=config)
    except ModelError as exc:
        raise BuildError(str(exc)) from exc


def agent_model(config: HeronConfig) -> Model:
    """The model of `[agent]`; `NoModelError` when none is configured."""
    a = config.agent
    if a.model is None:
        raise NoModelError(
            'no model configured: set [agent] model (e.g. "openai:gpt-4o-mini"), pass a '
            "model, or choose one with detect_model()"
        )
    return configured_model(a.model, base_url=a.base_url, tool_protocol=a.tool_protocol)


# -- tools --------------------------------------------------------------------------------


def load_user_tools(config: HeronConfig) -> list[Tool]:
    """Every `@heron.tool` of `[tools] modules`, in order."""
    try:
        return load_tools(config.tools.modules)
    except ToolDefinitionError as exc:
        raise BuildError(f"cannot load tools: {exc}") from exc
    except (TypeError, ImportError, SyntaxError) as exc:
        raise BuildError(f"cannot load tools: {type(exc).__name__}: {exc}") from exc


def messaging_config(config: HeronConfig) -> MessagingConfig:
    """Whom the agent writes to and how: `[identity]`, `[user]`, `[people.*]`, `[channels]`,
    `[messages]`."""
    from heron.collaboration.setup import MessagingConfig

    return MessagingConfig(
        identity=config.identity.identity(),
        user=config.user.name,
        people=config.everyone(),
        channels=config.channels,
        messages=config.messages,
    )


async def open_builtin(config: HeronConfig, *, aliases: bool = False) -> Builtin | None:
    """The built-in tool sets of `[tools.builtin]` (None when no set is named); the caller
    `aclose()`s them. `aliases`: the `collaboration` set of the MCP profile — the seed's
    names too, and the human-request tools (`[approvals]`)."""
    if not config.tools.builtin.sets:
        return None
    from heron._support.own_paths import claim_state_dir
    from heron.config.builtin import BuiltinError, build_builtin

    try:
        return await build_builtin(
            config.tools.builtin,
            state_dir=claim_state_dir(config.state.path()),
            store_url=config.store.url,
            shell=config.tools.shell,
            messaging=messaging_config(config),
            aliases=aliases,
            approvals=config.approvals if aliases and config.approvals.durable else None,
        )
    except BuiltinError as exc:
        raise BuildError(f"built-in tools: {exc}") from exc


async def open_mcp(
    config: HeronConfig,
    known: Sequence[Tool],
    *,
    deferred: Mapping[str, Sequence[Tool]] | None = None,
    skills: SkillSet | None = None,
    consent: ConsentChannel | None = None,
    human_input: HumanInput | None = None,
) -> McpAssembly | None:
    """Connect the enabled `[mcp.servers]` and assemble the deferred catalogue; None when there
    are no servers and nothing is `deferred` (see `deferred_tools`). The caller `aclose()`s the
    assembly. `known` are the agent's other tools, whose names MCP tools may not shadow;
    servers left out and shadowed names are in the assembly's `problems`. The search tool
    also finds `skills`. `consent` is how an OAuth login that becomes necessary asks the
    operator (without it: `heron mcp login`); `human_input` answers the servers' requests for
    user input (`heron serve`)."""
    local = {g: list(ts) for g, ts in (deferred or {}).items() if ts}
    if not config.mcp.enabled_servers() and not local:
        return None
    from heron.mcp.assembly import assemble_mcp, assemble_tools

    a = config.agent
    options = discovery_options(config, skills)
    prompt_tools = config.discovery.prompt_tools or ()
    if not config.mcp.enabled_servers():
        return assemble_tools(
            config.mcp,
            (),
            autonomy=a.autonomy,
            allowed_tools=a.allowed_tools,
            excluded_tools=a.excluded_tools,
            activated=ActivatedToolSet(),
            local_tools=local,
            prompt_tools=prompt_tools,
            discovery=options,
        )
    return await assemble_mcp(
        config.mcp,
        state_dir=config.state.path(),
        autonomy=a.autonomy,
        allowed_tools=a.allowed_tools,
        excluded_tools=a.excluded_tools,
        builtin_names=[t.spec.name for t in known],
        activated=ActivatedToolSet(),
        local_tools=local,
        prompt_tools=prompt_tools,
        discovery=options,
        consent=consent,
        human_input=human_input,
        store_url=config.store.url,
    )


# -- secrets ------------------------------------------------------------------------------


# -- the agent ----------------------------------------------------------------------------


def build_agent(
    config: HeronConfig,
    *,
    tools: Sequence[Tool] = (),
    approver: Approver | None = None,
    model: Model | None = None,
    mcp: McpAssembly | None = None,
    builtin: Builtin | None = None,
    skills: SkillSet | None = None,
    on_problem: Callable[[str], None] | None = None,
    metrics: MetricsRegistry | None = None,
    audit: AuditLog | None = None,
) -> Agent:
    """The configured agent with `tools`. `model` replaces `[agent] model`; `approver` answers
    approval questions (default: none, so calls that need approval are denied by policy);
    `mcp` (from `open_mcp`) adds its tools, catalogue section, activated set,
    never-unreachable resolver and per-turn filter groups, and keeps the tools it defers out
    of the prompt; `builtin` (from `open_builtin`) adds heron's tool sets as bundles, with
    their spill, cache and workspace; `skills` (from `open_skills`) adds the skills section,
    `load_skill`, `read_skill_file` and the `allowed-tools` guard. `on_problem` hears about
    skills the prompt's budget left out. `metrics` is the registry to record into (`heron
    serve` shares one for `/metrics`), else a new one. `audit` is the approval audit to record
    into, else one on a new connection to the state database: `heron serve`, which builds an
    agent for each session it wakes, shares one, and registers the secrets (`register_secrets`)
    once, so with `audit` they are not registered again."""
    parts = lifecycle_parts(
        config, tools=tools, builtin=builtin, approver=approver, metrics=metrics, audit=audit
    )
    a = config.agent
    model = model or agent_model(config)
    try:
        # Tools the assembly deferred are in its catalogue, not in the prompt.
        behind = set(mcp.tool_catalogue.groups) if mcp is not None else set()
        registry = ToolRegistry(t for t in tools if t.spec.name not in behind)
        if builtin is not None:
            for bundle, bundled in builtin.tools.items():
                registry.add_all((t for t in bundled if t.spec.name not in behind), bundle=bundle)
        system_prompt, allowed = a.system_prompt, a.allowed_tools
        if builtin is not None and not behind and (section := builtin.catalogue_section()):
            system_prompt = f"{system_prompt}\n\n{section}" if system_prompt else section
        if section := collaboration_section([t.spec.name for t in registry.tools()]):
            system_prompt = f"{system_prompt}\n\n{section}" if system_prompt else section
        hooks: list[Any] = []
        if mcp is not None:
            mcp.register(registry)
            system_prompt = mcp.system_prompt(
                system_prompt,
                native_tools=model.native_tools,
                strict_tool_parsing=a.strict_tool_parsing,
            )
            allowed = mcp.admit(allowed)
        if skills is not None and len(skills.catalogue):
            system_prompt, skill_names = add_skills(
                config, registry, system_prompt, skills, mcp, builtin, on_problem, hooks
            )
            if allowed is not None:
                allowed = [*allowed, *skill_names]
        return Agent(
            model=model,
            tools=registry,
            observer=parts.observer,
            **parts.telemetry,
            **_budgets(config, model.name),
            system_prompt=system_prompt,
            autonomy=a.autonomy,
            approval=parts.approval,
            knobs=parts.knobs,
            receipts=parts.receipts,
            allowed_tools=allowed,
            excluded_tools=a.excluded_tools,
            activated=mcp.activated if mcp is not None else None,
            catalogue=mcp.catalogue if mcp is not None else None,
            turn_exclusions=mcp.turn_exclusions if mcp is not None else None,
            spill=builtin.spill if builtin is not None else None,
            cache=builtin.cache if builtin is not None else None,
            workspace=builtin.workspace if builtin is not None else None,
            hooks=hooks,
        )
    except ToolDefinitionError as exc:
        # E.g. one tools file listed in heron.toml and again with --tools.
        raise BuildError(f"cannot build the tool set: {exc}") from exc


@dataclass(frozen=True, kw_only=True, slots=True)
class LifecycleParts:
    """What every tool call of a configuration runs through, whoever makes it (an agent's
    model, or a client of `heron mcp serve`): one configuration, one behaviour."""

    approval: ApprovalManager
    """`[approval]` with the SQLite approval audit of the state directory."""
    observer: Observer
    """Metrics, alerts and OpenTelemetry of `[telemetry]` (the execution audit is the front
    end's: it knows the session)."""
    telemetry: dict[str, Any]
    """The agent's telemetry parts: `metrics`, `alerts`, `tracer`."""
    receipts: ReceiptScope | None
    """`[agent] receipts`, keys saved in the state directory (or the shared store's)."""
    knobs: RuntimeKnobs
    """`[agent]` and `[loop_detection]`: bounds, timeouts, loop detection."""


def lifecycle_parts(
    config: HeronConfig,
    *,
    tools: Sequence[Tool] = (),
    builtin: Builtin | None = None,
    approver: Approver | None = None,
    metrics: MetricsRegistry | None = None,
    receipts: Literal["run", "runtime"] = "run",
    audit: AuditLog | None = None,
) -> LifecycleParts:
    """The lifecycle parts `config` gives calls of `tools` and `builtin` (see
    `LifecycleParts`); applies `[limits]`. `receipts`: a key per run (`heron run`) or one for
    the process (a server). `audit`: the approval audit to share (see `build_agent`), else
    one on a new connection, and the configured secrets are registered."""
    if audit is None:
        register_secrets(config)
    # Where `[limits]` takes effect (and in `heron serve`, before its intake listens).
    set_input_limits(config.limits.to_limits())
    a = config.agent
    approval = ApprovalManager(
        policy=ApprovalPolicy(
            autonomy=a.autonomy,
            auto_approve=[*config.approval.auto_approve, *preapproved_tools(tools, builtin)],
            always_ask=config.approval.always_ask,
            timeout_s=config.approval.timeout_s,
            record_auto_approvals=config.approval.record_auto_approvals,
        ),
        approver=approver or NoApprover(),
        audit=audit if audit is not None else SqliteApprovalAudit(open_db(config.state.path())),
    )
    scope = None
    if a.receipts:  # workers of a shared store share the keys: any of them verifies
        keys = key_store("receipt", state_dir=config.state.path(), store_url=config.store.url)
        scope = ReceiptScope(receipts, store=keys)
    observer, telemetry = _telemetry(config, metrics)
    return LifecycleParts(
        approval=approval,
        observer=observer,
        telemetry=telemetry,
        receipts=scope,
        knobs=config.knobs(),
    )


@asynccontextmanager
async def open_agent(
    config: HeronConfig,
    *,
    approver: Approver | None = None,
    tools: Sequence[Tool] | None = None,
    model: Model | None = None,
    on_problem: Callable[[str], None] | None = None,
    on_notice: Callable[[str], None] | None = None,
) -> AsyncIterator[Agent]:
    """The whole configured agent, for the length of the `async with`: `tools` (default: the
    `[tools] modules`), the built-in sets, the skills and the MCP servers, which are closed on
    exit. `on_problem` hears about MCP servers left out and shadowed names; `on_notice` (default
    `on_problem`) about skills withheld until approved or left out of the prompt."""
    register_secrets(config)
    user_tools = load_user_tools(config) if tools is None else list(tools)
    notice = on_notice or on_problem
    async with AsyncExitStack() as stack:
        builtin = await open_builtin(config)
        if builtin is not None:
            stack.push_async_callback(builtin.aclose)
        known = [*user_tools, *(builtin.all_tools() if builtin is not None else [])]
        skills = open_skills(config)
        if skills is not None and notice is not None:
            for line in skills.notices:
                notice(line)
        mcp = await open_mcp(
            config,
            known,
            deferred=deferred_tools(config, user_tools, builtin),
            skills=skills,
        )
        if mcp is not None:
            stack.push_async_callback(mcp.aclose)
            for problem in mcp.problems:
                if on_problem is not None:
                    on_problem(problem)
        yield build_agent(
            config,
            tools=user_tools,
            approver=approver,
            model=model,
            mcp=mcp,
            builtin=builtin,
            skills=skills,
            on_problem=notice,
        )


def subagents_setup(config: HeronConfig, project_dir: Path | None = None) -> SubagentsSetup:
    """`[subagents]`, `[agents.*]` and the project's agent files (`[subagents] dir` under
    `project_dir`, default the working directory)."""
    from heron.always_on.subagents.service import SubagentsSetup

    folder = Path(config.subagents.dir)
    if not folder.is_absolute():
        folder = (project_dir or Path.cwd()) / folder
    return SubagentsSetup(config=config.subagents, entries=config.agents, agents_dir=folder)


def preapproved_tools(tools: Sequence[Tool], builtin: Builtin | None) -> list[str]:
    """heron's own messaging, asking and sub-agent tools among `tools`: they run without
    asking, because they reach only the people the configuration names (`[user]`,
    `[people.*]`), never an address the model chooses, asking grants nothing, and a sub-agent
    gets nothing its parent does not have (its own calls are approved like the parent's).
    `[approval] always_ask` still wins."""
    from heron.always_on.subagents.names import SUBAGENT_TOOLS
    from heron.collaboration.tools import MESSAGE_TOOLS

    names = MESSAGE_TOOLS | ASKING_TOOLS | SUBAGENT_TOOLS
    every = [*tools, *(builtin.all_tools() if builtin is not None else [])]
    return [t.spec.name for t in every if t.spec.name in names and t.spec.owner == "builtin"]


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
        raise ConfigError(f"[budgets.prices]: {exc}") from exc
    return extra


def _telemetry(
    config: HeronConfig, metrics: MetricsRegistry | None = None
) -> tuple[Any, dict[str, Any]]:
    """The observer (audit-free: metrics, alerts, OTel) and the agent's telemetry parts."""
    from heron.telemetry.alerts import AlertManager, ConsoleChannel, WebhookChannel
    from heron.telemetry.metrics import MetricsObserver, MetricsRegistry
    from heron.turn.observer import FanOutObserver

    t = config.telemetry
    metrics = metrics if metrics is not None else MetricsRegistry()
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
            raise BuildError(str(exc)) from exc
        observers.append(tracer)
        parts["tracer"] = tracer
    return FanOutObserver(*observers), parts
