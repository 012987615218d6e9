"""The terminal parts of `heron chat`: the approval question (a prompt of its own), the input
key bindings, the owner-only input history, and the lines typed while a step runs."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from heron._support.terminal import terminal_safe

if TYPE_CHECKING:
    from prompt_toolkit.history import FileHistory
    from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

    from heron.turn.approval import ApprovalAnswer, ApprovalRequest
    from heron.turn.cancel import CancelScope

__all__ = ["HISTORY_FILE", "ChatApprover", "LineReader", "input_bindings", "input_history"]

HISTORY_FILE = "chat_history"


class ChatApprover:
    """Asks yes / no / always with a prompt of its own while a step runs.

    Ctrl-C at the question answers no and cancels the step (the key reaches prompt_toolkit,
    not the signal handler, while the question is open).
    """

    def __init__(
        self,
        *,
        before_prompt: Callable[[], None],
        after_prompt: Callable[[], None] | None = None,
    ) -> None:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import InMemoryHistory

        self._before_prompt = before_prompt
        self.after_prompt = after_prompt
        """Called when a question is answered (the chat resumes reading typed lines)."""
        self._session: PromptSession[str] = PromptSession(history=InMemoryHistory())
        self._lock = asyncio.Lock()
        self.cancel: CancelScope | None = None
        """The running step's scope, set by the chat before each step."""

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer | None:
        from heron.turn.approval import ApprovalAnswer, parse_terminal_answer

        async with self._lock:
            self._before_prompt()
            why = f"  why you are asked: {request.reason}\n" if request.reason else ""
            asked = f"? heron wants to run {request.tool}\n  {request.summary}\n{why}"
            sys.stdout.write("\n" + terminal_safe(asked))
            sys.stdout.flush()
            try:
                # The step's own SIGINT handler must survive the question: prompt_toolkit
                # would remove it on the way out.
                line = await self._session.prompt_async(
                    f"  allow {request.tool}? [y]es / [n]o / [a]lways: ", handle_sigint=False
                )
            except KeyboardInterrupt:
                if self.cancel is not None:
                    self.cancel.cancel("interrupted by the operator (Ctrl-C)")
                return ApprovalAnswer(
                    decision="no", decided_by="operator:chat", reason="interrupted (Ctrl-C)"
                )
            except EOFError:
                line = ""
            finally:
                if self.after_prompt is not None:
                    self.after_prompt()
            return ApprovalAnswer(decision=parse_terminal_answer(line), decided_by="operator:chat")


def input_bindings() -> KeyBindings:
    from prompt_toolkit.key_binding import KeyBindings

    bindings = KeyBindings()

    @bindings.add("enter")
    def _enter(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        document = buffer.document
        if document.is_cursor_at_the_end and document.text.endswith("\\"):
            buffer.delete_before_cursor(1)
            buffer.insert_text("\n")
        else:
            buffer.validate_and_handle()

    @bindings.add("escape", "enter")
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    return bindings


def input_history(state_dir: Path) -> FileHistory:
    from prompt_toolkit.history import FileHistory

    path = state_dir / HISTORY_FILE
    if not path.exists():
        # What people type may include secrets: owner-only, whatever the umask.
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    return FileHistory(str(path))


class LineReader:
    """Lines typed while a step runs, read on the event loop (no thread).

    Only started once the input prompt has closed, so the terminal is in line mode: the
    kernel echoes and edits the line, and each read ends at Enter.
    """

    def __init__(self, on_line: Callable[[str], None]) -> None:
        self._on_line = on_line
        self._fd = sys.stdin.fileno()
        self._buffer = b""
        self._reading = False

    def start(self) -> None:
        if not self._reading:
            asyncio.get_running_loop().add_reader(self._fd, self._read)
            self._reading = True

    def pause(self) -> None:
        if self._reading:
            asyncio.get_running_loop().remove_reader(self._fd)
            self._reading = False

    def _read(self) -> None:
        data = os.read(self._fd, 4096)
        if not data:
            self.pause()
            return
        self._buffer += data
        while b"\n" in self._buffer:
            line, _, self._buffer = self._buffer.partition(b"\n")
            self._on_line(line.decode(errors="replace").strip())
