"""heron's configuration and what it builds.

- `schema`: `HeronConfig` (every `heron.toml` key, validated strictly) and `load_config` (user
  file, project file, then overrides; every problem listed in one `ConfigError`).
- `build`: the configuration turned into a running agent — the model (or one picked from the
  environment, `detect_model`), the user's tools, heron's built-in sets, the MCP servers,
  approval, receipts, budgets and telemetry. `heron run`, `heron chat` and `heron serve` build
  their agent here; so can Python code:

      from heron.config import load_config, open_agent

      async with open_agent(load_config()) as agent:
          result = await agent.run("Summarise README.md")

The builders are imported on first use, so `import heron.config` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from heron._support.lazy import lazy_getattr
from heron.config.schema import (
    PROJECT_FILE,
    AgentConfig,
    ApprovalConfig,
    BudgetsConfig,
    ConfigError,
    HeronConfig,
    LoopDetectionConfig,
    StateConfig,
    TelemetryConfig,
    ToolsConfig,
    load_config,
    user_config_path,
)

if TYPE_CHECKING:
    from heron.config.build import (
        BuildError,
        ModelChoice,
        NoModelError,
        agent_model,
        build_agent,
        configured_model,
        detect_model,
        load_user_tools,
        open_agent,
        open_builtin,
        open_mcp,
        with_model,
    )

_EXPORTS: dict[str, str] = {
    name: "heron.config.build"
    for name in (
        "BuildError",
        "ModelChoice",
        "NoModelError",
        "agent_model",
        "build_agent",
        "configured_model",
        "detect_model",
        "load_user_tools",
        "open_agent",
        "open_builtin",
        "open_mcp",
        "with_model",
    )
}

__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())

__all__ = [
    "PROJECT_FILE",
    "AgentConfig",
    "ApprovalConfig",
    "BudgetsConfig",
    "BuildError",
    "ConfigError",
    "HeronConfig",
    "LoopDetectionConfig",
    "ModelChoice",
    "NoModelError",
    "StateConfig",
    "TelemetryConfig",
    "ToolsConfig",
    "agent_model",
    "build_agent",
    "configured_model",
    "detect_model",
    "load_config",
    "load_user_tools",
    "open_agent",
    "open_builtin",
    "open_mcp",
    "user_config_path",
    "with_model",
]
