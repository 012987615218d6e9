"""`update_plan`: a checklist the model keeps while it works, drawn live for the user.

The model sends its whole plan on every call, as with Codex's `update_plan` and Claude Code's
`TodoWrite`: a list of steps, each `pending`, `in_progress` or `completed`, at most one in
progress. The tool keeps no state and changes nothing but the plan, so it is read-only toward
the world and runs on the event loop. After each successful call the engine emits a `plan`
event (`heron.turn.events.PlanEvent`) with the whole plan, right after the call's
`tool_result`; a failed call (a refused plan) emits none. `render_plan` turns a plan into the
lines a terminal shows.

It is the `planning` built-in set (`tools.builtin.sets = ["planning"]`, `--builtin planning`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Final

from pydantic import Field
from typing_extensions import TypedDict

from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool
from heron.turn.calls import PLAN_TOOL
from heron.turn.events import PlanItem, PlanStatus

__all__ = ["MAX_STEPS", "MAX_STEP_CHARS", "PlanStep", "plan_tools", "render_plan"]

MAX_STEPS: Final = 50
MAX_STEP_CHARS: Final = 300
MAX_EXPLANATION_CHARS: Final = 1000

# Line breaks, terminal controls and bidi overrides would break or disguise the checklist.
_UNSAFE_RE: Final = re.compile(
    "[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
)
_MARKS: Final[dict[PlanStatus, str]] = {"completed": "[x]", "in_progress": "[>]", "pending": "[ ]"}


class PlanStep(TypedDict):
    """One step as the model writes it."""

    text: Annotated[str, Field(min_length=1, max_length=MAX_STEP_CHARS)]
    status: PlanStatus


def plan_tools() -> list[Tool]:
    """The `planning` set: `update_plan`."""

    @tool(
        name=PLAN_TOOL,
        read_only=True,
        idempotent=True,
        owner="builtin",
        thread=False,
        examples=[
            {
                "plan": [
                    {"text": "Read the failing test", "status": "completed"},
                    {"text": "Fix the date parser", "status": "in_progress"},
                    {"text": "Run the whole test file", "status": "pending"},
                ]
            },
            {"plan": [], "explanation": "The task turned out to need no steps."},
        ],
    )
    def update_plan(
        plan: Annotated[list[PlanStep], Field(max_length=MAX_STEPS)],
        explanation: Annotated[str, Field(max_length=MAX_EXPLANATION_CHARS)] | None = None,
    ) -> ToolResult:
        """Keep a short checklist of the steps of a longer task, shown live to the user. Use it
        for work of three or more steps: write the plan before you start, then send it again
        whenever a step starts or finishes, so the user can follow along. Skip it for quick,
        single-step requests.

        Send the whole plan every time (it replaces the previous one; an empty list clears it).
        Each step is one line of plain text (at most 300 characters, no line breaks) with a
        status: `pending`, `in_progress` or `completed`. At most one step may be `in_progress`;
        mark a step `completed` as soon as it is done. At most 50 steps. A plan breaking these
        rules is refused with the reason and nothing changes. The plan changes nothing in the
        workspace or the world, and costs nothing to update.

        Args:
            plan: Every step of the plan, in order.
            explanation: Why the plan changed, in one or two sentences (optional).

        Returns:
            A one-line summary: how many steps are done, in progress and pending.
        """
        problems = [
            f"step {number}: the text must be one line of plain text with no line breaks or "
            "control characters"
            for number, step in enumerate(plan, start=1)
            if _UNSAFE_RE.search(step["text"]) or not step["text"].strip()
        ]
        running = [step["text"] for step in plan if step["status"] == "in_progress"]
        if len(running) > 1:
            shown = ", ".join(repr(text) for text in running)
            problems.append(f"{len(running)} steps are in_progress ({shown}); at most one may be")
        if problems:
            return ToolResult.fail("plan refused, nothing changed: " + "; ".join(problems))
        counts = {status: sum(s["status"] == status for s in plan) for status in _MARKS}
        if not plan:
            return ToolResult.ok("Plan cleared.", data=counts)
        summary = (
            f"Plan updated: {len(plan)} steps, {counts['completed']} completed, "
            f"{counts['in_progress']} in progress, {counts['pending']} pending."
        )
        if running:
            summary += f" Now: {running[0]}"
        return ToolResult.ok(summary, data=counts)

    return [update_plan]


def render_plan(items: Sequence[PlanItem], *, explanation: str | None = None) -> list[str]:
    """A plan as terminal lines: a heading with the progress, then one checkbox line per step
    (`[x]` completed, `[>]` in progress, `[ ]` pending), then the explanation if any. Text is
    flattened to one display-safe line, so a step cannot rewrite the terminal."""
    if not items:
        lines = ["Plan cleared"]
    else:
        done = sum(item.status == "completed" for item in items)
        lines = [f"Plan ({done}/{len(items)} done)"]
        lines += [f"  {_MARKS[item.status]} {_one_line(item.text)}" for item in items]
    if explanation and explanation.strip():
        lines.append(f"  ({_one_line(explanation)})")
    return lines


def _one_line(text: str) -> str:
    return " ".join(_UNSAFE_RE.sub(" ", text).split())
