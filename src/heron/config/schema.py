"""The configuration schema and its loader: the user's `config.toml`, then the project's
`heron.toml`, then command-line flags — later sources override earlier ones key by key.

Unknown keys and bad values are errors that name the file and every offending key.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from heron._support.folder_files import open_regular, read_at_most
from heron._support.limits import DEFAULT_LIMITS, MAX_DEPTH_CEILING, InputLimits
from heron._support.own_paths import claim_config_file
from heron._support.state import default_state_dir
from heron.always_on.subagents.config import AgentEntry, SubagentsConfig
from heron.collaboration.config import (
    ChannelsConfig,
    IdentityConfig,
    MessagesConfig,
    PersonConfig,
    UserConfig,
)
from heron.config.builtin import BuiltinConfig
from heron.config.builtin_sections import ShellSection
from heron.errors import ConfigurationError
from heron.gateway.config import GatewayConfig
from heron.humans.config import ApprovalsConfig
from heron.mcp.config import McpConfig
from heron.tools.registry import Autonomy
from heron.turn.modes import ParallelMode

if TYPE_CHECKING:
    from heron.turn.context import RuntimeKnobs

PROJECT_FILE = "heron.toml"
MIN_DERIVED_RESULT_CHARS = 24_000


class ConfigError(ConfigurationError, ValueError):
    """A configuration mistake; the message lists every problem found."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class AgentConfig(_Section):
    model: str | None = None
    """`openai:M`, `anthropic:M`, `ollama:M`, `openai-compatible:M` or `scripted:FILE`; unset,
    the command-line front ends pick one they can reach (`heron.config.detect_model`)."""
    base_url: str | None = None
    """Endpoint for `ollama:` (default http://127.0.0.1:11434/v1) and `openai-compatible:`."""
    tool_protocol: Literal["auto", "native", "text"] = "auto"
    """How the model receives tools: `auto` uses heron's per-model default table (native for
    OpenAI and Anthropic, text for Ollama models whose templates have no tools)."""
    system_prompt: str = ""
    autonomy: Autonomy = "supervised"
    max_iterations: int = Field(default=10, ge=1, le=1000)
    parallel: ParallelMode = "read-only"
    receipts: bool = False
    max_tool_result_chars: int | None = Field(default=None, ge=0)
    """Longest tool result in the model's history; unset: `result_fraction` of the context
    window when it is known, else 50,000 characters."""
    context_window_tokens: int | None = Field(default=None, gt=0)
    """The model's context window; when set, the history sent is trimmed to fit it."""
    result_fraction: float = Field(default=0.25, gt=0, le=1)
    tool_timeout_s: float | None = Field(default=None, gt=0)
    strict_tool_parsing: bool = False
    cap_behavior: Literal["summary", "error"] = "summary"
    allowed_tools: list[str] | None = None
    excluded_tools: list[str] = Field(default_factory=list)
    dedup: bool = True
    dedup_exempt: list[str] = Field(default_factory=list)


class ApprovalConfig(_Section):
    auto_approve: list[str] = Field(default_factory=list)
    always_ask: list[str] = Field(default_factory=list)
    timeout_s: float = Field(default=300.0, gt=0)
    record_auto_approvals: bool = False


class LoopDetectionConfig(_Section):
    enabled: bool = True
    window: int = Field(default=20, ge=4)
    max_repeats: int = Field(default=3, ge=2)
    ignore_tools: list[str] = Field(default_factory=list)


class BudgetsConfig(_Section):
    """Run budgets; a hit ends the run with a graceful summary (unset = unlimited)."""

    model_calls: int | None = Field(default=None, ge=1)
    tool_calls: int | None = Field(default=None, ge=0)
    total_tokens: int | None = Field(default=None, ge=1)
    cost_usd: float | None = Field(default=None, gt=0)
    wall_time_s: float | None = Field(default=None, gt=0)
    prices: dict[str, dict[str, float]] = Field(default_factory=dict)
    """`{"openai:gpt-4o": {"input_per_mtok": 2.5, "output_per_mtok": 10}}` (US dollars)."""


class TelemetryConfig(_Section):
    otel: Literal["off", "console", "otlp-http", "otlp-grpc"] = "off"
    tool_io: Literal["off", "redacted", "full"] = "off"
    alerts_console: bool = True
    """Repeated failures, timeouts and budget hits are reported on standard error."""
    alerts_webhook_url: str | None = None
    alerts_webhook_secret_env: str | None = None


class ToolsConfig(_Section):
    modules: list[str] = Field(default_factory=list)
    """Python files (or importable modules) whose `@heron.tool` functions are loaded."""
    builtin: BuiltinConfig = Field(default_factory=BuiltinConfig)
    """`[tools.builtin]`: heron's own tool sets (see docs/tools.md)."""
    shell: ShellSection = Field(default_factory=ShellSection)
    """`[tools.shell]`: what the `shell` tool runs with no operator (see docs/security.md)."""


class LimitsConfig(_Section):
    """`[limits]`: the one limit on data from outside (`heron._support.limits.InputLimits`),
    process-wide, applied when an agent is built (`heron.config.build_agent`) and by `heron
    serve` before it accepts webhooks."""

    max_depth: int = Field(default=DEFAULT_LIMITS.max_depth, ge=1, le=MAX_DEPTH_CEILING)
    """Objects and arrays nested inside each other in tool arguments, tool data, webhook bodies."""
    max_bytes: int = Field(default=DEFAULT_LIMITS.max_bytes, ge=1)
    """Bytes of one such piece of JSON."""

    def to_limits(self) -> InputLimits:
        return InputLimits(max_depth=self.max_depth, max_bytes=self.max_bytes)


class DiscoveryConfig(_Section):
    """`[discovery]`: how the agent finds tools it does not carry in its prompt
    (docs/discovery.md)."""

    tool: Literal["tool_search", "discover_tools"] = "tool_search"
    """The search tool's name (one implementation, offered under one name or the other)."""
    prompt_tools: list[str] | None = None
    """The only tools whose schemas are always in the prompt (besides the search and skill
    tools); every other tool — heron's own, yours and MCP's — is deferred behind the search
    tool. Unset: heron's own and your tools are in the prompt, MCP tools follow `[mcp]
    exposure`. Experiment 4-7: `["web_search", "run_python"]` with `tool = "discover_tools"`."""
    catalogue_tokens: int = Field(default=2000, ge=200)
    """The catalogue section and the meta-tools' definitions stay within this many tokens."""
    embeddings: bool = True
    """Rank with the `heron[embeddings]` extra when installed; false: lexical only."""
    usage_prior: bool = True
    """Rank tools that served similar needs before higher (learned from the execution audit
    trail of the state directory)."""
    hierarchical: bool = False
    """Rank servers first, then the tools of the best three (for catalogues of few, large
    servers; off by default, as measured on MetaTool)."""


class SkillsConfig(_Section):
    """`[skills]`: Agent Skills (docs/skills.md)."""

    enabled: bool = True
    dirs: list[str] = Field(default_factory=list)
    """More folders of skills (`~` expanded), trusted like the user's own folder."""
    packages: bool = True
    """Also the skills installed packages declare (entry point group `heron.skills`)."""
    catalogue_tokens: int = Field(default=800, ge=50)
    """Budget of the skills section of the system prompt (names and descriptions)."""


class StateConfig(_Section):
    dir: str | None = None
    """The state directory (`~` expanded); unset: `default_state_dir()`."""

    def path(self) -> Path:
        """The state directory: `dir`, else `$HERON_STATE_DIR`, else the XDG default."""
        return Path(self.dir).expanduser() if self.dir else default_state_dir()


class StoreConfig(_Section):
    url: str | None = None
    """The shared store several `heron serve` workers use: `postgresql://user@host/db`
    (docs/deployment.md); unset: the SQLite database in the state directory."""

    @field_validator("url")
    @classmethod
    def _postgresql_only(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("postgresql://", "postgres://")):
            raise ValueError("`[store] url` must be a postgresql:// URL")
        return url


class HeronConfig(_Section):
    agent: AgentConfig = Field(default_factory=AgentConfig)
    approval: ApprovalConfig = Field(default_factory=ApprovalConfig)
    approvals: ApprovalsConfig = Field(default_factory=ApprovalsConfig)
    """`[approvals]`: who answers requests to a human, "always" rules, question timeouts."""
    loop_detection: LoopDetectionConfig = Field(default_factory=LoopDetectionConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    state: StateConfig = Field(default_factory=StateConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    """`[store]`: a shared PostgreSQL store instead of the state directory's SQLite."""
    budgets: BudgetsConfig = Field(default_factory=BudgetsConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    mcp: McpConfig = Field(default_factory=McpConfig)
    """`[mcp]`, `[mcp.servers.NAME]`, `[[mcp.tool_filter_groups]]` (see docs/mcp.md)."""
    discovery: DiscoveryConfig = Field(default_factory=DiscoveryConfig)
    skills: SkillsConfig = Field(default_factory=SkillsConfig)
    identity: IdentityConfig = Field(default_factory=IdentityConfig)
    """`[identity]`: the agent's own name, address, signature, workspace (docs/collaboration.md)."""
    user: UserConfig = Field(default_factory=UserConfig)
    """`[user]`: the operator's channels, addresses and quiet hours."""
    people: dict[str, PersonConfig] = Field(default_factory=dict)
    """`[people.NAME]`: others the agent may write to."""
    channels: ChannelsConfig = Field(default_factory=ChannelsConfig)
    """`[channels.mail]`, `[channels.webhook]`, `[channels.im]`: the outbound transports."""
    messages: MessagesConfig = Field(default_factory=MessagesConfig)
    """`[messages]`: completion notices and how long card buttons work."""
    agents: dict[str, AgentEntry] = Field(default_factory=dict)
    """`[agents.NAME]`: agents the sub-agent tools can spawn (docs/subagents.md)."""
    subagents: SubagentsConfig = Field(default_factory=SubagentsConfig)
    """`[subagents]`: project agent files, depth and concurrency limits, budget split."""
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    """`[gateway]`: the HTTP API and web console of `heron serve` (docs/gateway.md)."""

    def everyone(self) -> dict[str, PersonConfig]:
        """`[people]` and the user (under `[user] name`), for the outbox."""
        user = PersonConfig.model_validate(self.user.model_dump(exclude={"name"}))
        return {**self.people, self.user.name: user}

    def result_limit(self) -> int:
        """The tool-result bound: explicit, else a fraction of a known context window."""
        a = self.agent
        if a.max_tool_result_chars is not None:
            return a.max_tool_result_chars
        if a.context_window_tokens is None:
            return 50_000
        from heron.models.context_window import default_result_limit
        from heron.models.tokens import counter_for_model

        derived = default_result_limit(
            a.context_window_tokens, counter_for_model(a.model or ""), fraction=a.result_fraction
        )
        # Stay above the artifact spill's preview (head + tail + marker, at most ~2 × 10,000
        # characters) so the bound never cuts the marker that says where the rest is.
        return max(derived, MIN_DERIVED_RESULT_CHARS)

    def knobs(self) -> RuntimeKnobs:
        from heron.turn.context import LoopDetectionKnobs, RuntimeKnobs

        a, ld = self.agent, self.loop_detection
        return RuntimeKnobs(
            max_iterations=a.max_iterations,
            parallel=a.parallel,
            dedup=a.dedup,
            dedup_exempt=frozenset(a.dedup_exempt),
            max_tool_result_chars=self.result_limit(),
            tool_timeout_s=a.tool_timeout_s,
            strict_tool_parsing=a.strict_tool_parsing,
            cap_behavior=a.cap_behavior,
            loop_detection=LoopDetectionKnobs(
                enabled=ld.enabled,
                window=ld.window,
                max_repeats=ld.max_repeats,
                ignore_tools=frozenset(ld.ignore_tools),
            ),
        )


def user_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".config"
    return root / "heron" / "config.toml"


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


MAX_CONFIG_BYTES = 1024 * 1024
"""A configuration file read at most (a project's comes with the repository)."""


def _read(path: Path) -> dict[str, Any]:
    try:
        with open_regular(path, follow=True) as (fh, size):
            data = read_at_most(fh, size, MAX_CONFIG_BYTES)
        return tomllib.loads(data.decode("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise ConfigError(f"{path}: values nested too deeply to read") from None
    except OSError as exc:  # refused (not a regular file, too large) or unreadable
        raise ConfigError(f"{path}: cannot read: {exc}") from None


def _problems(exc: ValidationError) -> list[str]:
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            problems.append(f"unknown key '{where}'")
        else:
            problems.append(f"'{where}': {err['msg']} (got {err.get('input')!r})")
    return problems


def load_config(
    *,
    project_dir: Path | None = None,
    config_file: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    include_user: bool = True,
) -> HeronConfig:
    """Load user config, then the project file (or `config_file`), then `overrides`."""
    sources: list[tuple[str, dict[str, Any]]] = []
    if include_user and user_config_path().is_file():
        sources.append((str(user_config_path()), _read(user_config_path())))
    project = config_file or (project_dir or Path.cwd()) / PROJECT_FILE
    # Where the next start reads its configuration from, whether or not the files exist yet.
    claim_config_file(project)
    if include_user:
        claim_config_file(user_config_path())
    if config_file is not None and not config_file.is_file():
        raise ConfigError(f"{config_file}: no such configuration file")
    if project.is_file():
        sources.append((str(project), _read(project)))
    if overrides:
        sources.append(("command-line flags", dict(overrides)))
    merged: dict[str, Any] = {}
    for name, data in sources:
        try:
            HeronConfig.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(name, problems=_problems(exc)) from exc
        merged = _merge(merged, data)
    return HeronConfig.model_validate(merged)
