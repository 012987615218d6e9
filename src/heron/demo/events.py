"""`heron demo events`: the event-driven agent, live, on the real durable bus.

A scripted model (a `FunctionModel` that reads what a real model would read) drives an
always-on `HeronServer` in a scratch state directory; everything else is real: the SQLite
event bus, exactly-once consumption, and a detached background job (a bash command that runs
for a few seconds) reported back as a `job.exit` event. The timeline:

1. the user asks for the release build; the agent starts it as a background job and its turn
   ends at once;
2. while the job runs, "what time is it?" arrives and is answered at once, with the real local
   time;
3. "reply in Japanese" arrives, still during the job; the agent notes it;
4. the job's `job.exit` event lands; the agent presents the build result in Japanese.

The demo checks its own claims (the time answered before the job ended, the result presented
after it) and exits 1 if one does not hold. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from heron.agent import Agent
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.server import HeronServer, ServeConfig
from heron.messages import AssistantMessage, Message, ToolResultMessage, UserMessage
from heron.models.base import ModelRequest
from heron.models.scripted import FunctionModel, ModelTurn
from heron.tools.definition import Tool
from heron.turn.context import RuntimeKnobs
from heron.turn.events import BaseEvent, FinalEvent, ToolCallEvent, ToolResultEvent

__all__ = ["BUILD_REQUEST", "JAPANESE", "TIME_QUESTION", "build_command", "run_events_demo"]

EventsFormat = Literal["pretty", "jsonl"]

BUILD_REQUEST = "run the release build and tell me how it went"
TIME_QUESTION = "what time is it?"
JAPANESE = "reply in Japanese"
SESSION = "demo"
BOUND_S = 12.0
"""Upper bound for the whole live part; the demo normally needs about four seconds."""
STOP_S = 2.0
"""Upper bound for shutting the server down."""

HEADER = (
    "heron demo events — experiment 4-6 (1)+(2), live on the durable event bus.\n"
    "The model is SCRIPTED (a FunctionModel deciding from the events it reads); the bus, the "
    "background job and the timeline are real."
)


def build_command(scale: float = 1.0) -> str:
    """The release "build": three steps of `scale` seconds each, then a one-line verdict."""
    step = f"{max(scale, 0.05):g}"
    return (
        f'for i in 1 2 3; do echo "compiling module $i/3"; sleep {step}; done; '
        'echo "build ok: 3 modules, 0 errors"'
    )


class Timeline:
    """Prints what happens, stamped with seconds since the start: bus arrivals, tool cards and
    answers. `pretty` is for people (rich), `jsonl` one JSON object per line for machines."""

    def __init__(self, events: EventsFormat) -> None:
        self.events = events
        self.started = time.monotonic()
        self.finals: list[tuple[float, str]] = []
        self.arrivals: list[tuple[float, BusEvent]] = []
        self.changed = asyncio.Event()
        """Set on every answer; waiters clear it."""
        self._console: Any = None
        if events == "pretty":
            from rich.console import Console

            self._console = Console(highlight=False)

    def elapsed(self) -> float:
        return round(time.monotonic() - self.started, 3)

    def header(self) -> None:
        if self._console is None:
            self._emit({"type": "demo", "demo": "events", "model": "scripted", "note": HEADER})
        else:
            from rich.panel import Panel

            self._console.print(Panel(HEADER, border_style="cyan"))

    def arrival(self, event: BusEvent) -> None:
        """A bus watcher: called once an event is durable."""
        at = self.elapsed()
        self.arrivals.append((at, event))
        text = event.content.text
        if self._console is None:
            self._emit(
                {
                    "type": "bus_event",
                    "at": at,
                    "id": event.id,
                    "kind": event.kind,
                    "source": event.source,
                    "text": text,
                }
            )
            return
        first = text.splitlines()[0] if text else ""
        self._line(at, f"[bold cyan]⇣ {event.kind}[/] [dim]from {event.source}[/]  {_esc(first)}")
        for extra in text.splitlines()[1:]:
            self._console.print(f"           [dim]{_esc(extra)}[/]")

    def turn(self, event: BaseEvent) -> None:
        """The agent's sink: tool cards and answers."""
        at = self.elapsed()
        if isinstance(event, FinalEvent):
            self.finals.append((at, event.text))
            self.changed.set()
        if self._console is None:
            if isinstance(event, ToolCallEvent | ToolResultEvent | FinalEvent):
                self._emit({**event.model_dump(mode="json", exclude_none=True), "at": at})
            return
        if isinstance(event, ToolCallEvent):
            args = json.dumps(event.arguments, ensure_ascii=False)
            self._line(at, f"[yellow]→ {event.name}[/] [dim]{_esc(args[:90])}[/]")
        elif isinstance(event, ToolResultEvent):
            mark = "[green]✔[/]" if event.success else "[red]✘[/]"
            first = event.output.strip().splitlines()[0] if event.output.strip() else ""
            self._line(at, f"{mark} {event.name}  [dim]{_esc(first[:90])}[/]")
        elif isinstance(event, FinalEvent):
            self._line(at, f"[bold green]◆ agent:[/] {_esc(event.text)}")

    def note(self, text: str) -> None:
        at = self.elapsed()
        if self._console is None:
            self._emit({"type": "demo_note", "at": at, "text": text})
        else:
            self._line(at, f"[magenta]· {_esc(text)}[/]")

    def done(self, ok: bool, problems: list[str]) -> None:
        if self._console is None:
            self._emit({"type": "demo_done", "ok": ok, "problems": problems})
            return
        if ok:
            self._console.print("[bold green]events demo: every claim above held.[/]")
        for problem in problems:
            self._console.print(f"[bold red]events demo: {_esc(problem)}[/]")

    def _line(self, at: float, markup: str) -> None:
        self._console.print(f"[dim]{at:6.2f}s[/] {markup}", soft_wrap=True)

    def _emit(self, record: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
        sys.stdout.flush()


def _esc(text: str) -> str:
    from rich.markup import escape

    return escape(text)


# -- the scripted model ----------------------------------------------------------------------


def _fresh(request: ModelRequest) -> list[Message]:
    """What arrived since the model last spoke."""
    tail: list[Message] = []
    for message in reversed(request.messages):
        if isinstance(message, AssistantMessage):
            break
        tail.append(message)
    return tail[::-1]


def _said(messages: list[Message]) -> str:
    return "\n".join(m.content for m in messages if isinstance(m, UserMessage | ToolResultMessage))


def scripted_decisions(command: str) -> Callable[[ModelRequest], str | ModelTurn]:
    """What the scripted model does: it reads only the request, as a real model would."""
    call_ids = itertools.count(1)

    def decide(request: ModelRequest) -> str | ModelTurn:
        new = _fresh(request)
        said = _said(new)
        started = [m for m in new if isinstance(m, ToolResultMessage) and m.name == "start_job"]
        if started:
            job = re.search(r"job-[0-9a-f]+", started[0].content)
            name = job.group(0) if job else "a background job"
            return f"The release build runs in the background as {name}; I'll report when it lands."
        if BUILD_REQUEST in said:
            arguments = {"command": command, "timeout_s": 60}
            call = {"id": f"call-{next(call_ids)}", "name": "start_job", "arguments": arguments}
            return ModelTurn.model_validate({"tool_calls": [call]})
        ended = re.search(r"background job (job-[0-9a-f]+) \(.*\) (completed|failed)", said)
        if ended:
            verdict = re.search(r"^build ok.*$", said, re.MULTILINE)  # the job's own output line
            result = verdict.group(0) if verdict else "no verdict line in its output"
            earlier = [m.content for m in request.messages if isinstance(m, UserMessage)]
            if any(JAPANESE in text for text in earlier):
                status = "完了しました" if ended.group(2) == "completed" else "失敗しました"
                return f"リリースビルド（{ended.group(1)}）が{status}。結果: {result}"
            return f"The release build ({ended.group(1)}) {ended.group(2)}: {result}"
        if TIME_QUESTION in said:
            now = datetime.now().astimezone()
            return f"It is {now:%H:%M:%S} ({now:%Z}, your local time). The build is still running."
        if JAPANESE in said:
            return "Noted: I will present the build result in Japanese when the job finishes."
        return "Noted."

    return decide


# -- the run ---------------------------------------------------------------------------------


async def _wait(timeline: Timeline, predicate: Callable[[], bool]) -> None:
    """Wait for `predicate`, re-checked after every answer (the caller bounds the wait)."""
    while not predicate():
        await timeline.changed.wait()
        timeline.changed.clear()


async def _live(timeline: Timeline, state_dir: Path, scale: float) -> list[str]:
    """Runs the timeline; returns the claims that did not hold (empty: all held)."""
    command = build_command(scale)
    decide = scripted_decisions(command)

    def make_agent(tools: list[Tool]) -> Agent:
        return Agent(
            model=FunctionModel(decide, name="scripted"),
            tools=tools,
            autonomy="full",
            knobs=RuntimeKnobs(max_iterations=8),
            name="events-demo",
        )

    config = ServeConfig(
        state_dir=state_dir,
        session=SESSION,
        workspace=state_dir / "workspace",
        shutdown_grace_s=STOP_S / 2,
    )
    server = HeronServer(config, make_agent, sink=timeline.turn)
    await server.start()
    assert server.bus is not None and server.agent is not None and server.jobs is not None
    server.bus.watch(timeline.arrival)
    serving = asyncio.ensure_future(server.serve())
    agent, jobs = server.agent, server.jobs

    async def say(text: str) -> None:
        event = BusEvent(
            kind="user.input",
            source="user",
            channel="cli",
            session=SESSION,
            content=EventContent(text=text),
        )
        await agent.publish(event)

    def finals() -> int:
        return len(timeline.finals)

    def job_state() -> str:
        listed = jobs.jobs()
        return listed[0].state if listed else "not started"

    problems: list[str] = []
    step = "the build to start"
    try:
        async with asyncio.timeout(BOUND_S):
            await say(BUILD_REQUEST)
            await _wait(timeline, lambda: finals() >= 1)
            step = "the time answer"
            await say(TIME_QUESTION)
            await _wait(timeline, lambda: finals() >= 2)
            timeline.note(f"the background job is {job_state()} while the time is answered")
            await asyncio.sleep(0.5 * scale)  # the second message comes a moment later, as typed
            step = "the build result"
            await say(JAPANESE)
            await _wait(timeline, lambda: finals() >= 4)
        problems = _check(timeline)
    except TimeoutError:
        problems = [f"gave up waiting for {step} after {BOUND_S:g} s"]
    finally:
        for job in jobs.jobs():
            if not job.finished:
                await jobs.cancel(job.id)
        server.stop()
        await asyncio.wait_for(serving, STOP_S)
    return problems


def _check(timeline: Timeline) -> list[str]:
    exits = [at for at, event in timeline.arrivals if event.kind == "job.exit"]
    answers = {text: at for at, text in timeline.finals}
    time_at = next((at for text, at in answers.items() if text.startswith("It is ")), None)
    result_at = next((at for text, at in answers.items() if "リリースビルド" in text), None)
    problems: list[str] = []
    if not exits:
        problems.append("the job's exit event never arrived")
    if time_at is None or (exits and time_at > exits[0]):
        problems.append("the time question was not answered before the job ended")
    if result_at is None or (exits and result_at < exits[0]):
        problems.append("the build result was not presented in Japanese after the job ended")
    return problems


def run_events_demo(*, events: EventsFormat = "pretty", scale: float = 1.0) -> int:
    """Run the live timeline in a scratch state directory; 0 when every claim held."""
    timeline = Timeline(events)
    timeline.header()
    with tempfile.TemporaryDirectory(prefix="heron-demo-events-") as scratch:
        problems = asyncio.run(_live(timeline, Path(scratch) / "state", scale))
    timeline.done(not problems, problems)
    return 0 if not problems else 1
