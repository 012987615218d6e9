"""`HeronAcpAgent`: the Agent Client Protocol agent an editor runs as `heron acp`.

What maps to what (the full table is in docs/acp.md):

- `initialize`: capabilities — `loadSession`, images and embedded context in prompts, HTTP
  MCP servers;
  no authentication
  (heron runs as the editor's user, on its state directory);
- `session/new` (`cwd`, `mcpServers`): a new stored session (`CliSession`: SQLite, its
  writer lock, the execution audit) and an agent built for it, whose workspace is `cwd`
  (validated), with the editor's MCP servers (`heron.acp.mcp_servers`);
- `session/load`: the stored session of that id, locked and repaired (a turn a dead process
  left mid-call is closed), its history replayed as updates;
- `session/prompt`: one turn on the session's history; the blocks are the user's message and
  its media (`heron.acp.prompt`), and text, reasoning, tool calls and plans stream back as
  updates (`heron.acp.updates`);
- `session/request_permission`: an approval through the durable request store
  (`heron.acp.approver`);
- `session/cancel`: the turn's `CancelScope` — every call is answered, the history stays
  valid, the prompt ends `cancelled`.

One prompt runs per session at a time; several sessions may run side by side. Every update is
sent in order through one queue per session, and a prompt's response is sent only after its
updates. `serve_stdio` runs the agent on the editor's pipe (`heron.acp.stdio`).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import acp
from acp import RequestError, update_tool_call
from acp.helpers import SessionUpdate
from acp.schema import (
    AgentCapabilities,
    AuthenticateResponse,
    ClientCapabilities,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    McpCapabilities,
    NewSessionResponse,
    PermissionOption,
    PromptCapabilities,
    PromptResponse,
    RequestPermissionResponse,
    StopReason,
    ToolCallUpdate,
)

from heron._support.limits import InputLimits, input_limits
from heron._support.vocabulary import ACTIVE_STATUSES
from heron.acp.approver import EditorApprover
from heron.acp.mcp_servers import EditorServer, editor_servers
from heron.acp.prompt import Prompt, PromptBlock, user_prompt
from heron.acp.stdio import EditorPipe, protocol_streams
from heron.acp.updates import CallCard, TurnUpdates, replay
from heron.agent import Agent
from heron.errors import HeronError
from heron.humans.desk import RequestDesk
from heron.mcp.config import McpServerConfig
from heron.safety.redact import scrub_text
from heron.sessions.lock import SessionInUseError
from heron.sessions.repair import SessionRepairError
from heron.sessions.session import CliSession, new_session_name
from heron.tools.definition import ToolSpec
from heron.turn.approval import Approver
from heron.turn.cancel import CancelScope
from heron.turn.outcome import TurnOutcome

__all__ = ["AgentOpener", "HeronAcpAgent", "serve_stdio"]

AgentOpener = Callable[
    [Path, Approver, Mapping[str, McpServerConfig]], AbstractAsyncContextManager[Agent]
]
"""Builds the agent of one session: its workspace, its approver and the editor's MCP servers
in, the agent out, closed on exit (the command line hands in the configured agent)."""


class UpdateStream:
    """One session's updates, sent in order by one task; `flush` waits until all are sent."""

    def __init__(self, client: acp.Client, session_id: str) -> None:
        self._client = client
        self._session_id = session_id
        self._queue: asyncio.Queue[SessionUpdate] = asyncio.Queue()
        self._task = asyncio.ensure_future(self._run())
        self._failed = False

    def send(self, update: SessionUpdate) -> None:
        self._queue.put_nowait(update)

    async def flush(self) -> None:
        await self._queue.join()

    async def _run(self) -> None:
        while True:
            update = await self._queue.get()
            try:
                await self._client.session_update(session_id=self._session_id, update=update)
            except Exception as exc:  # the editor went away: the turn goes on, stored
                if not self._failed:
                    _log(f"session {self._session_id}: updates no longer reach the editor: {exc}")
                self._failed = True
            finally:
                self._queue.task_done()

    async def aclose(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


@dataclass(kw_only=True, slots=True)
class _Tools:
    """The tool specs of a session's agent, found once it is built."""

    agent: Agent | None = None

    def get(self, name: str) -> ToolSpec | None:
        if self.agent is None:
            return None
        tool = self.agent.registry.get(name)
        if tool is None and self.agent.activated is not None:
            tool = self.agent.activated.get(name)
        return None if tool is None else tool.spec


class AcpSession:
    """One editor session: the stored session, its agent, its updates and its approver."""

    def __init__(
        self, *, held: CliSession, workspace: Path, client: acp.Client, stack: AsyncExitStack
    ) -> None:
        self.held = held
        self.workspace = workspace
        self.client = client
        self.stack = stack
        self.updates = UpdateStream(client, held.name)
        self.tools = _Tools()
        self.view = TurnUpdates(self.updates.send, lookup=self.tools.get, workspace=workspace)
        self.cancel: CancelScope | None = None
        """The running prompt's scope; `None` between prompts."""
        self.agent: Agent | None = None
        self.approver: EditorApprover | None = None

    @property
    def id(self) -> str:
        return self.held.name

    # -- what the approver needs (`heron.acp.approver.Editor`) -----------------------------

    async def flush(self) -> None:
        await self.updates.flush()

    def note(self, call_id: str, text: str) -> None:
        self.updates.send(
            update_tool_call(call_id, content=[acp.tool_content(acp.text_block(text))])
        )

    async def request_permission(
        self, tool_call: ToolCallUpdate, options: list[PermissionOption], meta: dict[str, Any]
    ) -> RequestPermissionResponse:
        return await self.client.request_permission(
            session_id=self.id, tool_call=tool_call, options=options, heron=meta
        )

    def card(self, call_id: str, tool: str, arguments: Mapping[str, Any]) -> CallCard:
        return self.view.start(call_id, tool, arguments)

    # -- turns -----------------------------------------------------------------------------

    def replay(self) -> None:
        """Show the stored conversation again, on a fresh view of its calls."""
        self.view = TurnUpdates(self.updates.send, lookup=self.tools.get, workspace=self.workspace)
        replay(self.held.history, self.view)

    async def run_turn(self, prompt: Prompt, cancel: CancelScope) -> TurnOutcome:
        """Store the prompt, then run one turn on the session's history; each message is
        stored before the editor is shown it."""
        assert self.agent is not None
        return await self.held.run_turn(
            self.agent,
            prompt.text,
            media=prompt.media,
            sink=self.view.event,
            cancel=cancel,
            channel="acp",
            on_stored=self.view.messages,
        )


class HeronAcpAgent:
    """The ACP agent (see the module docstring). `open_agent` builds each session's agent;
    sessions are stored in `state_dir`; approvals go through `desk`, the editor's user answering
    as `acp:<name>`. With `workspace_root`, an editor's working directory must lie inside it.
    `configured_servers`: the MCP servers of the configuration, which the editor's do not
    replace."""

    def __init__(
        self,
        *,
        open_agent: AgentOpener,
        state_dir: Path,
        desk: RequestDesk,
        name: str,
        workspace_root: Path | None = None,
        configured_servers: Collection[str] = (),
        poll_interval_s: float = 0.25,
        version: str = "0",
    ) -> None:
        self._open_agent = open_agent
        self._state_dir = state_dir
        self._desk = desk
        self._name = name
        self._root = workspace_root
        self._configured_servers = frozenset(configured_servers)
        self._poll_interval_s = poll_interval_s
        self._version = version
        self._client: acp.Client | None = None
        self._client_name = "an ACP client"
        self._sessions: dict[str, AcpSession] = {}

    def on_connect(self, conn: acp.Client) -> None:
        self._client = conn

    # -- connection ------------------------------------------------------------------------

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        if client_info is not None:
            self._client_name = f"{client_info.title or client_info.name} {client_info.version}"
        return InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(
                    image=True, audio=False, embedded_context=True
                ),
                mcp_capabilities=McpCapabilities(http=True, sse=False),
            ),
            auth_methods=[],
            agent_info=Implementation(name="heron", title="heron", version=self._version),
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> AuthenticateResponse | None:
        # heron offers no authentication method: it runs as the editor's user.
        raise RequestError.invalid_params({"message": f"unknown authentication method {method_id}"})

    # -- sessions --------------------------------------------------------------------------

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[EditorServer] | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        workspace = self._workspace(cwd)
        servers = self._servers(mcp_servers, workspace)
        session = await self._open(new_session_name(), workspace, servers, must_exist=False)
        return NewSessionResponse(session_id=session.id)

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[EditorServer] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse | None:
        workspace = self._workspace(cwd)
        session = self._sessions.get(session_id)
        if session is not None and session.cancel is not None:
            raise RequestError.invalid_request(
                {"message": f"session {session_id} is running a prompt in this process"}
            )
        if session is not None and session.workspace != workspace:
            await self._close(session)
            session = None
        if session is None:
            servers = self._servers(mcp_servers, workspace)
            session = await self._open(session_id, workspace, servers, must_exist=True)
        session.replay()
        await session.flush()
        return LoadSessionResponse()

    async def _open(
        self,
        name: str,
        workspace: Path,
        servers: Mapping[str, McpServerConfig],
        *,
        must_exist: bool,
    ) -> AcpSession:
        assert self._client is not None, "initialize first"
        try:
            held = CliSession.open(
                self._state_dir, name, operator=self._name, must_exist=must_exist
            )
        except SessionInUseError as exc:
            raise RequestError.invalid_request({"message": str(exc)}) from exc
        except ValueError as exc:  # an unknown session, or a bad name
            raise RequestError.invalid_params({"message": str(exc)}) from exc
        except SessionRepairError as exc:
            raise RequestError.internal_error({"message": str(exc)}) from exc
        stack = AsyncExitStack()
        stack.callback(held.close)
        try:
            session = AcpSession(held=held, workspace=workspace, client=self._client, stack=stack)
            stack.push_async_callback(session.updates.aclose)
            approver = EditorApprover(
                self._desk,
                session,
                session=name,
                name=self._name,
                client=lambda: self._client_name,
                poll_interval_s=self._poll_interval_s,
            )
            stack.push_async_callback(approver.aclose)
            agent = await stack.enter_async_context(self._open_agent(workspace, approver, servers))
            held.attach(agent)
        except HeronError as exc:
            await stack.aclose()
            raise RequestError.internal_error({"message": str(exc)}) from exc
        except BaseException:
            await stack.aclose()
            raise
        session.agent, session.approver, session.tools.agent = agent, approver, agent
        self._sessions[name] = session
        if held.repaired:
            self._repaired(held)
        return session

    def _repaired(self, held: CliSession) -> None:
        """The last process left this session mid-call: its calls are closed as interrupted,
        and the approvals they waited on end too (nobody can run those calls any more)."""
        calls = {r.call_id for r in held.repaired}
        names = ", ".join(f"{r.name} ({r.call_id})" for r in held.repaired)
        _log(f"session {held.name} ended mid-turn last time; closed as interrupted: {names}")
        for request in self._desk.store.list(statuses=ACTIVE_STATUSES, session=held.name):
            if request.gates_call or not calls & set(request.call_ids):
                continue
            self._desk.cancel(request.id, "the process that asked ended; the call did not run")

    def _workspace(self, cwd: str) -> Path:
        """The editor's working directory as the session's workspace, or `invalid_params`."""
        if "\0" in cwd:
            raise _invalid("cwd must not contain a NUL character")
        path = Path(cwd)
        if not path.is_absolute():
            raise _invalid(f"cwd must be an absolute path, not {cwd!r}")
        try:
            resolved = path.resolve()
            is_dir = resolved.is_dir()
        except OSError as exc:  # a name too long, a loop of links
            raise _invalid(f"cwd {cwd[:200]} cannot be opened: {exc.strerror}") from None
        if not is_dir:
            raise _invalid(f"cwd {cwd} is not a directory")
        if resolved == Path(resolved.anchor):
            raise _invalid("the file system root cannot be a workspace; open a project folder")
        if self._root is not None and not resolved.is_relative_to(self._root):
            raise _invalid(f"cwd {resolved} is outside heron's configured workspace {self._root}")
        state = self._state_dir.expanduser().resolve()
        if state.is_relative_to(resolved):
            raise _invalid(
                f"the workspace {resolved} would contain heron's state directory {state} "
                "(sessions, keys); open a project folder instead"
            )
        return resolved

    def _servers(
        self, servers: list[EditorServer] | None, workspace: Path
    ) -> dict[str, McpServerConfig]:
        return editor_servers(
            servers, workspace=workspace, configured=self._configured_servers, log=_log
        )

    # -- prompts ---------------------------------------------------------------------------

    async def prompt(
        self, prompt: list[PromptBlock], session_id: str, **kwargs: Any
    ) -> PromptResponse:
        session = self._session(session_id)
        if session.cancel is not None:
            raise RequestError.invalid_request(
                {"message": "a prompt is already running in this session"}
            )
        try:
            message = user_prompt(prompt, workspace=session.workspace, state_dir=self._state_dir)
        except ValueError as exc:  # media that is not valid base64, …
            raise _invalid(str(exc)) from exc
        if not message.text.strip() and not message.media:
            raise _invalid("the prompt is empty")
        approver = session.approver
        assert approver is not None
        scope = session.cancel = approver.cancel = CancelScope()
        try:
            outcome = await session.run_turn(message, scope)
        except Exception as exc:  # a store failure, …: said scrubbed, not as the SDK would
            failure = scrub_text(f"{type(exc).__name__}: {exc}")
            _log(f"session {session_id}: the turn failed: {failure}")
            raise RequestError.internal_error({"message": failure}) from exc
        finally:
            session.cancel = approver.cancel = None
            await session.flush()  # every update of the turn before its response
        return PromptResponse(stop_reason=_stop_reason(outcome))

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self._sessions.get(session_id)
        if session is not None and session.cancel is not None:
            session.cancel.cancel("cancelled in the editor")

    def _session(self, session_id: str) -> AcpSession:
        session = self._sessions.get(session_id)
        if session is None:
            raise _invalid(f"no session {session_id} in this process; load it first")
        return session

    # -- the end ---------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close every session (agents, stores, locks), the newest first."""
        for session in reversed(list(self._sessions.values())):
            await self._close(session)

    async def _close(self, session: AcpSession) -> None:
        self._sessions.pop(session.id, None)
        if session.cancel is not None:
            session.cancel.cancel("the editor closed the connection")
        await session.stack.aclose()


def _stop_reason(outcome: TurnOutcome) -> StopReason:
    if outcome.status == "cancelled":
        return "cancelled"
    if outcome.reason in ("iteration_cap", "budget_exhausted"):
        return "max_turn_requests"  # with a summary, or an error under cap_behavior = "error"
    if outcome.status == "error":
        raise RequestError.internal_error(
            {"message": scrub_text(outcome.error or "the turn failed"), "reason": outcome.reason}
        )
    return "end_turn"


def _invalid(message: str) -> RequestError:
    return RequestError.invalid_params({"message": message})


def _log(text: str) -> None:
    sys.stderr.write(f"heron acp: {text}\n")
    sys.stderr.flush()


# -- standard input and output -------------------------------------------------------------


async def serve_stdio(agent: HeronAcpAgent, *, limits: InputLimits | None = None) -> None:
    """Run `agent` until the editor closes its end (end of input) or stops the process
    (SIGTERM, SIGINT), then close every session: a running turn is cancelled as by
    `session/cancel`, so its calls are answered and stored. `limits` bound each message
    (default: the ones in force)."""
    limits = limits or input_limits()
    reader, writer = await protocol_streams(limits.max_bytes)
    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()
    signals = (signal.SIGTERM, signal.SIGINT)
    for signum in signals:
        loop.add_signal_handler(signum, stopped.set)
    pipe = EditorPipe(reader, writer, limits=limits)
    serving = asyncio.ensure_future(acp.run_agent(cast(acp.Agent, agent), pipe))
    stopping = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not serving.done():
            _log("stopped by a signal; closing every session")
            serving.cancel()  # the connection closes and cancels its running prompts
            with contextlib.suppress(asyncio.CancelledError):
                await serving
        else:
            serving.result()  # a failure of the connection itself is not swallowed
    finally:
        stopping.cancel()
        for signum in signals:
            loop.remove_signal_handler(signum)
        await agent.aclose()
