"""`heron acp` driven by the Agent Client Protocol SDK's own client side, as an editor would:
a real subprocess on real pipes, a scripted model, the tools of `e2e_tools.py`."""

from __future__ import annotations

from typing import Any

from acp.schema import ToolCallStart

from support.acp_client import heron_acp
from support.cli import Heron

ECHO_TURNS: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"text": "hello editor"}}]},
    {"text": "The tool said hello.", "expect": {"last_role": "tool"}},
]


async def test_a_prompt_streams_the_tool_call_its_result_and_the_answer(heron: Heron) -> None:
    model = heron.script("script.yaml", ECHO_TURNS)
    workspace = heron.root / "project"
    workspace.mkdir()

    async with heron_acp(heron, "--model", model, "--tools", heron.tools()) as agent:
        session = await agent.new_session(workspace)
        stop = await agent.prompt(session, "say hello")

        editor = agent.editor
        assert stop == "end_turn"
        [steps] = editor.calls(session).values()
        start = steps[0]
        assert isinstance(start, ToolCallStart)
        assert (start.tool_call_id, start.status, start.kind) == ("c1", "pending", "read")
        assert start.title == "echo: text: hello editor"
        assert start.raw_input == {"text": "hello editor"}
        assert [s.status for s in steps] == ["pending", "in_progress", "completed"]
        assert steps[-1].content[0].content.text == "hello editor"
        assert editor.text(session) == "The tool said hello."
