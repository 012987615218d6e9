"""The configuration's discovery and skills: `[skills]` found and gated (`open_skills`), the
tools `[discovery] prompt_tools` defers (`deferred_tools`), the search tool's options with the
usage prior's history from the execution audit trail (`discovery_options`), and the skill
tools, guard and prompt section of a built agent (`add_skills`). `heron.config.build` uses
them to assemble the agent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from heron._support.state import open_db
from heron.audit.sqlite_store import SqliteExecutionStore
from heron.config.schema import HeronConfig
from heron.tools.definition import Tool
from heron.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from heron.config.builtin import Builtin
    from heron.discovery import UsageRecord
    from heron.mcp.assembly import McpAssembly
    from heron.skills import SkillSet

__all__ = ["add_skills", "deferred_tools", "discovery_options", "open_skills"]


def open_skills(config: HeronConfig, *, project_dir: Path | None = None) -> SkillSet | None:
    """The `[skills]` of the project (`project_dir`, default the current directory; offered
    only once approved), the user's folders and installed packages; None when disabled."""
    s = config.skills
    if not s.enabled:
        return None
    from heron.mcp.trust import SqliteTrustStore
    from heron.skills import SkillTrust, load_skills

    return load_skills(
        project_dir or Path.cwd(),
        trust=SkillTrust(SqliteTrustStore(config.state.path())),
        extra_dirs=[Path(d).expanduser() for d in s.dirs],
        packages=s.packages,
    )


def deferred_tools(
    config: HeronConfig, user_tools: Sequence[Tool], builtin: Builtin | None
) -> dict[str, list[Tool]]:
    """The user's and heron's own tools that `[discovery] prompt_tools` puts behind the search
    tool, by group (`user`, or the built-in set's name); empty when it is unset."""
    keep = config.discovery.prompt_tools
    if keep is None:
        return {}
    groups: dict[str, list[Tool]] = {}
    sets = builtin.tools.items() if builtin is not None else ()
    for group, tools in [("user", list(user_tools)), *sets]:
        deferred = [t for t in tools if t.spec.name not in keep]
        if deferred:
            groups.setdefault(group, []).extend(deferred)
    return groups


def discovery_options(config: HeronConfig, skills: SkillSet | None) -> Any:
    from heron.mcp.assembly import DiscoveryOptions
    from heron.mcp.tool_search import Companion
    from heron.skills import LOAD_SKILL, skill_tools

    d = config.discovery
    companions: list[Companion] = []
    meta: list[Any] = []
    if skills is not None and len(skills.catalogue):
        hint = f"`{LOAD_SKILL}` reads one"
        companions = [
            Companion(name=s.name, description=s.description, hint=hint) for s in skills.catalogue
        ]
        meta = [t.spec for t in skill_tools(skills.catalogue)[0]]
    return DiscoveryOptions(
        tool=d.tool,
        catalogue_tokens=d.catalogue_tokens,
        embeddings=d.embeddings,
        companions=companions,
        meta_tools=meta,
        usage=_usage_history(config.state.path()) if d.usage_prior else None,
        hierarchical=d.hierarchical,
    )


def _usage_history(state_dir: Path) -> Callable[[], Sequence[UsageRecord]]:
    """Reads the usage prior's history from the execution audit trail (in the worker thread
    that builds the discovery index: its own connection, closed after)."""

    def read() -> Sequence[UsageRecord]:
        from heron.audit.usage import usage_records

        if not (state_dir / "heron.db").exists():
            return ()  # nothing recorded yet: do not create the state directory here
        conn = open_db(state_dir)
        try:
            return usage_records(SqliteExecutionStore(conn))
        finally:
            conn.close()

    return read


def add_skills(
    config: HeronConfig,
    registry: ToolRegistry,
    system_prompt: str,
    skills: SkillSet,
    mcp: McpAssembly | None,
    builtin: Builtin | None,
    on_problem: Callable[[str], None] | None,
    hooks: list[Any],
) -> tuple[str, list[str]]:
    """Register the skill tools and their guard; the system prompt with the skills section."""
    from heron.skills import skill_tools

    known = [t.spec.name for t in registry.tools()]
    if mcp is not None:
        known += mcp.tool_catalogue.names()
    workspace = builtin.workspace if builtin is not None else Path.cwd()
    tools, guard = skill_tools(skills.catalogue, known_tools=known, workspace=workspace)
    registry.add_all(tools, bundle="skills")
    hooks.append(guard)
    search = mcp.discovery.tool if mcp is not None and mcp.search_registered else None
    section = skills.catalogue.prompt_section(
        budget_tokens=config.skills.catalogue_tokens, search_tool=search
    )
    report = section.report()
    if report is not None and on_problem is not None:
        on_problem(f"skills: {report}")
    prompt = f"{system_prompt}\n\n{section.text}" if system_prompt else section.text
    return prompt, [t.spec.name for t in tools]
