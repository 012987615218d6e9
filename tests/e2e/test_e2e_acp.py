"""`heron acp` driven by the Agent Client Protocol SDK's own client side, as an editor would:
a real subprocess on real pipes, a scripted model, the tools of `e2e_tools.py`."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import secrets
import signal
from pathlib import Path
from typing import Any

import acp
import pytest
from acp.schema import (
    AgentPlanUpdate,
    AgentThoughtChunk,
    McpServerStdio,
    SseMcpServer,
    ToolCallStart,
)

from support.acp_client import heron_acp
from support.cli import TIMEOUT_S, Heron
from support.mcp_servers import probe_server

MAX = 1048576

DOCS = Path(__file__).resolve().parents[2] / "docs" / "acp.md"

ECHO_TURNS: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"text": "hello editor"}}]},
    {"text": "The tool said hello.", "expect": {"last_role": "tool"}},
]


async def test_a_prompt_streams_the_tool_call_its_result_and_the_answer(
    heron: Heron, workspace: Path
) -> None:
    model = heron.script("script.yaml", ECHO_TURNS)

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


PLAN = [
    {"text": "Read the notes", "status": "completed"},
    {"text": "Write the digest", "status": "in_progress"},
]
PLAN_TURNS: list[dict[str, Any]] = [
    {
        "reasoning": "A plan first.",
        "tool_calls": [{"id": "p1", "name": "update_plan", "arguments": {"plan": PLAN}}],
    },
    {"text": "Planned."},
]


async def test_the_models_plan_and_reasoning_reach_the_editor(
    heron: Heron, workspace: Path
) -> None:
    model = heron.script("script.yaml", PLAN_TURNS)

    async with heron_acp(heron, "--model", model, "--builtin", "planning") as agent:
        session = await agent.new_session(workspace)
        assert await agent.prompt(session, "plan it") == "end_turn"

        updates = agent.editor.of(session)
        [thought] = [u for u in updates if isinstance(u, AgentThoughtChunk)]
        assert thought.content.text == "A plan first."
        [plan] = [u for u in updates if isinstance(u, AgentPlanUpdate)]
        assert [(e.content, e.status) for e in plan.entries] == [
            ("Read the notes", "completed"),
            ("Write the digest", "in_progress"),
        ]
        start = next(u for u in updates if isinstance(u, ToolCallStart))
        assert (start.tool_call_id, start.kind) == ("p1", "think")
        assert agent.editor.status(session, "p1") == "completed"


WAIT_TURNS: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "w1", "name": "wait_forever", "arguments": {}}]},
    {"text": "Back again.", "expect": {"last_role": "user"}},
]


async def test_cancel_stops_the_running_tool_and_the_session_goes_on(
    heron: Heron, workspace: Path
) -> None:
    model = heron.script("script.yaml", WAIT_TURNS)

    async with heron_acp(heron, "--model", model, "--tools", heron.tools()) as agent:
        session = await agent.new_session(workspace)
        turn = asyncio.ensure_future(agent.prompt(session, "wait"))
        editor = agent.editor
        await editor.wait_for("w1 running", lambda: editor.status(session, "w1") == "in_progress")
        await agent.conn.cancel(session_id=session)
        assert await turn == "cancelled"

        [*_, ended] = editor.calls(session)["w1"]
        assert ended.status == "failed"
        assert ended.content[0].content.text == "[interrupted: cancelled while running]"
        assert ended.raw_output["phase"] == "cancelled_while_running"
        # The history stays valid: the next prompt runs on it.
        assert await agent.prompt(session, "still there?") == "end_turn"
        assert editor.text(session).endswith("Back again.")


async def test_bad_input_gets_a_json_rpc_error_and_the_agent_keeps_serving(
    heron: Heron, workspace: Path
) -> None:
    model = heron.script("script.yaml", ECHO_TURNS)

    heron.write("heron.toml", "[limits]\nmax_bytes = 1048576\n")  # the one limit, configured
    async with heron_acp(heron, "--model", model, "--tools", heron.tools()) as agent:
        editor = agent.editor
        await agent.write_raw(b"{this is not json\n")
        assert (await editor.error_response(-32700))["id"] is None
        await agent.write_raw(b'[{"jsonrpc": "2.0", "id": 1, "method": "initialize"}]\n')
        batch = await editor.error_response(-32600)
        assert "batch" in batch["error"]["message"]
        await agent.write_raw(b'{"jsonrpc": "2.0", "id": 2, "params": "' + b"x" * MAX + b'"}\n')
        oversized = await editor.error_response(-32600)
        assert f"longer than {MAX} bytes" in oversized["error"]["message"]
        deep = b"[" * 200 + b"]" * 200
        await agent.write_raw(
            b'{"jsonrpc": "2.0", "id": 3, "method": "x", "params": ' + deep + b"}\n"
        )
        assert "levels deep" in (await editor.error_response(-32600))["error"]["message"]
        await agent.write_raw(b'{"jsonrpc": "2.0", "id": 4, "method": "session/teleport"}\n')
        assert (await editor.error_response(-32601))["id"] == 4
        bad_prompt = {"jsonrpc": "2.0", "id": 5, "method": "session/prompt", "params": {"x": 1}}
        await agent.write_raw(json.dumps(bad_prompt).encode() + b"\n")
        assert (await editor.error_response(-32602))["id"] == 5
        nul_cwd = {"cwd": f"{workspace}\u0000x", "mcpServers": []}
        new_nul = {"jsonrpc": "2.0", "id": 6, "method": "session/new", "params": nul_cwd}
        await agent.write_raw(json.dumps(new_nul).encode() + b"\n")
        refused = await editor.error_response(-32602)
        assert (refused["id"], refused["error"]["message"]) == (6, "Invalid params")
        assert "NUL" in refused["error"]["data"]["message"]
        long_cwd = {"cwd": "/" + "a" * 5000, "mcpServers": []}
        new_long = {"jsonrpc": "2.0", "id": 7, "method": "session/new", "params": long_cwd}
        await agent.write_raw(json.dumps(new_long).encode() + b"\n")
        refused = await editor.error_response(-32602)
        assert refused["id"] == 7
        assert refused["error"]["data"]["message"].endswith("cannot be opened: File name too long")
        # Notifications have no id to answer: one that does not fit is dropped with a line.
        for method, params in [("session/cancel", {"sessionId": 7}), ("session/wave", {})]:
            note = {"jsonrpc": "2.0", "method": method, "params": params}
            await agent.write_raw(json.dumps(note).encode() + b"\n")

        # None of it stopped the agent: a session and a turn work as before.
        session = await agent.new_session(workspace)
        assert await agent.prompt(session, "say hello") == "end_turn"
        assert editor.status(session, "c1") == "completed"
        assert agent.process.returncode is None
        log = agent.log()
        assert "session/cancel: sessionId: Input should be a valid string" in log
        assert 'heron takes no notification "session/wave"' in log
        assert "Traceback" not in log


async def test_a_session_loaded_by_another_process_replays_its_history_and_goes_on(
    heron: Heron,
    workspace: Path,
) -> None:
    first = heron.script("first.yaml", ECHO_TURNS)
    later = heron.script("later.yaml", [{"text": "I remember.", "expect": {"last_role": "user"}}])
    tools = heron.tools()
    async with heron_acp(heron, "--model", first, "--tools", tools) as agent:
        session = await agent.new_session(workspace)
        assert await agent.prompt(session, "say hello") == "end_turn"
    listed = await asyncio.to_thread(heron.run, "sessions", "list")
    assert session in listed.stdout

    async with heron_acp(heron, "--model", later, "--tools", tools, log="later.log") as agent:
        await agent.conn.load_session(cwd=str(workspace), session_id=session, mcp_servers=[])
        editor = agent.editor
        kinds = [u.session_update for u in editor.of(session)]
        call = ["tool_call", "tool_call_update", "tool_call_update"]
        assert kinds == ["user_message_chunk", *call, "agent_message_chunk"]
        assert editor.of(session)[0].content.text == "say hello"
        assert editor.status(session, "c1") == "completed"
        assert editor.text(session) == "The tool said hello."

        assert await agent.prompt(session, "remember?") == "end_turn"
        assert editor.text(session) == "The tool said hello.I remember."


@pytest.mark.parametrize("how", ["end of input", "SIGTERM"])
async def test_an_editor_that_goes_away_mid_tool_leaves_a_valid_stored_session(
    heron: Heron, workspace: Path, how: str
) -> None:
    model = heron.script("script.yaml", WAIT_TURNS)

    async with heron_acp(heron, "--model", model, "--tools", heron.tools()) as agent:
        session = await agent.new_session(workspace)
        turn = asyncio.ensure_future(agent.prompt(session, "wait"))
        editor = agent.editor
        await editor.wait_for("w1 running", lambda: editor.status(session, "w1") == "in_progress")
        if how == "SIGTERM":  # the editor stops its agent
            agent.process.send_signal(signal.SIGTERM)
        else:  # the editor quit and its end of the pipe closed
            stdin = agent.process.stdin
            assert stdin is not None
            stdin.close()
        assert await asyncio.wait_for(agent.process.wait(), TIMEOUT_S) == 0
        with pytest.raises(ConnectionError):
            await turn

    exported = await asyncio.to_thread(heron.run, "sessions", "export", session)
    assert exported.code == 0, exported.stderr
    messages = [json.loads(line)["message"] for line in exported.stdout.splitlines()]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[2]["call_id"] == "w1"
    assert messages[2]["content"] == "[interrupted: cancelled while running]"


async def test_the_scripted_example_of_the_docs_runs_as_shown(
    heron: Heron, workspace: Path
) -> None:
    page = DOCS.read_text(encoding="utf-8")
    [script] = re.findall(r"```yaml\n# script.yaml\n(.*?)```", page, flags=re.S)
    heron.write("script.yaml", script)
    (workspace / "README.md").write_text("# A project\n", encoding="utf-8")
    args = ("--model", "scripted:script.yaml", "--builtin", "perception", "--builtin", "planning")

    async with heron_acp(heron, *args) as agent:
        session = await agent.new_session(workspace)
        assert await agent.prompt(session, "summarise the README") == "end_turn"

        editor = agent.editor
        [plan] = [u for u in editor.of(session) if isinstance(u, AgentPlanUpdate)]
        assert [e.status for e in plan.entries] == ["in_progress", "pending"]
        [plan_steps, read_steps] = editor.calls(session).values()
        assert [s.status for s in plan_steps][-1] == "completed"
        assert read_steps[0].kind == "read"
        assert read_steps[0].locations[0].path == str(workspace / "README.md")
        assert "# A project" in read_steps[-1].content[0].content.text
        assert editor.text(session) == "I read the README."


REVEAL_TOOLS = '''
import os

from heron import tool


@tool(read_only=True)
def reveal_key() -> str:
    """Say the provider key heron runs with."""
    return "the key is " + os.environ["OPENAI_API_KEY"]
'''


async def test_attached_files_join_the_prompt_and_a_known_secret_reaches_no_message_or_store(
    heron: Heron,
    workspace: Path,
) -> None:
    key = "canary-key-" + secrets.token_hex(10)
    heron.env["OPENAI_API_KEY"] = key  # known to heron; the scripted model never uses it
    heron.write("secret_tools.py", REVEAL_TOOLS)
    turns = [
        {"tool_calls": [{"id": "r1", "name": "reveal_key", "arguments": {}}]},
        {"text": "Done.", "expect": {"last_message_contains": "«secret:OPENAI_API_KEY»"}},
    ]
    model = heron.script("script.yaml", turns)
    notes = workspace / "notes" / "todo.md"
    prompt = [
        acp.text_block(f"my key is {key}; see the files"),
        acp.resource_block(acp.embedded_text_resource(notes.as_uri(), f"- rotate {key}\n")),
        acp.resource_link_block("spec", (workspace / "spec.md").as_uri()),
    ]

    async with heron_acp(heron, "--model", model, "--tools", "secret_tools.py") as agent:
        session = await agent.new_session(workspace)
        response = await agent.conn.prompt(session_id=session, prompt=prompt)
        assert response.stop_reason == "end_turn"
        assert agent.editor.status(session, "r1") == "completed"
        sent = json.dumps(agent.editor.raw, ensure_ascii=False)
        assert "«secret:OPENAI_API_KEY»" in sent  # the tool's result, as the model saw it
        assert key not in sent

    exported = await asyncio.to_thread(heron.run, "sessions", "export", session)
    [user, *_] = [json.loads(line)["message"] for line in exported.stdout.splitlines()]
    assert user["content"] == (
        "my key is «secret:OPENAI_API_KEY»; see the files\n\n"
        "Attached file notes/todo.md:\n```\n- rotate «secret:OPENAI_API_KEY»\n```\n\n"
        "[the user refers to file spec.md]"
    )
    stored = [
        p for p in heron.state_dir.rglob("*") if p.is_file() and key.encode() in p.read_bytes()
    ]
    assert stored == []


async def test_the_editors_stdio_mcp_server_joins_the_sessions_tools(
    heron: Heron, workspace: Path
) -> None:
    turns = [
        {
            "tool_calls": [{"id": "a1", "name": "probe__add", "arguments": {"a": 2, "b": 3}}],
            "expect": {"tools_include": ["probe__add"]},
        },
        {"text": "Added.", "expect": {"last_role": "tool"}},
    ]
    model = heron.script("script.yaml", turns)
    server = probe_server()
    editors = [
        McpServerStdio(name="probe", command=server["command"], args=server["args"], env=[]),
        SseMcpServer(type="sse", name="old", url="http://127.0.0.1:9/sse", headers=[]),
    ]

    async with heron_acp(heron, "--model", model, "--autonomy", "full") as agent:
        response = await agent.conn.new_session(cwd=str(workspace), mcp_servers=editors)
        session = response.session_id
        assert await agent.prompt(session, "add 2 and 3") == "end_turn"

        [*_, ended] = agent.editor.calls(session)["a1"]
        assert ended.status == "completed"
        assert '"total": 5' in ended.content[0].content.text
        assert "mcp server 'old' of the editor: heron connects stdio and HTTP" in agent.log()


async def test_requests_heron_cannot_serve_are_refused_with_the_reason(
    heron: Heron, workspace: Path
) -> None:
    model = heron.script("script.yaml", WAIT_TURNS)

    async with heron_acp(heron, "--model", model, "--tools", heron.tools()) as agent:
        conn = agent.conn
        refusals = {
            "relative": conn.new_session(cwd="project", mcp_servers=[]),
            "missing": conn.new_session(cwd=str(heron.root / "nowhere"), mcp_servers=[]),
            "holds state": conn.new_session(cwd=str(heron.root), mcp_servers=[]),
            "unknown": conn.load_session(cwd=str(workspace), session_id="nope", mcp_servers=[]),
            "no session": conn.prompt(session_id="nope", prompt=[acp.text_block("hi")]),
        }
        messages = {}
        for what, request in refusals.items():
            with pytest.raises(acp.RequestError) as refused:
                await request
            assert refused.value.code == -32602, what
            messages[what] = str(refused.value.data)
        assert "absolute path" in messages["relative"]
        assert "not a directory" in messages["missing"]
        assert "state directory" in messages["holds state"]
        assert "no session named 'nope'" in messages["unknown"]
        assert "load it first" in messages["no session"]

        session = await agent.new_session(workspace)
        turn = asyncio.ensure_future(agent.prompt(session, "wait"))
        editor = agent.editor
        await editor.wait_for("w1 running", lambda: editor.status(session, "w1") == "in_progress")
        with pytest.raises(acp.RequestError) as busy:
            await agent.prompt(session, "and another")
        assert busy.value.code == -32600
        assert "already running" in str(busy.value.data)
        await conn.cancel(session_id=session)
        assert await turn == "cancelled"


async def test_two_sessions_run_side_by_side_each_with_its_own_updates(
    heron: Heron, workspace: Path
) -> None:
    waiting = heron.script("wait.yaml", WAIT_TURNS)

    async with heron_acp(heron, "--model", waiting, "--tools", heron.tools()) as agent:
        first = await agent.new_session(workspace)
        second = await agent.new_session(workspace)
        editor = agent.editor
        turns = [asyncio.ensure_future(agent.prompt(s, "wait")) for s in (first, second)]
        for session in (first, second):
            await editor.wait_for("w1", lambda s=session: editor.status(s, "w1") == "in_progress")
        await agent.conn.cancel(session_id=first)
        assert await turns[0] == "cancelled"
        assert editor.status(second, "w1") == "in_progress"  # the other turn runs on
        await agent.conn.cancel(session_id=second)
        assert await turns[1] == "cancelled"
        assert {s for s, _ in editor.updates} == {first, second}


async def test_an_image_in_the_prompt_is_stored_with_the_users_message(
    heron: Heron, workspace: Path
) -> None:
    model = heron.script("script.yaml", [{"text": "A pixel.", "expect": {"last_role": "user"}}])
    pixel = base64.b64encode(b"\x89PNG\r\n\x1a\n a tiny picture").decode()

    async with heron_acp(heron, "--model", model) as agent:
        session = await agent.new_session(workspace)
        with pytest.raises(acp.RequestError) as refused:
            await agent.conn.prompt(
                session_id=session, prompt=[acp.image_block("not base64!", "image/png")]
            )
        assert refused.value.code == -32602
        assert "not valid base64" in str(refused.value.data)
        prompt = [acp.text_block("what is this?"), acp.image_block(pixel, "image/png")]
        response = await agent.conn.prompt(session_id=session, prompt=prompt)
        assert response.stop_reason == "end_turn"

    exported = await asyncio.to_thread(heron.run, "sessions", "export", session)
    [user, _answer] = [json.loads(line)["message"] for line in exported.stdout.splitlines()]
    assert user["content"] == "what is this?"
    [image] = user["media"]
    assert (image["kind"], image["name"], image["mime_type"], image["data"]) == (
        "image",
        "image-1.png",
        "image/png",
        pixel,
    )
