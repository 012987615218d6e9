"""One agent's MCP tools, assembled once per session from `[mcp]` configuration.

`assemble_mcp` connects the configured servers (lazily: pinned servers are listed from their
pins and start on first call), applies the agent's access policy and decides the exposure:

- **direct** (fewer policy-allowed MCP tools than `deferred_threshold`, or `exposure =
  "direct"`): every allowed MCP tool is registered as a normal tool, in the bundle
  `mcp:<server>`. Filter groups hide tools per turn through `turn_exclusions`.
- **deferred** (from the threshold on, or `exposure = "deferred"`, or whenever heron's own
  tools are deferred too, `local_tools`): only the search tool (`tool_search` or
  `discover_tools`, `DiscoveryOptions.tool`) is registered; the model sees a catalogue section
  of at most `CATALOGUE_TOKENS` tokens with the meta-tools, and loads schemas into the session's
  `ActivatedToolSet`. Tools of `always` filter groups are activated up front. A call to an
  exact catalogue name that was never loaded still runs (the never-unreachable rule), through
  `catalogue`.

The catalogue section is rendered once, here. It never changes afterwards — tools loaded later
are not taken out of it — so the system prompt stays byte-identical for the whole session and
provider prompt caches keep working (docs/discovery.md, "The prompt cache", says what each
provider adapter does with a loaded tool).

Typical use (the CLI does exactly this)::

    activated = ActivatedToolSet()
    mcp = await assemble_mcp(config.mcp, state_dir=..., autonomy=..., allowed_tools=...,
                             excluded_tools=..., builtin_names=..., activated=activated)
    registry = ToolRegistry(builtin_tools)
    mcp.register(registry)
    agent = Agent(model=model, tools=registry,
                  system_prompt=mcp.system_prompt(base, native_tools=..., strict_tool_parsing=...),
                  allowed_tools=mcp.admit(allowed_tools), excluded_tools=...,
                  activated=mcp.activated, catalogue=mcp.catalogue,
                  turn_exclusions=mcp.turn_exclusions)
    try: ...
    finally: await mcp.aclose()
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from heron.discovery import DiscoveryParams, UsageRecord
from heron.mcp.catalogue import Exposure, McpAccessPolicy, McpCatalogue, choose_exposure
from heron.mcp.config import McpConfig, name_matches
from heron.mcp.filter_groups import compute_turn_filter
from heron.mcp.tool_search import (
    SEARCH_TOOL_NAMES,
    Companion,
    DiscoveryEngine,
    SearchToolName,
    ToolSearchTool,
    resolve_unactivated,
)
from heron.mcp.trust import ToolDefinition, detect_shadowing
from heron.models.tokens import EstimateCounter, count_tools
from heron.tools.definition import Tool, ToolSpec
from heron.tools.registry import ActivatedToolSet, Autonomy, ToolRegistry, normalize_name

if TYPE_CHECKING:
    from heron.mcp.auth.consent import ConsentChannel
    from heron.mcp.client import McpClientManager
    from heron.mcp.client.human_input import HumanInput

__all__ = [
    "CAPABILITY_BUNDLE",
    "CATALOGUE_TOKENS",
    "DiscoveryOptions",
    "McpAssembly",
    "McpGrant",
    "McpToolCatalogue",
    "assemble_mcp",
    "assemble_tools",
    "deferred_grant",
]

CAPABILITY_BUNDLE = "mcp"
"""Registry bundle of the search tool and the resource/prompt tools (`mcp_resources`, …)."""
CATALOGUE_TOKENS = 2000
"""The catalogue section and the meta-tools' definitions together stay within this many
prompt tokens (counted with the conservative `anthropic` estimate), however many tools exist."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DiscoveryOptions:
    """How deferred tools are found and shown (`[discovery]`, with `[mcp] search_min_score`)."""

    tool: SearchToolName = "tool_search"
    """The search tool's name: `tool_search` or `discover_tools` (the same tool)."""
    catalogue_tokens: int = CATALOGUE_TOKENS
    embeddings: bool = True
    """Rank with the embeddings extra when it is installed; False: lexical only."""
    params: DiscoveryParams | None = None
    """Ranking knobs; None: the engine's defaults with `[mcp] search_min_score`."""
    companions: Sequence[Companion] = ()
    """Skills the search also finds."""
    meta_tools: Sequence[ToolSpec] = ()
    """Other always-present discovery tools (`load_skill`, …) counted in `catalogue_tokens`."""
    usage: Callable[[], Sequence[UsageRecord]] | None = None
    """The usage prior's history (read once, when the index is built); None: no prior."""
    hierarchical: bool = False
    """Servers ranked first, then their tools (`DiscoveryParams.hierarchical`)."""


class McpToolCatalogue:
    """The engine's `ToolCatalogue` over a deferred MCP catalogue.

    `resolve` hands out a tool the model calls by its exact catalogue name without loading it
    first, and activates it into `activated` (the session's set, so its schema is sent from the
    next request on). Names `policy` denies — including a per-run narrowing — resolve to None,
    so the engine reports them as unknown.
    """

    __slots__ = ("_activated", "_catalogue", "_policy", "_preloaded", "_specs")

    def __init__(
        self,
        catalogue: McpCatalogue,
        activated: ActivatedToolSet,
        policy: McpAccessPolicy,
        *,
        preloaded: Collection[str] = (),
    ) -> None:
        self._catalogue = catalogue
        self._activated = activated
        self._policy = policy
        self._preloaded = frozenset(preloaded)
        self._specs: tuple[ToolSpec, ...] | None = None

    def names(self) -> list[str]:
        """Every name `resolve` could hand out (the text protocol parses calls to them)."""
        return [e.name for e in self._catalogue.entries if self._policy.allows(e.tool.spec)]

    def specs(self) -> tuple[ToolSpec, ...]:
        """The loadable tools' specs in catalogue order, without those loaded at assembly (the
        deferred tools of a provider with deferred loading; the same tuple every time)."""
        if self._specs is None:
            self._specs = tuple(
                e.tool.spec
                for e in self._catalogue.entries
                if self._policy.allows(e.tool.spec) and e.name not in self._preloaded
            )
        return self._specs

    def resolve(self, name: str) -> Tool | None:
        """The tool with exactly this catalogue name, activated; None when absent or denied."""
        return resolve_unactivated(name, self._catalogue, self._activated, policy=self._policy)

    def tools(self) -> list[Tool]:
        """Every tool `resolve` could hand out, in catalogue order (what a grant narrows)."""
        return [e.tool for e in self._catalogue.entries if self._policy.allows(e.tool.spec)]

    @property
    def groups(self) -> Mapping[str, str]:
        """The labels of the catalogue's tools that are not MCP tools, by name."""
        return self._catalogue.groups


@dataclass(frozen=True, kw_only=True, slots=True)
class McpGrant:
    """What a sub-agent (or a narrowed run) receives of its parent's MCP tools."""

    activated: ActivatedToolSet
    """A set of its own, holding the parent's activated tools that the grant allows."""
    catalogue: McpToolCatalogue | None
    """Exact-name resolution within the grant (deferred exposure only)."""
    tools: tuple[Tool, ...] = ()
    """The search tool over the granted part of the catalogue (deferred exposure only)."""
    prompt_section: str = ""
    """The granted catalogue for the sub-agent's system prompt (with its search tool)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class McpAssembly:
    """The MCP part of one agent, ready to hand to `Agent`."""

    exposure: Exposure
    bundles: Mapping[str, tuple[Tool, ...]]
    """Tools to register, by registry bundle (`mcp:<server>` for MCP tools, `mcp` for
    `tool_search` and the resource/prompt tools)."""
    prompt_section: str
    """The deferred catalogue for the system prompt, rendered once; empty in direct exposure,
    when `tool_search` is excluded and when nothing is left to load."""
    activated: ActivatedToolSet
    catalogue: McpToolCatalogue | None
    """The never-unreachable resolver (deferred exposure only)."""
    turn_exclusions: Callable[[str], Collection[str]] | None
    """User message → MCP tool names hidden for that turn (direct exposure with filter
    groups only; in deferred exposure dynamic groups have no effect, see `filter_groups`)."""
    problems: tuple[str, ...]
    """What the operator should see: servers that could not be listed, shadowed names."""
    policy: McpAccessPolicy
    tool_catalogue: McpCatalogue
    """Every policy-allowed MCP tool, whatever the exposure."""
    search_registered: bool = False
    """Whether the search tool is among the tools (deferred exposure with something to load)."""
    engine: DiscoveryEngine | None = None
    """The ranking index over the catalogue, shared with sub-agents' searches."""
    discovery: DiscoveryOptions = DiscoveryOptions()
    preloaded: tuple[str, ...] = ()
    """Catalogue tools loaded at assembly (`always` filter groups, `[discovery] prompt_tools`)."""
    manager: McpClientManager | None = None

    @property
    def tools(self) -> tuple[Tool, ...]:
        """Every tool to register, bundle after bundle."""
        return tuple(t for tools in self.bundles.values() for t in tools)

    def register(self, registry: ToolRegistry) -> None:
        """Add the assembled tools to `registry`, each in its bundle."""
        for bundle, tools in self.bundles.items():
            registry.add_all(tools, bundle=bundle)

    def admit(self, allowed_tools: Collection[str] | None) -> list[str] | None:
        """The agent's allow-list with the assembled tools added.

        Policy already decided which MCP tools exist (an allow-list written for built-ins does
        not hide MCP servers the configuration enabled), so the registry must not drop them
        again. `None` stays `None`.
        """
        if allowed_tools is None:
            return None
        return list(dict.fromkeys([*allowed_tools, *(t.spec.name for t in self.tools)]))

    def system_prompt(self, base: str, *, native_tools: bool, strict_tool_parsing: bool) -> str:
        """`base` followed by the catalogue section.

        A model without native tool calling under strict parsing gets no tools at all, so it
        gets no catalogue either.
        """
        if not self.prompt_section or (strict_tool_parsing and not native_tools):
            return base
        return f"{base}\n\n{self.prompt_section}" if base else self.prompt_section

    def over(self, activated: ActivatedToolSet) -> McpAssembly:
        """This assembly for another session, whose activated set is `activated` (empty): the
        catalogue, its ranking engine, the tools' schemas and the prompt section are shared;
        the set, the search tool loading into it and the resolver over it are its own, and the
        preloaded tools are activated in it."""
        for name in self.preloaded:
            tool = self.tool_catalogue.get(name)
            if tool is not None:
                activated.activate(tool)
        if self.catalogue is None:  # direct exposure: the tools are in the bundles
            return dataclasses.replace(self, activated=activated)
        bundles = {
            bundle: tuple(t.over(activated) if isinstance(t, ToolSearchTool) else t for t in tools)
            for bundle, tools in self.bundles.items()
        }
        return dataclasses.replace(
            self,
            bundles=bundles,
            activated=activated,
            catalogue=McpToolCatalogue(
                self.tool_catalogue, activated, self.policy, preloaded=self.preloaded
            ),
        )

    def grant(self, allowed_tools: Collection[str] | None = None) -> McpGrant:
        """What a sub-agent may use: the parent's activated tools that `allowed_tools` (names
        or globs; `None` for everything the parent may use) allows, and — in deferred exposure —
        its own `tool_search` and exact-name resolution limited to the same grant. The
        sub-agent's activations stay in its own set."""
        policy = self.policy if allowed_tools is None else self.policy.narrow(allowed_tools)
        activated = ActivatedToolSet()
        for name in self.activated.names():
            tool = self.activated.get(name)
            if tool is not None and policy.allows(tool.spec):
                activated.activate(tool)
        if self.exposure == "direct":
            return McpGrant(activated=activated, catalogue=None)
        search = next(
            (t for t in self.bundles.get(CAPABILITY_BUNDLE, ()) if isinstance(t, ToolSearchTool)),
            None,
        )
        return deferred_grant(
            self.tool_catalogue.narrowed(policy), activated, search=search, options=self.discovery
        )

    async def aclose(self) -> None:
        """Stop every server this assembly started."""
        if self.manager is not None:
            await self.manager.aclose()


def deferred_grant(
    catalogue: McpCatalogue,
    activated: ActivatedToolSet,
    *,
    search: ToolSearchTool | None,
    options: DiscoveryOptions | None = None,
) -> McpGrant:
    """A sub-agent's part of a deferred catalogue: `catalogue` is already narrowed to its grant
    and `activated` is its own set (holding the parent's activated tools the grant allows).
    It gets exact-name resolution within the grant and, when the parent has a search tool
    (`search`), one of its own under the same name over the parent's shared engine, searching
    only the grant, with the catalogue section for its prompt."""
    resolver = McpToolCatalogue(
        catalogue, activated, McpAccessPolicy(), preloaded=activated.names()
    )
    if search is None:
        return McpGrant(activated=activated, catalogue=resolver)
    own = ToolSearchTool(catalogue, activated, name=search.name, engine=search.engine)
    section = _section(catalogue, activated.names(), own.spec, options or DiscoveryOptions())
    if not section:
        return McpGrant(activated=activated, catalogue=resolver)
    return McpGrant(activated=activated, catalogue=resolver, tools=(own,), prompt_section=section)


def _excluded(name: str, excluded_tools: Collection[str]) -> bool:
    key = normalize_name(name)
    return any(name_matches(normalize_name(p), key) for p in excluded_tools)


def _shadowing_problems(tools: Sequence[Tool], builtin_names: Collection[str]) -> list[str]:
    # Pins cover what one server says; a clash depends on the combination (other servers,
    # built-ins), which can change without any server changing, so it is reported every time.
    definitions: list[ToolDefinition] = []
    for tool in tools:
        definition = getattr(tool, "definition", None)
        if isinstance(definition, ToolDefinition):
            definitions.append(definition)
    findings = detect_shadowing(definitions, builtin_names=builtin_names)
    return [f"MCP tool {f.server}__{f.tool}: {f.message}" for f in findings]


def _section(
    catalogue: McpCatalogue,
    preloaded: Collection[str],
    search: ToolSpec,
    options: DiscoveryOptions,
) -> str:
    """The catalogue section within what the meta-tools leave of `catalogue_tokens`."""
    counter = EstimateCounter("anthropic")
    meta = count_tools(counter, [search, *options.meta_tools])
    return catalogue.prompt_section(
        exclude=preloaded,
        budget_chars=None,
        budget_tokens=max(0, options.catalogue_tokens - meta),
        search_tool=search.name,
        counter=counter,
    )


def assemble_tools(
    cfg: McpConfig,
    tools: Sequence[Tool],
    *,
    autonomy: Autonomy,
    allowed_tools: Collection[str] | None,
    excluded_tools: Collection[str],
    activated: ActivatedToolSet,
    builtin_names: Collection[str] = (),
    capability_tools: Sequence[Tool] = (),
    unavailable: Mapping[str, str] | None = None,
    manager: McpClientManager | None = None,
    local_tools: Mapping[str, Sequence[Tool]] | None = None,
    prompt_tools: Collection[str] = (),
    discovery: DiscoveryOptions | None = None,
) -> McpAssembly:
    """The assembly over MCP tools already listed (`assemble_mcp` lists them from servers).

    `tools` are the MCP tools (namespaced `<server>__<tool>`, owned by `mcp:<server>`);
    `capability_tools` are always registered directly when policy allows them (the
    `mcp_resources` / `mcp_prompts` tools); `unavailable` maps servers that could not be
    listed to the reason.

    `local_tools` (heron's own and the user's tools, by group label) join the deferred
    catalogue: with them the exposure is deferred whatever `[mcp] exposure` says, and only the
    MCP tools named in `prompt_tools` are loaded up front (`[discovery] prompt_tools`).
    `discovery` names the search tool, the token budget and the skills it also finds.
    """
    options = discovery or DiscoveryOptions()
    policy = McpAccessPolicy(
        allowed_tools=allowed_tools,
        excluded_tools=excluded_tools,
        read_only=autonomy == "read-only",
    )
    groups = {t.spec.name: g for g, ts in (local_tools or {}).items() for t in ts}
    local = [t for ts in (local_tools or {}).values() for t in ts]
    catalogue = McpCatalogue([*tools, *local], policy=policy, groups=groups)
    capabilities = tuple(t for t in capability_tools if policy.allows(t.spec))
    exposure: Exposure = (
        "deferred"
        if local
        else choose_exposure(len(catalogue), cfg.exposure, cfg.deferred_threshold)
    )
    problems = [f"MCP server {s!r} is unavailable: {r}" for s, r in (unavailable or {}).items()]
    problems += _shadowing_problems(catalogue.tools(), builtin_names)
    groups_cfg = cfg.tool_filter_groups
    bundles: dict[str, tuple[Tool, ...]] = {}

    if exposure == "direct":
        by_server: dict[str, list[Tool]] = {}
        for entry in catalogue.entries:
            by_server.setdefault(f"mcp:{entry.server}", []).append(entry.tool)
        bundles = {b: tuple(ts) for b, ts in by_server.items()}
        if capabilities:
            bundles[CAPABILITY_BUNDLE] = capabilities
        turn_exclusions: Callable[[str], Collection[str]] | None = None
        if groups_cfg:
            mcp_names = [*catalogue.names(), *(t.spec.name for t in capabilities)]

            def turn_exclusions(message: str) -> Collection[str]:
                return compute_turn_filter(
                    groups_cfg, mcp_names, message, allowed=policy.allows_name, exposure="direct"
                ).excluded

        return McpAssembly(
            exposure=exposure,
            bundles=bundles,
            prompt_section="",
            activated=activated,
            catalogue=None,
            turn_exclusions=turn_exclusions,
            problems=tuple(problems),
            policy=policy,
            tool_catalogue=catalogue,
            manager=manager,
            discovery=options,
        )

    always = compute_turn_filter(
        groups_cfg, catalogue.names(), "", allowed=policy.allows_name, exposure="deferred"
    ).preactivate
    preactivate = list(dict.fromkeys([*always, *(n for n in prompt_tools if n in catalogue)]))
    for name in preactivate:
        tool = catalogue.get(name)
        if tool is not None:
            activated.activate(tool)
    params = options.params or DiscoveryParams(
        lexical_min_relevance=cfg.search_min_score, hierarchical=options.hierarchical
    )
    engine = DiscoveryEngine(
        [e for e in catalogue.entries if e.name not in preactivate],
        companions=options.companions,
        embedder="auto" if options.embeddings else None,
        params=params,
        usage=options.usage,
    )
    search = ToolSearchTool(catalogue, activated, name=options.tool, engine=engine)
    # Computed once: the static prefix of the prompt never changes afterwards.
    section = _section(catalogue, preactivate, search.spec, options)
    search_registered = bool(section) and not any(
        _excluded(n, excluded_tools) for n in SEARCH_TOOL_NAMES
    )
    surface: list[Tool] = []
    if search_registered:
        surface.append(search)
    surface.extend(capabilities)
    if surface:
        bundles[CAPABILITY_BUNDLE] = tuple(surface)
    return McpAssembly(
        exposure=exposure,
        bundles=bundles,
        # The registry and the prompt move together: no search tool, no catalogue to search.
        prompt_section=section if search_registered else "",
        activated=activated,
        catalogue=McpToolCatalogue(catalogue, activated, policy, preloaded=preactivate),
        turn_exclusions=None,
        problems=tuple(problems),
        policy=policy,
        tool_catalogue=catalogue,
        manager=manager,
        search_registered=search_registered,
        engine=engine,
        discovery=options,
        preloaded=tuple(preactivate),
    )


async def assemble_mcp(
    cfg: McpConfig,
    *,
    state_dir: Path,
    autonomy: Autonomy,
    allowed_tools: Collection[str] | None,
    excluded_tools: Collection[str],
    builtin_names: Collection[str],
    activated: ActivatedToolSet,
    consent: ConsentChannel | None = None,
    local_tools: Mapping[str, Sequence[Tool]] | None = None,
    prompt_tools: Collection[str] = (),
    discovery: DiscoveryOptions | None = None,
    human_input: HumanInput | None = None,
    store_url: str | None = None,
) -> McpAssembly:
    """Connect the configured servers and assemble their tools for one agent.

    Servers are pinned in the trust store under `state_dir` and checked at every start; OAuth
    tokens live there too. A server that cannot be listed (not approved, changed since
    approval, failing to start, missing credentials, waiting for an OAuth login) is left out
    and named in `problems`; the others still work. `consent` is how a login that becomes
    necessary asks an operator (once, in the background); without it the server stays
    `auth_required` until `heron mcp login`. `human_input` answers the servers' requests for
    user input (`heron.mcp.client.human_input`). With `store_url` the pins and the OAuth tokens
    are in that shared store. Call `aclose()` at the end of the session.
    """
    from heron.mcp.auth import McpAuth
    from heron.mcp.client import McpClientManager, resource_tools
    from heron.mcp.trust.pin_store import pin_store

    manager = McpClientManager(
        cfg,
        trust=pin_store(state_dir, store_url=store_url),
        auth=McpAuth(cfg, state_dir=state_dir, consent=consent, store_url=store_url),
        builtin_names=tuple(builtin_names),
        human_input=human_input,
    )
    try:
        tools, unavailable = await manager.tools()
        return assemble_tools(
            cfg,
            tools,
            autonomy=autonomy,
            allowed_tools=allowed_tools,
            excluded_tools=excluded_tools,
            activated=activated,
            builtin_names=builtin_names,
            capability_tools=resource_tools(manager),
            unavailable=unavailable,
            manager=manager,
            local_tools=local_tools,
            prompt_tools=prompt_tools,
            discovery=discovery,
        )
    except BaseException:
        await manager.aclose()
        raise
