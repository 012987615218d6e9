"""The deferred tool catalogue: what exists, what policy allows, and how it is shown to the
model.

With few MCP tools every schema goes to the model directly. With many (five servers can cost
tens of thousands of tokens of definitions) heron switches to **deferred** exposure: the model
sees one search tool (`tool_search` or `discover_tools`) and a catalogue section bounded in
tokens however many tools exist; full schemas are loaded on demand into the session's
`ActivatedToolSet`. With `[discovery] prompt_tools` heron's own tools can be deferred too.

The catalogue section is built once per session and never changes afterwards: tools activated
later are *not* removed from it, so the prompt prefix stays byte-identical and provider prompt
caches keep working.

`McpAccessPolicy` decides which MCP tools may exist at all. A denied tool is not in the
catalogue, is never found by `tool_search` and can never be activated.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from heron.mcp.config import name_matches
from heron.models.tokens import EstimateCounter, TokenCounter
from heron.tools.definition import Tool, ToolSpec
from heron.tools.registry import NAMESPACE_SEP, ActivatedToolSet, normalize_name

__all__ = [
    "CatalogueEntry",
    "Exposure",
    "McpAccessPolicy",
    "McpCatalogue",
    "choose_exposure",
    "loaded_status_line",
    "summary_line",
]

Exposure = Literal["direct", "deferred"]
SUMMARY_CHARS = 120
DETAIL_BUDGET_CHARS = 12_000
"""Above this many characters the catalogue section lists names only, grouped by server."""


class McpAccessPolicy:
    """Which MCP tools may exist for an agent (and, narrowed, for one run).

    - `excluded_tools` always wins (names or globs, compared trimmed and case-folded);
    - `allowed_tools` is the agent's allow-list: `None` allows everything, an empty list
      allows nothing, otherwise a tool is allowed when listed (or matched by a glob) *or* when
      it is a namespaced MCP name (`server__tool`) — allow-lists written for built-ins do not
      silently hide MCP servers the configuration enabled;
    - `caller_allowed` is a per-run narrowing and is strict: no namespaced auto-admit;
    - `read_only` (read-only autonomy) allows only tools whose annotations say read-only —
      which for MCP tools means tools of `trusted` servers that declare it.
    """

    __slots__ = ("_allowed", "_caller", "_excluded", "_read_only")

    def __init__(
        self,
        *,
        allowed_tools: Collection[str] | None = None,
        excluded_tools: Collection[str] = (),
        caller_allowed: Collection[str] | None = None,
        read_only: bool = False,
    ) -> None:
        self._allowed = None if allowed_tools is None else tuple(allowed_tools)
        self._excluded = tuple(normalize_name(n) for n in excluded_tools)
        self._caller = None if caller_allowed is None else tuple(caller_allowed)
        self._read_only = read_only

    def narrow(self, caller_allowed: Collection[str]) -> McpAccessPolicy:
        """The same policy with a per-run allow-list (it can only narrow)."""
        caller = tuple(caller_allowed)
        if self._caller is not None:
            caller = tuple(n for n in caller if _listed(self._caller, n))
        return McpAccessPolicy(
            allowed_tools=self._allowed,
            excluded_tools=self._excluded,
            caller_allowed=caller,
            read_only=self._read_only,
        )

    def allows_name(self, name: str) -> bool:
        """The name-only part of the decision (exclusions and allow-lists)."""
        key = normalize_name(name)
        if any(name_matches(pattern, key) for pattern in self._excluded):
            return False
        if self._allowed is not None and (
            not self._allowed or not (_listed(self._allowed, name) or NAMESPACE_SEP in name)
        ):
            return False
        return self._caller is None or _listed(self._caller, name)

    def allows(self, spec: ToolSpec) -> bool:
        """Whether a tool may exist for this agent/run."""
        if not self.allows_name(spec.name):
            return False
        return not self._read_only or spec.annotations.read_only


def _listed(patterns: Sequence[str], name: str) -> bool:
    return any(name_matches(p, name) for p in patterns)


Policy = McpAccessPolicy | Callable[[ToolSpec], bool]


def _allowed(policy: Policy | None, spec: ToolSpec) -> bool:
    if policy is None:
        return True
    if isinstance(policy, McpAccessPolicy):
        return policy.allows(spec)
    return policy(spec)


def summary_line(description: str, limit: int = SUMMARY_CHARS) -> str:
    """The first sentence (or line) of a description, on one line, at most `limit` chars."""
    text = " ".join(description.split())
    if not text:
        return "MCP tool"
    match = re.search(r"(?<=[.!?])\s", text)
    first = text[: match.start()] if match else text
    if len(first) > limit:
        first = first[: limit - 1].rstrip() + "…"
    return first


@dataclass(frozen=True, kw_only=True, slots=True)
class CatalogueEntry:
    """One policy-allowed tool of the catalogue."""

    name: str
    """The namespaced name the model calls."""
    server: str
    tool_name: str
    """The server's own name for the tool."""
    title: str
    summary: str
    """One-line description shown in the catalogue section."""
    description: str
    parameters: tuple[str, ...]
    tool: Tool


def _entry(tool: Tool, group: str | None = None) -> CatalogueEntry:
    spec = tool.spec
    definition = getattr(tool, "definition", None)
    if definition is not None:
        server, tool_name, title = definition.server, definition.name, definition.title or ""
    elif group is not None:
        server, tool_name, title = group, spec.name, ""
    else:
        server, _, tool_name = spec.name.partition(NAMESPACE_SEP)
        if not tool_name:
            server, tool_name = spec.owner.removeprefix("mcp:"), spec.name
        title = ""
    props = spec.parameters.get("properties")
    params = tuple(str(p) for p in props) if isinstance(props, dict) else ()
    return CatalogueEntry(
        name=spec.name,
        server=server,
        tool_name=tool_name,
        title=title,
        summary=summary_line(spec.description),
        description=spec.description,
        parameters=params,
        tool=tool,
    )


class McpCatalogue:
    """The policy-allowed deferred tools of a session, in deterministic (name) order.

    Mostly MCP tools; with `[discovery] prompt_tools` also heron's own and the user's tools,
    each listed under its `groups` label (the built-in set it comes from, `user`)."""

    def __init__(
        self,
        tools: Iterable[Tool],
        *,
        policy: Policy | None = None,
        groups: Mapping[str, str] | None = None,
    ) -> None:
        labels = groups or {}
        allowed = [t for t in tools if _allowed(policy, t.spec)]
        entries = sorted(
            (_entry(t, labels.get(t.spec.name)) for t in allowed), key=lambda e: e.name
        )
        self._groups = dict(labels)
        self._entries = tuple(entries)
        self._by_name = {e.name: e for e in entries}

    @property
    def entries(self) -> tuple[CatalogueEntry, ...]:
        return self._entries

    def names(self) -> list[str]:
        return [e.name for e in self._entries]

    def get(self, name: str) -> Tool | None:
        """The tool with exactly this (namespaced) name, if the catalogue has it."""
        entry = self._by_name.get(name)
        return entry.tool if entry is not None else None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return len(self._entries)

    def tools(self) -> list[Tool]:
        return [e.tool for e in self._entries]

    @property
    def groups(self) -> Mapping[str, str]:
        """The labels of tools that are not MCP tools, by name."""
        return self._groups

    def narrowed(self, policy: Policy) -> McpCatalogue:
        """The part of this catalogue `policy` allows (a sub-agent's grant)."""
        return McpCatalogue(self.tools(), policy=policy, groups=self._groups)

    def prompt_section(
        self,
        *,
        exclude: Collection[str] = (),
        budget_chars: int | None = DETAIL_BUDGET_CHARS,
        budget_tokens: int | None = None,
        search_tool: str = "tool_search",
        counter: TokenCounter | None = None,
    ) -> str:
        """The deferred-tools section for the system prompt; empty when nothing is listed.

        The richest form that fits both budgets (characters of the listing, tokens of the
        whole section counted with `counter`, by default the conservative `anthropic`
        estimate) is chosen, so the section stays bounded however many tools exist:

        1. each tool as `name - one-line summary`;
        2. tool names only, one line per server;
        3. one line per server: its tool count and first tool names;
        4. as many of those server lines as fit, then how many servers and tools are left
           (`search_tool` searches them all).

        `exclude` is for tools pre-activated at assembly (their schemas are sent anyway). Do
        not pass tools activated later in the session: the section must stay unchanged for
        prompt caching.
        """
        skip = set(exclude)
        entries = [e for e in self._entries if e.name not in skip]
        if not entries:
            return ""
        count = (counter or EstimateCounter("anthropic")).count

        def fits(text: str) -> bool:
            return budget_tokens is None or count(text) <= budget_tokens

        intro = _intro(search_tool)
        body = "\n".join(f"{e.name} - {e.summary}" for e in entries)
        section = intro + _DETAIL + _OPEN + body + _CLOSE
        if (budget_chars is None or len(body) <= budget_chars) and fits(section):
            return section
        compact = intro + _COMPACT + _OPEN + "\n".join(_server_lines(entries)) + _CLOSE
        if fits(compact):
            return compact
        servers = _directory_lines(entries)
        head = intro + _DIRECTORY.format(tool=search_tool) + _OPEN
        directory = head + "\n".join(line for line, _ in servers) + _CLOSE
        if fits(directory):
            return directory
        kept: list[str] = []
        for n, (line, _) in enumerate(servers):
            after = servers[n + 1 :]
            rest = _rest_line(len(after), sum(k for _, k in after), search_tool)
            if not fits(head + "\n".join([*kept, line, rest]) + _CLOSE):
                break
            kept.append(line)
        left = servers[len(kept) :]
        rest = _rest_line(len(left), sum(k for _, k in left), search_tool)
        return head + "\n".join([*kept, rest]) + _CLOSE


def _intro(search_tool: str) -> str:
    return (
        "## More tools (load before use)\n\n"
        "These tools exist but their schemas are not loaded. When you need a capability that "
        f"none of your loaded tools has, call `{search_tool}` first with the need in plain "
        'words ("I need stock prices"): it loads the best matches for the rest of the session '
        'and lists their schemas. `"select:name1,name2"` loads exact names. Do not guess '
        "tools that are not loaded."
    )


_DETAIL = ""
_COMPACT = (
    " Each line is one server and its tool names; the full name of a tool is `<server>__<tool>`."
)
_DIRECTORY = " Each line is one server: how many tools it has and some of their names; `{tool}` "
_DIRECTORY += "finds tools by meaning across all of them."
_OPEN = "\n\n<tool-catalogue>\n"
_CLOSE = "\n</tool-catalogue>"
_DIRECTORY_NAMES = 6


def _grouped(entries: Sequence[CatalogueEntry]) -> tuple[dict[str, list[str]], list[str]]:
    by_server: dict[str, list[str]] = {}
    loose: list[str] = []
    for e in entries:
        if e.name == f"{e.server}{NAMESPACE_SEP}{e.tool_name}":
            by_server.setdefault(e.server, []).append(e.tool_name)
        else:
            loose.append(e.name)
    return by_server, loose


def _server_lines(entries: Sequence[CatalogueEntry]) -> list[str]:
    by_server, loose = _grouped(entries)
    lines = [f"{server} ({len(names)}): {', '.join(names)}" for server, names in by_server.items()]
    if loose:
        lines.append(f"other tools, full names ({len(loose)}): {', '.join(loose)}")
    return lines


def _directory_lines(entries: Sequence[CatalogueEntry]) -> list[tuple[str, int]]:
    """One `(line, tool count)` per server (and per group of tools without a server prefix)."""
    groups: dict[str, list[str]] = {}
    for e in entries:
        key = e.server if e.name == f"{e.server}{NAMESPACE_SEP}{e.tool_name}" else f"({e.server})"
        groups.setdefault(key, []).append(e.tool_name)
    lines = []
    for server, names in groups.items():
        shown = ", ".join(names[:_DIRECTORY_NAMES])
        more = ", …" if len(names) > _DIRECTORY_NAMES else ""
        lines.append((f"{server} ({len(names)} tools): {shown}{more}", len(names)))
    return lines


def _rest_line(servers: int, tools: int, search_tool: str) -> str:
    # Only reached when at least one server does not fit, so there is always a rest.
    return f"… and {servers} more servers with {tools} tools: `{search_tool}` searches them all."


def choose_exposure(
    catalogue_size: int,
    mode: Literal["auto", "direct", "deferred"] = "auto",
    threshold: int = 100,
) -> Exposure:
    """Direct exposure below `threshold` tools (in `auto` mode), deferred from it on."""
    if mode != "auto":
        return mode
    return "deferred" if catalogue_size >= threshold else "direct"


def loaded_status_line(activated: ActivatedToolSet, label: str = "MCP tools") -> str:
    """A short line naming the tools loaded so far (append it at the end of the context, never
    into the static prefix)."""
    names = activated.names()
    if not names:
        return f"Loaded {label}: none yet."
    return f"Loaded {label}: " + ", ".join(names) + "."
