"""Terminal rendering: turn events as live tool cards (rich) or JSON lines for machines, and
the one-line views of tools and history messages the commands share."""

from __future__ import annotations

import json
import sys
from typing import IO, Any

from rich.console import Console, Group
from rich.live import Live
from rich.text import Span, Text

from heron._support.limits import model_json
from heron._support.terminal import terminal_safe
from heron.messages import AssistantMessage, Message, ToolResultMessage, UserMessage
from heron.safety.redact import scrub_text
from heron.tools.definition import ToolSpec
from heron.toolsets.plan import render_plan
from heron.turn.events import (
    ApprovalDecisionEvent,
    ApprovalRequestEvent,
    BaseEvent,
    CallIdRenamedEvent,
    CancelledEvent,
    ErrorEvent,
    FinalEvent,
    LoopDetectedEvent,
    PlanEvent,
    ProgressEvent,
    ReasoningDeltaEvent,
    TextDeltaEvent,
    ToolCallEvent,
    ToolResultEvent,
    TruncatedEvent,
)

HINT_KEYS = ("command", "path", "url", "query", "pattern", "name", "text")
STATUS_STYLE = {
    "ok": ("✔", "green"),
    "error": ("✘", "red"),
    "denied": ("⊘", "yellow"),
    "replaced": ("✎", "cyan"),
    "duplicate": ("≡", "dim"),
    "unknown": ("?", "red"),
    "excluded": ("⊘", "red"),
    "interrupted": ("■", "magenta"),
    "hook_cancelled": ("⊘", "yellow"),
}


def _hint(arguments: dict[str, Any], width: int = 60) -> str:
    for key in HINT_KEYS:
        value = arguments.get(key)
        if isinstance(value, str) and value:
            flat = " ".join(value.split())
            return flat if len(flat) <= width else flat[: width - 1] + "…"
    return ""


def _terminal_text(text: Text) -> Text:
    """`text`, styles kept, with what a terminal would act on written out (`terminal_safe`):
    the model and the tools supply most of what a card shows."""
    cuts = sorted({point for span in text.spans for point in (span.start, span.end)})
    safe = Text(style=text.style, end=text.end)
    for piece in text.divide(cuts):  # each piece is styled alike from end to end
        plain = terminal_safe(piece.plain)
        spans = [Span(0, len(plain), span.style) for span in piece.spans]
        safe.append_text(Text(plain, style=piece.style, spans=spans))
    return safe


class JsonLinesRenderer:
    """One JSON object per event on stdout, flushed per line (terminal-safe: see
    `print_json`)."""

    def __init__(self, out: IO[str] | None = None) -> None:
        self._out = out or sys.stdout

    def __call__(self, event: BaseEvent) -> None:
        self._out.write(terminal_safe(model_json(event, exclude_none=True)) + "\n")
        self._out.flush()

    def pause(self) -> None:
        """Nothing to pause: approval prompts go to stderr."""

    def close(self) -> None:
        """Nothing to close."""


class PrettyRenderer:
    """Live tool cards: pending calls spin in a live area, finished ones print above it."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=False, highlight=False)
        self._pending: dict[str, tuple[str, Text]] = {}
        self._live: Live | None = None
        self._text_open = False

    def __call__(self, event: BaseEvent) -> None:
        if isinstance(event, TextDeltaEvent):
            self._stop_live()
            self.console.print(terminal_safe(event.text), end="", markup=False, highlight=False)
            self._text_open = True
            return
        self._end_text()
        if isinstance(event, ToolCallEvent):
            # The model wrote the arguments: they are shown as plain text, never as markup.
            hint = Text(f" {_hint(event.arguments)}".rstrip())
            if event.injected:
                hint.append(f" (runtime set: {', '.join(event.injected)})", style="dim")
            self._pending[event.id] = (event.name, hint)
            if not self.console.is_terminal:
                self.console.print(_terminal_text(Text.assemble("→ ", event.name, hint)))
            self._refresh()
        elif isinstance(event, ToolResultEvent):
            name, hint = self._pending.pop(event.id, (event.name, Text()))
            mark, style = STATUS_STYLE.get(event.status, ("•", "white"))
            line = Text.assemble((f"{mark} ", style), (name, "bold"), hint)
            line.append(f"  {event.status} · {event.duration_ms:.0f} ms", style="dim")
            if event.phase:
                line.append(f" · {event.phase}", style="magenta")
            if event.receipt:
                line.append(f"\n    receipt {event.receipt}", style="dim cyan")
            if not event.success:
                first = event.output.strip().splitlines()[0] if event.output.strip() else ""
                line.append(f"\n    {first[:200]}", style=style)
            self._print(line)
        elif isinstance(event, ProgressEvent):
            self._print(Text(f"  … {event.name}: {event.message}", style="dim"))
        elif isinstance(event, ApprovalRequestEvent):
            self._stop_live()
        elif isinstance(event, ApprovalDecisionEvent):
            self._print(
                Text(
                    f"  approval {event.decision} for {event.tool} by {event.decided_by}", "yellow"
                )
            )
        elif isinstance(event, TruncatedEvent):
            self._print(
                Text(
                    f"  {event.name}: result cut from {event.original_chars} to "
                    f"{event.retained_chars} characters for the model",
                    style="dim",
                )
            )
        elif isinstance(event, LoopDetectedEvent):
            self._print(Text(f"  loop detector ({event.level}): {event.message}", "yellow"))
        elif isinstance(event, ReasoningDeltaEvent):
            self._print(Text(event.text, style="dim italic"))
        elif isinstance(event, CancelledEvent):
            self._print(Text(f"■ cancelled: {event.reason}", style="magenta"))
        elif isinstance(event, ErrorEvent):
            self._print(Text(f"✘ error: {event.message}", style="bold red"))
        elif isinstance(event, PlanEvent):
            for step in render_plan(event.items, explanation=event.explanation):
                mark = step.lstrip()[:3]
                style = {"[>]": "cyan", "[x]": "dim"}.get(mark, "")
                self._print(Text(step, style=style))
        elif isinstance(event, CallIdRenamedEvent):
            note = f"  call id {event.old_id} was taken ({event.reason}); now {event.new_id}"
            self._print(Text(note, style="dim"))
        elif isinstance(event, FinalEvent) and event.reason != "answer":
            self._print(Text(f"(turn ended: {event.reason})", style="dim"))

    def pause(self) -> None:
        """Stop live drawing so an approval prompt can use the terminal."""
        self._end_text()
        self._stop_live()

    def close(self) -> None:
        self._end_text()
        self._stop_live()

    def _end_text(self) -> None:
        if self._text_open:
            self.console.print()
            self._text_open = False

    def _print(self, renderable: Text) -> None:
        console = self._live.console if self._live is not None else self.console
        console.print(_terminal_text(renderable), soft_wrap=True)
        self._refresh()

    def _refresh(self) -> None:
        if not self._pending:
            self._stop_live()
            return
        cards = Group(
            *(
                _terminal_text(Text.assemble(("⏳ ", "cyan"), (name, "bold"), hint))
                for name, hint in self._pending.values()
            )
        )
        if self._live is None:
            if not self.console.is_terminal:
                return
            self._live = Live(cards, console=self.console, refresh_per_second=12, transient=True)
            self._live.start()
        else:
            self._live.update(cards)

    def _stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


def print_json(data: Any) -> None:
    """`data` as indented JSON on stdout. JSON leaves DEL, C1 and bidirectional overrides raw;
    `terminal_safe` writes them as the `\\u` escapes JSON itself uses, so what is printed
    decodes to the same value and never acts on a terminal."""
    sys.stdout.write(terminal_safe(json.dumps(data, indent=2, ensure_ascii=False)) + "\n")


def annotation_flags(spec: ToolSpec) -> dict[str, bool]:
    """A tool's annotations by name (`heron tools`, `/tools` in the chat)."""
    ann = spec.annotations
    return {
        "read_only": ann.read_only,
        "destructive": ann.destructive,
        "idempotent": ann.idempotent,
        "irreversible": ann.irreversible,
        "open_world": ann.open_world,
        "requires_approval": ann.requires_approval,
        "workspace_only": ann.workspace_only,
    }


def tool_line(spec: ToolSpec) -> tuple[str, str]:
    """A tool's set annotations (`read_only,idempotent`) and the first line of its
    description."""
    flags = ",".join(k for k, v in annotation_flags(spec).items() if v)
    text = spec.description.strip()
    return flags, text.splitlines()[0] if text else ""


def summarize_message(message: Message, width: int = 100) -> str:
    """One line for a history message: its text, its tool calls, or its result."""
    if isinstance(message, UserMessage):
        text = (
            message.content if message.source == "user" else f"[{message.source}] {message.content}"
        )
    elif isinstance(message, AssistantMessage):
        calls = " ".join(f"→ {c.name} [{c.id}]" for c in message.tool_calls)
        text = " ".join(p for p in (message.text, calls) if p)
    elif isinstance(message, ToolResultMessage):
        mark = "✘ " if message.is_error else ""
        text = f"[{message.call_id}] {message.name}: {mark}{message.content}"
    else:
        text = message.content
    flat = " ".join(scrub_text(text).split())  # a surface: credential shapes are masked
    return flat if len(flat) <= width else flat[: width - 1] + "…"
