"""`heron chat`: an interactive conversation in the terminal, stored as a session.

The prompt is prompt_toolkit's; while a step runs the prompt is gone and the turn renders like
`heron run` (streamed text, live tool cards from `heron.cli.render`). An approval question is
a prompt of its own, asked only while no input prompt is open, so the two never compete for
the keyboard.

Keys:
- Enter sends the message. Esc then Enter (or Alt-Enter) starts a new line; so does Enter on a
  line that ends in a backslash (the backslash is dropped).
- Up and Down walk the input history, kept in `<state dir>/chat_history` (owner-only).
- While a step runs, a typed line is queued and the model reads it at the next safe point;
  the interrupt word (`--interrupt-word`, default `stop`) on a line of its own stops the step.
- Ctrl-C while a step runs cancels it: running tools end as interrupted and the history stays
  valid. A second Ctrl-C during the same step exits at once, after closing the open tool calls
  in the stored history. At the prompt, Ctrl-C clears the line; twice in a row it leaves, as
  do Ctrl-D and `/quit`.

Commands: `/help`, `/tools`, `/session`, `/model [PROVIDER:MODEL]`, `/cost`, `/quit`, and the
requests to a person that wait on this state directory (`heron.cli.chat_requests`):
`/approvals`, `/approve ID [REASON]`, `/deny ID [REASON]`.

Input goes through the durable event bus (`heron.always_on.bus`), like `heron serve`'s.
Every message is written to the session before it is shown; `heron chat --session NAME`
resumes a session (repairing a turn the last process left mid-call). Executed tool calls go
to the execution audit trail with channel `chat`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from heron.cli import common
from heron.cli.chat_terminal import ChatApprover, LineReader, input_bindings, input_history
from heron.cli.common import EXIT_CANCELLED, EXIT_OK, UsageError
from heron.collaboration.identity import AgentIdentity

# prompt_toolkit, rich and the engine load only when a chat starts: `heron --help` builds
# this module's parser.
if TYPE_CHECKING:
    from prompt_toolkit import PromptSession

    from heron.agent import Agent
    from heron.always_on.bus.model import BusEvent, EventKind
    from heron.cli.chat_requests import PendingRequests
    from heron.cli.render import PrettyRenderer
    from heron.collaboration.postgres_store import PostgresMessageStore
    from heron.collaboration.sqlite_store import SqliteMessageStore
    from heron.messages import Message
    from heron.models.metered import MeteredModel, ModelCall
    from heron.sessions.session import CliSession
    from heron.turn.context import TurnState

PROMPT = "you> "
HELP = """\
  /tools            the tools this agent can call
  /session          the session this chat is stored in
  /model [P:MODEL]  show the model, or switch to another one
  /cost             tokens used per model call so far
  /quit             leave (also Ctrl-D, or Ctrl-C twice at the prompt)
  Enter sends; Esc Enter, or a line ending in \\, starts a new line.
  Ctrl-C cancels the running step; a second Ctrl-C exits."""


def cost_report(calls: list[ModelCall]) -> str:
    """The `/cost` text: one line per model call, then totals."""
    if not calls:
        return "no model calls yet"
    reported = [c for c in calls if c.usage is not None]
    lines = [f"{len(calls)} model call(s); usage reported for {len(reported)}"]
    if not reported:
        lines.append("  this model reports no token usage (scripted models never do)")
        return "\n".join(lines)
    lines.append(
        f"  {'#':>3}  {'turn':12}  {'iter':>4}  {'input':>8}  {'output':>8}  {'cached':>8}"
    )
    for number, call in enumerate(calls, start=1):
        u = call.usage
        if u is None:
            lines.append(f"  {number:>3}  {call.turn_id:12}  {call.iteration:>4}  (not reported)")
            continue
        lines.append(
            f"  {number:>3}  {call.turn_id:12}  {call.iteration:>4}  {u.input_tokens:>8}  "
            f"{u.output_tokens:>8}  {u.cached_tokens:>8}"
        )
    total_in = sum(c.usage.input_tokens for c in reported if c.usage)
    total_out = sum(c.usage.output_tokens for c in reported if c.usage)
    total_cached = sum(c.usage.cached_tokens for c in reported if c.usage)
    lines.append(f"  total: input {total_in}, output {total_out}, cached {total_cached}")
    return "\n".join(lines)


def _last_prompt(history: list[Message]) -> str | None:
    from heron.messages import UserMessage

    for message in reversed(history):
        if isinstance(message, UserMessage):
            return message.content
    return None


class ChatRepl:
    """The read-eval-print loop over one agent and one session."""

    def __init__(
        self,
        *,
        agent: Agent,
        session: CliSession,
        renderer: PrettyRenderer,
        approver: ChatApprover,
        meter: MeteredModel,
        state_dir: Path,
        base_url: str | None,
        interrupt_word: str = "stop",
        identity: AgentIdentity | None = None,
        requests: PendingRequests | None = None,
        store_url: str | None = None,
    ) -> None:
        from prompt_toolkit import PromptSession

        from heron.always_on.bus.loop import EventDrivenAgent
        from heron.always_on.bus.sqlite_store import SqliteBusStore
        from heron.collaboration.sqlite_store import SqliteMessageStore

        self.agent = agent
        self.session = session
        self.renderer = renderer
        self.approver = approver
        self.meter = meter
        self.base_url = base_url
        self.provider = meter.inner.name.partition(":")[0]
        self.prompt: PromptSession[str] = PromptSession(
            multiline=True,
            key_bindings=input_bindings(),
            history=input_history(state_dir),
            prompt_continuation="...  ",
        )
        self.interrupt_word = interrupt_word
        self.eda = EventDrivenAgent(
            agent,
            SqliteBusStore(session.store),
            session.store,
            session=session.name,
            sink=session.sink(renderer),
            prepare=self._prepare,
        )
        self.reader = LineReader(self._typed)
        approver.after_prompt = self.reader.start
        self._publishing: set[asyncio.Task[bool]] = set()
        self._ctrl_c = False
        # The console channel, inline: messages the agent sent (here or from `heron serve`),
        # in the store its outbox writes to (`[store] url`: the shared one).
        self.messages: SqliteMessageStore | PostgresMessageStore
        if store_url is not None:
            from heron.collaboration.postgres_store import PostgresMessageStore

            self.messages = PostgresMessageStore.open(store_url)
        else:
            self.messages = SqliteMessageStore.open(state_dir)
        self.identity = identity or AgentIdentity()
        self.user = "user"
        self.requests = requests

    async def run(self) -> int:
        try:
            return await self._loop()
        finally:
            await self.eda.aclose()
            self._reload()
            self.messages.close()

    async def _loop(self) -> int:
        self._banner()
        interrupted = False
        while True:
            try:
                text = await self.prompt.prompt_async(PROMPT)
            except KeyboardInterrupt:
                if interrupted:
                    return EXIT_OK
                interrupted = True
                self._say("(Ctrl-C again, Ctrl-D or /quit to leave)")
                continue
            except EOFError:
                return EXIT_OK
            interrupted = False
            if not text.strip():
                continue
            if text.strip().startswith("/"):
                if self._command(text.strip()):
                    return EXIT_OK
                continue
            await self._step(text)

    async def _step(self, text: str) -> None:
        loop = asyncio.get_running_loop()
        self._ctrl_c = False
        done = len(self.eda.outcomes)

        def on_sigint() -> None:
            if self._ctrl_c:
                self.renderer.close()
                self._abandon()
                common.announce_session(self.session, always=True)
                os._exit(EXIT_CANCELLED)
            self._ctrl_c = True
            self.eda.interrupt("interrupted by the operator (Ctrl-C)")

        loop.add_signal_handler(signal.SIGINT, on_sigint)
        try:
            await self.eda.publish(self._event("user.input", text))
            self.reader.start()
            await self.eda.run_until_idle()
        finally:
            self.reader.pause()
            loop.remove_signal_handler(signal.SIGINT)
            self.renderer.close()
            self.approver.cancel = None
        for outcome in self.eda.outcomes[done:]:
            if outcome.status == "error" and outcome.error:
                self._say(f"(the step failed: {outcome.error})")
        self._inbox()

    def _inbox(self) -> None:
        """Show the unread messages to the user inline; shown is read (via the console)."""
        import time

        from heron.collaboration.channels import render_console
        from heron.safety.redact import scrub_text

        for message in self.messages.list(unread_only=True):
            if message.to != self.user:
                continue
            self._say(scrub_text(render_console(message, self.identity)))
            self.messages.mark_read(message.id, via="console", at=time.time())
        for line in self.requests.notices() if self.requests is not None else ():
            self._say(line)

    def _event(self, kind: EventKind, text: str, *, stop: bool = False) -> BusEvent:
        from heron.always_on.bus.model import BusEvent, EventContent

        data: dict[str, object] = {"stop": True} if stop else {}
        return BusEvent(
            kind=kind,
            source="user",
            channel="cli",
            session=self.session.name,
            content=EventContent(text=text, data=data),
        )

    def _typed(self, line: str) -> None:
        """A line typed while the step runs: queued, or the interrupt word."""
        if not line:
            return
        if line == self.interrupt_word:
            event = self._event("user.interrupt", line, stop=True)
        else:
            event = self._event("user.input", line)
        task = asyncio.ensure_future(self.eda.publish(event))
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    def _prepare(self, state: TurnState) -> None:
        """Each turn on the bus: channel `chat`, the exclusions of what the user last typed,
        the audit trail indexing what is written, and the approver's cancel scope."""
        from heron.tools.registry import normalize_name

        state.channel = "chat"
        exclusions = self.agent.turn_exclusions
        prompt = _last_prompt(state.history)
        if exclusions is not None and prompt is not None:
            state.excluded = frozenset(normalize_name(n) for n in exclusions(prompt))
        record = state.on_append
        trail = self.session.trail

        def on_append(messages: tuple[Message, ...]) -> None:
            if record is not None:
                record(messages)
            trail.note_messages(messages)

        state.on_append = on_append
        self.approver.cancel = state.cancel

    def _abandon(self) -> None:
        """Before a hard exit mid-step: close the stored history's open tool calls."""
        with contextlib.suppress(Exception):
            self._reload()
            self.session.trail.mark_lost([r.call_id for r in self.session.repaired])

    def _reload(self) -> None:
        """Point the session's writer at what the bus loop stored (repairing open calls), so
        the session's head and history are current again."""
        from heron.sessions.writer import SessionWriter

        self.session.writer = SessionWriter.open(self.session.store, self.session.name)

    def _command(self, line: str) -> bool:
        """Run a `/` command; True to leave the chat."""
        name, _, rest = line.partition(" ")
        rest = rest.strip()
        if name in ("/quit", "/exit"):
            return True
        if name == "/help":
            from heron.cli.chat_requests import HELP as REQUESTS_HELP

            self._say(HELP if self.requests is None else f"{HELP}\n{REQUESTS_HELP}")
        elif name == "/tools":
            self._tools()
        elif name == "/session":
            self._session_info()
        elif name == "/model":
            self._model(rest)
        elif name == "/cost":
            self._say(cost_report(self.meter.calls))
        elif name in ("/approvals", "/approve", "/deny") and self.requests is not None:
            if name == "/approvals":
                self._say("\n".join(self.requests.listing()))
            else:
                self._say(self.requests.answer(name[1:], rest))
        else:
            self._say(f"unknown command {name}; /help lists the commands")
        return False

    def _tools(self) -> None:
        from heron.cli.render import tool_line

        specs = self.agent.registry.specs()
        if not specs:
            self._say("this agent has no tools")
            return
        for spec in specs:
            flags, first = tool_line(spec)
            self._say(f"  {spec.name:24} {flags:28} {first}")

    def _session_info(self) -> None:
        s = self.session
        self._say(
            f"session {s.name}: {len(self.eda.history)} messages stored "
            f"(head entry {s.store.head(s.name)}); "
            f"resume with `heron chat --session {s.name}`"
        )

    def _model(self, spec: str) -> None:
        if not spec:
            self._say(f"model: {self.agent.model.name}")
            return
        # The configured endpoint belongs to the configured model's provider.
        same = spec.partition(":")[0] == self.provider
        try:
            model = common.configured_model(spec, base_url=self.base_url if same else None)
        except UsageError as exc:
            self._say(f"cannot switch: {exc}")
            return
        from heron.models.metered import MeteredModel

        self.meter = MeteredModel(model, self.meter.calls)
        self.agent.model = self.meter
        self._say(f"model: {model.name}")

    def _banner(self) -> None:
        from heron.cli.render import summarize_message

        s = self.session
        state = "new" if s.created else f"resumed, {len(s.history)} messages"
        self._say(f"heron chat · session {s.name} ({state}) · model {self.agent.model.name}")
        if s.history and not s.created:
            self._say(f"  last: {summarize_message(s.history[-1], width=90)}")
        self._say("  /help for commands · Esc Enter for a new line · Ctrl-D to leave")
        self._inbox()

    def _say(self, text: str) -> None:
        common.out(text)
        sys.stdout.flush()


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `chat` to the `heron` parser (`sessions resume` runs `cmd_resume`)."""
    chat = sub.add_parser(
        "chat",
        help="interactive chat with live tool cards and approvals",
        description="Enter sends; Esc then Enter, or a line ending in a backslash, starts a "
        "new line. /help lists the commands. Ctrl-C cancels the running step; a second "
        "Ctrl-C exits.",
    )
    chat.add_argument("--session", metavar="NAME", help="resume or create this session")
    chat.add_argument(
        "--interrupt-word",
        default="stop",
        metavar="WORD",
        help="typed on a line of its own while a step runs, stops it (default: stop)",
    )
    common.add_agent_flags(chat)
    chat.set_defaults(handler=cmd_chat)


def cmd_chat(args: argparse.Namespace) -> int:
    return run_chat(args, session=args.session, must_exist=False)


def cmd_resume(args: argparse.Namespace) -> int:
    """`heron sessions resume NAME`: the chat on a stored session, or only its repair."""
    if args.repair_only:
        return _repair_only(args)
    return run_chat(args, session=args.name, must_exist=True)


def _repair_only(args: argparse.Namespace) -> int:
    state_dir = common.load_config(args).state.path()
    try:
        session = common.open_session(state_dir, args.name, must_exist=True)
    except common.session_errors() as exc:
        return common.session_failed(exc)
    try:
        if not session.repaired:
            common.out(f"session {session.name}: nothing to repair")
        else:
            common.out(
                f"session {session.name}: appended {len(session.repaired)} interrupted "
                f"result(s); head is now entry {session.writer.head}"
            )
    finally:
        session.close()
    return EXIT_OK


def run_chat(args: argparse.Namespace, *, session: str | None, must_exist: bool) -> int:
    """`heron chat` and `heron sessions resume`: the chat on session `session`."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError(
            "heron chat needs a terminal; in scripts use `heron run --session NAME PROMPT`"
        )
    from rich.console import Console

    from heron.cli.chat_requests import PendingRequests
    from heron.cli.render import PrettyRenderer

    config = common.require_model(common.load_config(args))
    tools = common.user_tools(config)
    state_dir = config.state.path()

    async def chat() -> int:
        asyncio.get_running_loop().set_default_executor(common.DaemonThreadExecutor())
        held = common.open_session(state_dir, session, must_exist=must_exist)
        requests = PendingRequests.open(
            state_dir, config.approvals, approval_timeout_s=config.approval.timeout_s
        )
        children = None
        try:
            children = common.open_children(config)
            renderer = PrettyRenderer(Console(highlight=False))
            approver = ChatApprover(before_prompt=renderer.pause)
            own = children.tools(held.name) if children is not None else []
            async with common.open_agent(config, approver=approver, tools=[*tools, *own]) as agent:
                from heron.models.metered import MeteredModel

                meter = MeteredModel(agent.model)
                agent.model = meter
                held.attach(agent)
                repl = ChatRepl(
                    agent=agent,
                    session=held,
                    renderer=renderer,
                    approver=approver,
                    meter=meter,
                    state_dir=state_dir,
                    base_url=config.agent.base_url,
                    interrupt_word=getattr(args, "interrupt_word", "stop"),
                    identity=config.identity.identity(),
                    requests=requests,
                    store_url=config.store.url,
                )
                repl.user = config.user.name
                code = await repl.run()
                if children is not None:
                    await common.settle_children(children, config.subagents.run_deadline_s)
                return code
        finally:
            if children is not None:
                await children.aclose()
            requests.close()
            held.close()
            common.announce_session(held, always=True)

    try:
        return asyncio.run(chat())
    except common.session_errors() as exc:
        return common.session_failed(exc)
