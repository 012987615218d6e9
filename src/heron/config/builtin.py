"""heron's built-in tool sets, assembled from configuration.

Six sets, each a bundle of the agent's tool registry:

- `perception`: look without changing anything — workspace files, the web, the knowledge base,
  stored artifacts and office documents.
- `execution`: change things — file writes, downloads, `shell`, `run_python`, `send_mail` (only
  with a `[tools.builtin.mail]` section).
- `connectors`: public data sources, spreadsheets and the browser; Notion pages, calendars,
  GitHub and webhooks when their sections are configured.
- `events`: the event-trigger tools — detached background jobs (`start_job`, `job_status`, …),
  timers, shell monitors and subscriptions. A `TriggerRuntime` on the state directory's bus
  backs them: timers persist and fire, and jobs and monitors report, into the session
  `default`, where `heron serve` consumes the events.
- `planning`: `update_plan`, a checklist the model keeps and the user watches (a `plan` event
  after each update). It touches nothing, so it needs no workspace access or sandbox.
- `collaboration`: reaching people — `send_message`, `send_card`, `send_notification` over the
  outbox of `[identity]`, `[user]`, `[people.*]` and `[channels]` (`heron.collaboration`);
  under `heron mcp serve collaboration` also the seed's names (`send_email_notification`,
  `send_im_notification`, `send_slack_message`).

`build_builtin` also returns what the agent needs next to these tools: an `ArtifactSpill`
(oversize results become artifacts that `read_artifact` pages through) and a
`WorkspaceResultCache` for read-only results. Factories are imported inside `build_builtin`, so
reading the configuration stays cheap.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from heron.config.builtin_sections import (
    CalendarEntry,
    GitHubSection,
    KnowledgeSection,
    MailSection,
    PagesSection,
    SearchSection,
    ShellSection,
    WebhookSection,
    WebSection,
    _Section,
)
from heron.errors import ConfigurationError
from heron.sandbox.base import NetworkMode, SandboxUnavailable
from heron.tools.definition import Tool

if TYPE_CHECKING:
    from heron.artifacts.store import ArtifactSpill
    from heron.collaboration.setup import MessagingConfig
    from heron.humans.config import ApprovalsConfig
    from heron.sandbox.base import Sandbox
    from heron.toolsets.cache import WorkspaceResultCache

BuiltinSet = Literal["perception", "execution", "connectors", "events", "planning", "collaboration"]
SETS: tuple[BuiltinSet, ...] = (
    "perception",
    "execution",
    "connectors",
    "events",
    "planning",
    "collaboration",
)


class BuiltinError(ConfigurationError, ValueError):
    """The built-in tool sets cannot be built as configured; nothing is left open."""


class BuiltinConfig(_Section):
    """`[tools.builtin]`: which built-in tool sets an agent gets and how they are confined."""

    sets: list[BuiltinSet] = Field(default_factory=list)
    """Empty (the default): no built-in tools."""
    workspace: str | None = None
    """The root every file tool, command and download is confined to; default: the current
    directory."""
    sandbox: Literal["process", "bwrap"] = "process"
    """Where `shell`, `run_python` and jobs run: a limited process, or bubblewrap namespaces."""
    sandbox_spares: bool = True
    """`bwrap` only: each command line's next sandbox is built after a call, so the next call
    finds its namespaces and mounts ready (a spare, used by one command; `heron.sandbox.spare`).
    An idle spare is three processes, 12 MiB resident (6 MiB proportional: most is the
    interpreter's, shared). False: every call builds its own."""
    confine: bool = True
    """False: the `process` level only limits commands (no namespaces, dedicated user or
    Landlock), for hosts where that confinement breaks the commands you need. `heron doctor`
    then reports nothing contained but the limits, and unattended low-risk shell commands count
    as medium. Not for `bwrap`."""
    network: bool = True
    """False: no web tools, and commands run without network (needs `sandbox = "bwrap"`)."""
    command_network: dict[Literal["execution", "events"], NetworkMode] = Field(default_factory=dict)
    """The network commands of a set get (`none`, `loopback` or `host`), e.g.
    `command_network = {execution = "host"}`; unset: the sandbox level's default (`bwrap`:
    none, `process`: host). Every result's sandbox line names the network the call had."""
    web: WebSection = Field(default_factory=WebSection)
    search: SearchSection = Field(default_factory=SearchSection)
    knowledge: KnowledgeSection = Field(default_factory=KnowledgeSection)
    mail: MailSection | None = None
    pages: PagesSection | None = None
    calendar: dict[str, CalendarEntry] = Field(default_factory=dict)
    """Calendars by name; any adds the calendar tools to `connectors`."""
    github: GitHubSection | None = None
    webhooks: WebhookSection | None = None

    def workspace_path(self) -> Path:
        """The workspace root, resolved (the current directory when unset)."""
        return Path(self.workspace).expanduser().resolve() if self.workspace else Path.cwd()


Closer = Callable[[], Awaitable[None]]


def _closing(close: Callable[[], None]) -> Closer:
    async def closer() -> None:
        close()

    return closer


@dataclass(kw_only=True)
class Builtin:
    """Built tool sets: `tools` by set name, plus the agent's spill and cache. `aclose()` stops
    what the sets started (the browser, the job watcher, open databases)."""

    workspace: Path
    tools: dict[BuiltinSet, list[Tool]]
    spill: ArtifactSpill
    cache: WorkspaceResultCache
    _closers: list[Closer] = field(default_factory=list)
    _section: str | None = field(default=None, init=False, repr=False)

    def all_tools(self) -> list[Tool]:
        """Every tool of every built set, in set order."""
        return [t for tools in self.tools.values() for t in tools]

    def catalogue_section(self) -> str:
        """The prompt section of the read-only `perception` / `connectors` tools by kind (search,
        read, parse, query; empty without them). Rendered once: each wake builds an agent anew."""
        if self._section is None:
            from heron.connectors.public_data import perception_catalogue_section

            sets: tuple[BuiltinSet, ...] = ("perception", "connectors")
            tools = [t for s in sets for t in self.tools.get(s, []) if t.spec.annotations.read_only]
            self._section = perception_catalogue_section(tools)
        return self._section

    async def aclose(self) -> None:
        """Close in reverse order of opening; safe to call twice."""
        closers, self._closers = self._closers, []
        for close in reversed(closers):
            await close()


async def build_builtin(
    cfg: BuiltinConfig,
    *,
    state_dir: Path,
    store_url: str | None = None,
    shell: ShellSection | None = None,
    messaging: MessagingConfig | None = None,
    aliases: bool = False,
    approvals: ApprovalsConfig | None = None,
) -> Builtin:
    """Build the sets `cfg.sets` names (`store_url`: a shared PostgreSQL store, which holds
    the artifacts, the messages and the decision keys; `shell`: the `[tools.shell]` section;
    `messaging`: whom the `collaboration` set writes to and how, `aliases`: with the seed's
    names, and with `approvals` the human-request tools, which wait for the answer). Raises
    `BuiltinError` for an impossible configuration (no such workspace, `network = false` with
    the `process` sandbox, a bad mail section)."""
    from heron.artifacts.sqlite_store import SqliteArtifactCatalog
    from heron.artifacts.store import ArtifactSpill, ArtifactStore
    from heron.safety.workspace import Workspace, WorkspaceError
    from heron.toolsets.cache import WorkspaceResultCache

    root = cfg.workspace_path()
    try:
        ws = Workspace(root)
    except WorkspaceError as exc:
        raise BuiltinError(f"workspace: {exc}") from exc
    sandbox: Sandbox | None = None
    if {"execution", "events"} & set(cfg.sets):
        try:
            sandbox = _sandbox(cfg, ws.root)
        except SandboxUnavailable as exc:
            raise BuiltinError(f"sandbox: {exc}") from exc
    closers: list[Closer] = []
    if sandbox is not None and (close_sandbox := getattr(sandbox, "aclose", None)) is not None:
        closers.append(close_sandbox)  # a bwrap sandbox's spares
    if store_url is not None:  # every worker reads every artifact, page by page
        from heron._support.postgres import open_pool
        from heron.artifacts.postgres_contents import PostgresArtifactContents
        from heron.artifacts.postgres_store import PostgresArtifactCatalog

        pool = open_pool(store_url, max_size=4)
        closers.append(_closing(pool.close))
        contents = PostgresArtifactContents(pool)
        store = ArtifactStore(PostgresArtifactCatalog(pool), contents)
    else:
        store = ArtifactStore(SqliteArtifactCatalog(state_dir), state_dir / "artifacts")
    built = Builtin(
        workspace=ws.root,
        tools={},
        spill=ArtifactSpill(store),
        cache=WorkspaceResultCache(),
        _closers=closers,
    )
    try:
        for name in dict.fromkeys(cfg.sets):
            if name == "perception":
                built.tools[name] = _perception(cfg, ws, store, state_dir)
            elif name == "execution":
                assert sandbox is not None
                confined = _networked(sandbox, cfg, "execution")
                built.tools[name] = _execution(
                    cfg, ws, confined, state_dir, built, shell or ShellSection()
                )
            elif name == "connectors":
                built.tools[name] = _connectors(cfg, ws, built, state_dir)
            elif name == "planning":
                from heron.toolsets.plan import plan_tools

                built.tools[name] = plan_tools()
            elif name == "collaboration":
                built.tools[name] = _collaboration(
                    messaging, ws, state_dir, store_url, built, aliases, approvals
                )
            else:
                assert sandbox is not None
                confined = _networked(sandbox, cfg, "events")
                built.tools[name] = await _events(ws, confined, state_dir, built)
    except BaseException:
        await built.aclose()
        raise
    return built


def _collaboration(
    messaging: MessagingConfig | None,
    ws: Any,
    state_dir: Path,
    store_url: str | None,
    built: Builtin,
    aliases: bool,
    approvals: ApprovalsConfig | None,
) -> list[Tool]:
    import sys

    from heron.collaboration.asking import DeskRequests, asking_tools
    from heron.collaboration.setup import MessagingConfig, open_outbox
    from heron.collaboration.tools import alias_tools, messaging_tools
    from heron.humans.console import ConsoleChannel
    from heron.humans.desk import RequestDesk
    from heron.humans.signing import DecisionSigner
    from heron.humans.sqlite_store import SqliteRequestStore
    from heron.turn.signing_keys import key_store

    # The console channel is the store here: `heron messages` and `heron chat` show it.
    outbox, store = open_outbox(
        messaging or MessagingConfig(), state_dir=state_dir, store_url=store_url
    )
    requests = SqliteRequestStore.open_dir(state_dir) if approvals is not None else None

    async def close() -> None:
        store.close()
        if requests is not None:
            requests.close()

    built._closers.append(close)
    shared = outbox.identity.workspace
    workspace = shared if shared is not None and shared.is_dir() else ws.root
    tools = messaging_tools(outbox, workspace=workspace)
    if aliases:
        tools += alias_tools(outbox)
    if requests is not None:
        # An MCP client gets no event later: the call waits, answered with `heron approvals`.
        desk = RequestDesk(
            requests,
            signer=DecisionSigner(key_store("decision", state_dir=state_dir, store_url=store_url)),
            channels=[ConsoleChannel(sys.stderr)],
            config=approvals,
        )
        wait_s = approvals.questions.max_timeout_s if approvals is not None else 3600.0
        tools += asking_tools(DeskRequests(desk, wait_s=wait_s), session="mcp/collaboration")
    return tools


def _sandbox(cfg: BuiltinConfig, root: Path) -> Sandbox:
    from heron.sandbox import ProcessSandbox, make_sandbox

    if cfg.confine:
        return make_sandbox(
            cfg.sandbox, workspace=root, network=cfg.network, spares=cfg.sandbox_spares
        )
    if cfg.sandbox != "process":
        raise SandboxUnavailable("confine = false applies to the process level only")
    if not cfg.network:
        raise SandboxUnavailable("network = false needs a confined sandbox (the bwrap level)")
    return ProcessSandbox(workspace=root, confine=False)


def _policy(cfg: BuiltinConfig) -> Any:
    from heron.safety.url_policy import UrlPolicy

    return UrlPolicy(allow_hosts=tuple(cfg.web.allow_hosts), allow_private=cfg.web.allow_private)


def _perception(cfg: BuiltinConfig, ws: Any, store: Any, state_dir: Path) -> list[Tool]:
    from heron.artifacts.tools import artifact_tools
    from heron.toolsets.documents import document_tools
    from heron.toolsets.files import file_tools
    from heron.toolsets.knowledge import KnowledgeBase
    from heron.toolsets.search import SearxngBackend, knowledge_tools, search_tools
    from heron.toolsets.web import WebLimits, web_tools

    tools = [t for t in file_tools(ws) if t.spec.annotations.read_only]
    if cfg.network:
        web = web_tools(policy=_policy(cfg), workspace_root=ws.root, limits=WebLimits())
        tools += [t for t in web if t.spec.name == "fetch_url"]
        url = cfg.search.searxng_url
        tools += search_tools(backend=SearxngBackend(url) if url else None)
    if cfg.knowledge.folder:
        folder = Path(cfg.knowledge.folder).expanduser()
        if not folder.is_absolute():
            folder = ws.root / folder
        if not folder.is_dir():
            raise BuiltinError(f"knowledge.folder: {folder} is no directory")
        tools += knowledge_tools(KnowledgeBase(folder, state_dir))
    return [*tools, *artifact_tools(store), *document_tools(ws, ocr=_ocr())]


def _ocr() -> Any:
    """Debian's tesseract when installed: scanned PDF pages and images are read, not skipped
    (read_document says so when OCR is missing)."""
    import shutil

    if shutil.which("tesseract") is None:
        return None
    from heron.toolsets.ocr import Tesseract

    return Tesseract()


def _execution(
    cfg: BuiltinConfig,
    ws: Any,
    sandbox: Sandbox,
    state_dir: Path,
    built: Builtin,
    shell: ShellSection,
) -> list[Tool]:
    from heron.safety.command_policy import CommandPolicy
    from heron.toolsets.files import file_tools
    from heron.toolsets.python_exec import run_python_tool
    from heron.toolsets.shell import shell_tool
    from heron.toolsets.sqlite_shell_history import SqliteShellHistory
    from heron.toolsets.web import WebLimits, web_tools

    tools = [t for t in file_tools(ws) if not t.spec.annotations.read_only]
    if cfg.network:
        web = web_tools(policy=_policy(cfg), workspace_root=ws.root, limits=WebLimits())
        tools += [t for t in web if t.spec.name == "download_file"]
    history = SqliteShellHistory.open(state_dir)

    async def close_history() -> None:
        history.close()

    built._closers.append(close_history)
    policy = CommandPolicy(workspace=ws.root)
    tools.append(
        shell_tool(
            sandbox=sandbox,
            policy=policy,
            workspace=ws.root,
            history=history,
            unattended_risk=shell.unattended_risk,
        )
    )
    # run_python scripts call the agent's other tools; name the ones known so far.
    names = [t.spec.name for t in (*built.all_tools(), *tools)]
    tools.append(run_python_tool(sandbox=sandbox, workspace=ws.root, tool_names=names))
    if cfg.mail is not None:
        tools += _mail(cfg.mail, state_dir)
    return tools


def _mail(section: MailSection, state_dir: Path) -> list[Tool]:
    from heron.connectors.mail.send import MailConfig, mail_tools
    from heron.safety.idempotency import Confirmations, IdempotencyStore
    from heron.safety.sqlite_idempotency import SqliteIdempotencyLedger

    try:
        config = MailConfig(**section.model_dump())
    except ValueError as exc:
        raise BuiltinError(f"mail: {exc}") from exc
    return mail_tools(config, Confirmations(IdempotencyStore(SqliteIdempotencyLedger(state_dir))))


def _connectors(cfg: BuiltinConfig, ws: Any, built: Builtin, state_dir: Path) -> list[Tool]:
    from heron.safety.idempotency import Confirmations, IdempotencyStore
    from heron.safety.sqlite_idempotency import SqliteIdempotencyLedger
    from heron.toolsets.spreadsheets import spreadsheet_tools

    tools = spreadsheet_tools(ws.root)
    # Irreversible actions (invitations, pull requests, webhooks) go through preflight → confirm.
    store = IdempotencyStore(SqliteIdempotencyLedger(state_dir))
    if cfg.calendar:
        tools += _calendar(cfg, ws, Confirmations(store))
    ocr = _ocr()
    if ocr is not None:
        from heron.toolsets.ocr import ocr_tools

        tools += ocr_tools(ws, ocr)
    if cfg.network:
        from heron.connectors.public_data import public_data_tools
        from heron.toolsets.browser import browser_tools

        policy = _policy(cfg)
        browser = browser_tools(policy=policy, workspace=ws)
        built._closers.append(browser.close)
        tools = [*public_data_tools(policy=policy, workspace_root=ws.root), *tools, *browser]
        if cfg.pages is not None:
            tools += _pages(cfg.pages, policy)
        if cfg.github is not None:
            tools += _github(cfg.github, policy, Confirmations(store))
        if cfg.webhooks is not None:
            tools += _webhooks(cfg.webhooks, policy, store)
    return tools


def _calendar(cfg: BuiltinConfig, ws: Any, confirmations: Any) -> list[Tool]:
    from heron.connectors.calendar import (
        CalDavCalendar,
        CalendarConfig,
        IcsCalendar,
        calendar_tools,
    )

    calendars: dict[str, IcsCalendar | CalDavCalendar] = {}
    for name, entry in cfg.calendar.items():
        if (entry.path is None) == (entry.url is None):
            raise BuiltinError(f"calendar.{name}: give exactly one of path (.ics) or url (CalDAV)")
        if entry.path is not None:
            path = Path(entry.path).expanduser()
            calendars[name] = IcsCalendar(
                path=path if path.is_absolute() else ws.root / path, access=entry.access
            )
        elif not cfg.network:
            raise BuiltinError(f"calendar.{name}: a CalDAV calendar needs network = true")
        else:
            fields = entry.model_dump(exclude={"path"})
            calendars[name] = CalDavCalendar(**fields)
    return calendar_tools(CalendarConfig(calendars=calendars, policy=_policy(cfg)), confirmations)


def _github(section: GitHubSection, policy: Any, confirmations: Any) -> list[Tool]:
    from heron.connectors.github import GitHubConfig, github_tools

    bad = [r for r in section.repos if r.count("/") != 1 or not all(r.split("/"))]
    if bad:
        raise BuiltinError(f"github.repos: {bad[0]!r} is not owner/name")
    fields = section.model_dump() | {"repos": tuple(section.repos)}
    return github_tools(GitHubConfig(**fields, policy=policy), confirmations)


def _webhooks(section: WebhookSection, policy: Any, store: Any) -> list[Tool]:
    from heron.connectors.webhooks import WebhookConfig, webhook_tools

    try:
        config = WebhookConfig(
            secret_env=section.secret_env, allowed_urls=tuple(section.allowed_urls), policy=policy
        )
    except ValueError as exc:
        raise BuiltinError(f"webhooks: {exc}") from exc
    return webhook_tools(config, store)


def _pages(section: PagesSection, policy: Any) -> list[Tool]:
    from heron.connectors.pages import PagesConfig, pages_tools

    fields = section.model_dump()
    fields |= {k: tuple(fields[k]) for k in ("allowed_pages", "allowed_parents")}
    try:
        config = PagesConfig(**fields)
    except ValueError as exc:
        raise BuiltinError(f"pages: {exc}") from exc
    return pages_tools(config, policy=policy)


def _networked(
    sandbox: Sandbox, cfg: BuiltinConfig, name: Literal["execution", "events"]
) -> Sandbox:
    mode = cfg.command_network.get(name)
    if mode is None:
        return sandbox
    try:
        return sandbox.with_network(mode)
    except (SandboxUnavailable, ValueError) as exc:
        raise BuiltinError(f"command_network.{name}: {exc}") from exc


async def _events(ws: Any, sandbox: Sandbox, state_dir: Path, built: Builtin) -> list[Tool]:
    from heron.always_on.bus.sqlite_store import SqliteBusStore
    from heron.always_on.triggers.runtime import TriggerRuntime
    from heron.always_on.triggers.sqlite_store import open_trigger_stores
    from heron.safety.command_policy import CommandPolicy

    bus = SqliteBusStore.open(state_dir)
    # The default session of `heron serve`: what fires here is answered by its agent.
    runtime = TriggerRuntime(
        state_dir=state_dir,
        stores=open_trigger_stores(state_dir),
        bus=bus,
        workspace=ws.root,
        sandbox=sandbox,
        policy=CommandPolicy(workspace=ws.root),
    )

    async def close() -> None:
        await runtime.aclose()
        bus.close()

    built._closers.append(close)
    await runtime.start()
    return runtime.tools
