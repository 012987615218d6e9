"""`heron demo`: the quick-start run. A scripted model (heron ships no real model) drives real
tools over a scratch workspace: three read-only calls run in parallel, a write asks for
approval, and every successful result carries a receipt that is verified at the end.

The caller renders the turn (`heron demo` passes the CLI's live cards or JSON lines)."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Protocol

from heron.agent import Agent
from heron.models.scripted import ScriptedModel, demo_script_path
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool
from heron.turn.approval import ApprovalRequest, Approver, BackChannelApprover, TerminalApprover
from heron.turn.events import BaseEvent
from heron.turn.receipts import ReceiptKeyStore, ReceiptScope, parse_receipt, verify_receipt


class Renderer(Protocol):
    """An event sink that can step aside for an approval prompt and be closed at the end."""

    def __call__(self, event: BaseEvent) -> None: ...

    def pause(self) -> None: ...

    def close(self) -> None: ...


NOTES = {
    "groceries.md": "# Groceries\n- oat milk\n- lemons\n- coffee beans\n",
    "meeting.md": (
        "# Team meeting\nWe ship the receipts feature on Friday.\n"
        "Ana reviews the approval flow before then.\n"
    ),
}


def make_demo_tools(workspace: Path) -> list[Tool]:
    notes = workspace / "notes"

    def note_path(name: str) -> Path | None:
        path = notes / name
        return path if "/" not in name and "\\" not in name and path.is_file() else None

    @tool(read_only=True, idempotent=True, examples=[{"name": "meeting.md"}])
    def read_note(name: str) -> ToolResult:
        """Read one note from the notes folder. Use it when you need a note's full text.

        Cannot read outside the notes folder; names with path separators are refused.

        Args:
            name: The note's file name, e.g. `meeting.md`.
        """
        path = note_path(name)
        if path is None:
            return ToolResult.fail(f"no note named {name!r}; notes: {sorted(NOTES)}")
        return ToolResult.ok(path.read_text(encoding="utf-8"))

    @tool(read_only=True, idempotent=True, examples=[{"name": "meeting.md"}])
    def count_words(name: str) -> dict[str, int]:
        """Count the lines and words of one note. Returns `{"lines": n, "words": n}`.

        Args:
            name: The note's file name.
        """
        path = note_path(name)
        if path is None:
            raise FileNotFoundError(f"no note named {name!r}")
        text = path.read_text(encoding="utf-8")
        return {"lines": len(text.splitlines()), "words": len(text.split())}

    @tool(
        requires_approval=True,
        idempotent=True,
        examples=[{"name": "digest", "text": "Two bullet points."}],
    )
    def save_summary(name: str, text: str) -> str:
        """Save a summary as `summaries/<name>.md`, replacing any earlier one of that name.

        Writes to the workspace, so it needs approval under supervised autonomy.

        Args:
            name: File stem, letters, digits and dashes only, e.g. `digest`.
            text: The Markdown text to write, kept byte for byte.
        """
        if not name.replace("-", "").isalnum():
            raise ValueError("name must be letters, digits and dashes")
        target = workspace / "summaries" / f"{name}.md"
        target.parent.mkdir(exist_ok=True)
        target.write_text(text, encoding="utf-8")
        return f"saved {len(text)} characters to summaries/{name}.md"

    return [read_note, count_words, save_summary]


def _seed(workspace: Path) -> None:
    (workspace / "notes").mkdir(parents=True, exist_ok=True)
    for name, text in NOTES.items():
        (workspace / "notes" / name).write_text(text, encoding="utf-8")


def _approver(renderer: Renderer) -> Approver:
    if sys.stdin.isatty():
        return TerminalApprover(before_prompt=renderer.pause)

    def approve_for_demo(request: ApprovalRequest) -> None:
        sys.stderr.write(f"(no terminal: the demo operator approves {request.tool})\n")
        asyncio.get_running_loop().call_soon(demo_channel.answer, request.request_id, "yes")

    demo_channel = BackChannelApprover("demo", on_request=approve_for_demo)
    return demo_channel


async def _run(workspace: Path, renderer: Renderer, state_dir: Path) -> int:
    _seed(workspace)
    tools = make_demo_tools(workspace)
    store = ReceiptKeyStore(state_dir)
    agent = Agent(
        model=ScriptedModel.from_file(demo_script_path()),
        tools=tools,
        autonomy="supervised",
        approver=_approver(renderer),
        receipts=ReceiptScope("run", store=store),
        name="demo",
    )
    prompt = "Read my notes, count the words in the meeting notes and save a digest."
    result = await agent.run(prompt, sink=renderer, channel="cli")
    renderer.close()
    calls = {
        c.id: (c.name, c.arguments)
        for m in result.history
        if m.role == "assistant"
        for c in m.tool_calls
    }
    outputs = {m.call_id: m for m in result.history if m.role == "tool"}
    checked = 0
    for call_id, (name, arguments) in calls.items():
        message = outputs[call_id]
        if "[receipt: " not in message.content:
            continue
        body, _, tail = message.content.rpartition("\n\n[receipt: ")
        receipt = tail.rstrip("]")
        parsed = parse_receipt(receipt)
        key = store.load(parsed[0]) if parsed else None
        valid = key is not None and verify_receipt(
            receipt, key=key, tool=name, arguments=arguments, output=body
        )
        checked += valid
        sys.stderr.write(f"receipt for {name} ({call_id}): {'verified' if valid else 'INVALID'}\n")
    sys.stderr.write(f"{checked} receipts verified; workspace: {workspace}\n")
    return 0 if result.ok else 1


def run_demo(*, renderer: Renderer, workspace: Path | None) -> int:
    """Run the quick start in `workspace` (default: a temporary one), shown by `renderer`;
    0 when the turn ended with an answer."""
    with tempfile.TemporaryDirectory(prefix="heron-demo-") as scratch:
        root = workspace or Path(scratch) / "workspace"
        return asyncio.run(_run(root, renderer, Path(scratch) / "state"))
