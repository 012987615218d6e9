"""An editor for the `heron acp` tests: the Agent Client Protocol SDK's own client side, over
the pipes of a real `heron acp` subprocess.

`Editor` records every session update, hands each permission request to the test (which
answers it when it chooses), and sees every raw message the agent writes (its error
responses to bad input carry no request id the SDK could match).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import acp
from acp.connection import StreamDirection, StreamEvent
from acp.schema import (
    AgentMessageChunk,
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    Implementation,
    PermissionOption,
    RequestPermissionResponse,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)

from support.cli import TIMEOUT_S, Heron

Update = Any


@dataclass(kw_only=True)
class Asked:
    """One `session/request_permission` the agent sent; `answer` replies to it."""

    session_id: str
    tool_call: ToolCallUpdate
    options: list[PermissionOption]
    meta: dict[str, Any]
    reply: asyncio.Future[RequestPermissionResponse] = field(repr=False)

    @property
    def request_id(self) -> str:
        return str(self.meta["request"])

    def withdraw(self) -> None:
        """What an editor answers once it has cancelled the prompt turn."""
        self.reply.set_result(RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled")))

    def answer(self, option_id: str) -> None:
        self.reply.set_result(
            RequestPermissionResponse(
                outcome=AllowedOutcome(option_id=option_id, outcome="selected")
            )
        )


class Editor:
    """The client side (an `acp.Client`): see the module docstring."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, Update]] = []
        self.asked: asyncio.Queue[Asked] = asyncio.Queue()
        self.raw: list[dict[str, Any]] = []
        self._changed = asyncio.Event()

    # -- what the agent calls --------------------------------------------------------------

    async def session_update(self, session_id: str, update: Update, **kwargs: Any) -> None:
        self.updates.append((session_id, update))
        self._changed.set()

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        reply: asyncio.Future[RequestPermissionResponse] = (
            asyncio.get_running_loop().create_future()
        )
        self.asked.put_nowait(
            Asked(
                session_id=session_id,
                tool_call=tool_call,
                options=options,
                meta=dict(kwargs.get("heron", {})),
                reply=reply,
            )
        )
        return await reply

    def observe(self, event: StreamEvent) -> None:
        if event.direction is StreamDirection.INCOMING:
            self.raw.append(event.message)
            self._changed.set()

    # -- what the test waits for -----------------------------------------------------------

    async def next_question(self) -> Asked:
        return await asyncio.wait_for(self.asked.get(), TIMEOUT_S)

    async def wait_for(self, what: str, condition: Callable[[], Any]) -> Any:
        """Until `condition()` is truthy (re-checked on each message); its value."""
        try:
            async with asyncio.timeout(TIMEOUT_S):
                while not (found := condition()):
                    await self._changed.wait()
                    self._changed.clear()
                return found
        except TimeoutError:
            raise AssertionError(
                f"no {what} within {TIMEOUT_S} s; updates: {self.updates}"
            ) from None

    async def error_response(self, code: int) -> dict[str, Any]:
        """The next raw error response with this code (consumed)."""

        def find() -> dict[str, Any] | None:
            for i, message in enumerate(self.raw):
                if "method" not in message and message.get("error", {}).get("code") == code:
                    return self.raw.pop(i)
            return None

        found: dict[str, Any] = await self.wait_for(f"error {code}", find)
        return found

    # -- reading the updates ---------------------------------------------------------------

    def of(self, session_id: str) -> list[Update]:
        return [u for s, u in self.updates if s == session_id]

    def calls(self, session_id: str) -> dict[str, list[Update]]:
        """Each tool call's updates, by call id, in order."""
        found: dict[str, list[Update]] = {}
        for update in self.of(session_id):
            if isinstance(update, ToolCallStart | ToolCallProgress):
                found.setdefault(update.tool_call_id, []).append(update)
        return found

    def text(self, session_id: str) -> str:
        return "".join(
            u.content.text
            for u in self.of(session_id)
            if isinstance(u, AgentMessageChunk) and isinstance(u.content, TextContentBlock)
        )

    def status(self, session_id: str, call_id: str) -> str | None:
        steps = self.calls(session_id).get(call_id, [])
        statuses = [s.status for s in steps if s.status is not None]
        return statuses[-1] if statuses else None


@dataclass(kw_only=True)
class Connected:
    """A running `heron acp` and the editor's connection to it."""

    conn: acp.ClientSideConnection
    process: asyncio.subprocess.Process
    editor: Editor
    stderr: Path

    async def new_session(self, cwd: Path) -> str:
        response = await self.conn.new_session(cwd=str(cwd), mcp_servers=[])
        return response.session_id

    async def prompt(self, session_id: str, text: str) -> str:
        response = await asyncio.wait_for(
            self.conn.prompt(session_id=session_id, prompt=[acp.text_block(text)]), TIMEOUT_S
        )
        return response.stop_reason

    async def write_raw(self, data: bytes) -> None:
        """Bytes straight onto the agent's standard input (between two whole messages)."""
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(data)
        await stdin.drain()

    def log(self) -> str:
        return self.stderr.read_text(encoding="utf-8", errors="replace")


@asynccontextmanager
async def heron_acp(heron: Heron, *args: str, log: str = "acp.log") -> AsyncIterator[Connected]:
    """`heron acp ARGS` in the scratch directory, initialized; closed (end of input) on exit."""
    editor = Editor()
    stderr_path = heron.root / log
    with stderr_path.open("wb") as stderr:
        async with acp.spawn_agent_process(
            editor,
            sys.executable,
            "-m",
            "heron.cli.main",
            "acp",
            *args,
            env=heron.env,
            cwd=heron.root,
            transport_kwargs={"stderr": stderr, "shutdown_timeout": TIMEOUT_S},
            observers=[editor.observe],
        ) as (conn, process):
            connected = Connected(conn=conn, process=process, editor=editor, stderr=stderr_path)
            try:
                await asyncio.wait_for(
                    conn.initialize(
                        protocol_version=acp.PROTOCOL_VERSION,
                        client_capabilities=ClientCapabilities(),
                        client_info=Implementation(name="test-editor", version="1.0"),
                    ),
                    TIMEOUT_S,
                )
                yield connected
            except BaseException:
                sys.stderr.write(f"heron acp stderr:\n{connected.log()}\n")
                raise
    # The editor closed its end: heron closed every session and left cleanly.
    assert process.returncode == 0, connected.log()
    assert "Traceback" not in connected.log(), connected.log()
