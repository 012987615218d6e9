"""Prompt tokens saved by code orchestration (`run_python`) on a multi-fetch task.

Task: "which of these 10 service logs have errors, and how many?" Two real agent runs on the
same workspace with a scripted model:

- direct: the model calls `read_file` ten times; every full file lands in the history;
- orchestrated: the model calls `run_python` once with a script that reads the ten files
  through the same `read_file` tool and prints a two-line summary.

Prompt size is the history the model receives on its final request, plus the tool
definitions sent with every request. Tokens are an ESTIMATE: characters / 4 (no tokenizer
is involved).

    python bench/orchestration_tokens.py
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from heron import Agent, ScriptedModel, tool
from heron.messages import AssistantMessage, Message, ToolResultMessage, UserMessage
from heron.sandbox import ProcessSandbox
from heron.tools.definition import Tool
from heron.toolsets.python_exec import run_python_tool

FILES = 10
LINES_PER_FILE = 120
PROMPT = "Which of the service logs in logs/ contain ERROR lines, and how many each?"
SCRIPT = """
counts = {}
for n in range(10):
    text = read_file(path=f"logs/service-{n}.log")
    errors = sum(1 for line in text.splitlines() if " ERROR " in line)
    if errors:
        counts[f"service-{n}.log"] = errors
print("files with errors:", len(counts))
print(counts)
"""


def make_logs(workspace: Path) -> None:
    logs = workspace / "logs"
    logs.mkdir()
    for n in range(FILES):
        lines = []
        for i in range(LINES_PER_FILE):
            level = "ERROR" if n % 3 and i % (10 + n) == 0 else "INFO"
            lines.append(f"2024-03-15T14:{i % 60:02d}:00Z {level} service-{n} request {i} ok")
        (logs / f"service-{n}.log").write_text("\n".join(lines) + "\n")


def file_tool(workspace: Path) -> Tool:
    @tool(read_only=True, name="read_file")
    def read_file(path: str) -> str:
        """Read a UTF-8 text file from the workspace.

        Args:
            path: Path relative to the workspace, e.g. `logs/service-1.log`.
        """
        return (workspace / path).read_text()

    return read_file


def chars(messages: list[Message]) -> int:
    total = 0
    for message in messages:
        if isinstance(message, UserMessage | ToolResultMessage):
            total += len(message.content)
        elif isinstance(message, AssistantMessage):
            total += len(message.text)
            total += sum(len(json.dumps(c.arguments)) + len(c.name) for c in message.tool_calls)
    return total


def spec_chars(tools: list[Tool]) -> int:
    return sum(len(json.dumps(t.spec.to_wire())) for t in tools)


async def run(
    workspace: Path, tools: list[Tool], turns: list[dict[str, Any]]
) -> tuple[int, list[str]]:
    """History characters on the final request, and the tool results the model saw."""
    model = ScriptedModel(turns)
    agent = Agent(model=model, tools=tools, autonomy="full", workspace=workspace)
    result = await agent.run(PROMPT)
    assert result.ok, result.outcome
    history = model.messages_at(-1)
    return chars(history), [m.content for m in history if isinstance(m, ToolResultMessage)]


def tokens(n: int) -> int:
    return round(n / 4)


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        make_logs(workspace)
        reader = file_tool(workspace)
        runner = run_python_tool(
            sandbox=ProcessSandbox(), workspace=workspace, tool_names=["read_file"]
        )
        direct_calls = [
            {"id": f"r{n}", "name": "read_file", "arguments": {"path": f"logs/service-{n}.log"}}
            for n in range(FILES)
        ]
        direct, direct_results = await run(
            workspace, [reader], [{"tool_calls": direct_calls}, {"text": "summary"}]
        )
        orchestrated_call = {"id": "p1", "name": "run_python", "arguments": {"code": SCRIPT}}
        orchestrated, [summary] = await run(
            workspace,
            [reader, runner],
            [{"tool_calls": [orchestrated_call]}, {"text": "summary"}],
        )
        direct_specs = spec_chars([reader])
        orchestrated_specs = spec_chars([reader, runner])

    assert len(direct_results) == FILES
    print("the script's answer, as the model saw it:")
    print("    " + summary.replace("\n", "\n    "))
    print()
    print("prompt size on the final request; tokens estimated as characters / 4")
    print(f"{'':<34}{'history':>12}{'tool specs':>12}{'total':>12}")
    rows = [
        ("direct: 10 x read_file", direct, direct_specs),
        ("orchestrated: 1 x run_python", orchestrated, orchestrated_specs),
    ]
    for label, history, specs in rows:
        print(
            f"{label:<34}{tokens(history):>12,}{tokens(specs):>12,}{tokens(history + specs):>12,}"
        )
    saved = (direct + direct_specs) - (orchestrated + orchestrated_specs)
    share = saved / (direct + direct_specs)
    print(f"saved by orchestration: ~{tokens(saved):,} tokens ({share:.0%}) per later request")


if __name__ == "__main__":
    asyncio.run(main())
