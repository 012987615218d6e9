"""`heron mcp serve` seen through the official SDK's own client, and `heron run --builtin`.

Over Streamable HTTP the SDK's `Client` negotiates the 2026-07-28 protocol, so approvals travel
as `input_required` rounds whose request state the server seals; the `ClientSession` tests speak
the 2025 protocol."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from heron._support.limits import input_limits
from support.cli import HERON, TIMEOUT_S, Heron, assert_one_result_per_call

MAX = input_limits().max_bytes
"""`[limits] max_bytes` by default: the body limit of `heron mcp serve --transport http`."""


def _env(root: Path) -> dict[str, str]:
    return {
        **os.environ,
        "HERON_STATE_DIR": str(root / "state"),
        "XDG_CONFIG_HOME": str(root / "xdg-config"),
    }


def _text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


@contextmanager
def _http_server(root: Path, *flags: str) -> Iterator[str]:
    """`heron mcp serve ... --transport http --port 0`; yields the URL it announces."""
    proc = subprocess.Popen(
        [*HERON, "mcp", "serve", *flags, "--transport", "http", "--port", "0"],
        cwd=root,
        env=_env(root),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        line = lines.get(timeout=TIMEOUT_S)
        assert line is not None and "MCP server at " in line, line
        yield line.split("MCP server at ", 1)[1].strip()
    finally:
        proc.terminate()
        proc.wait(TIMEOUT_S)
        reader.join(TIMEOUT_S)
        if proc.stderr is not None:
            proc.stderr.close()


async def test_stdio_perception_server_lists_annotated_tools_and_reads_and_greps(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("alpha\nneedle here\nomega\n", encoding="utf-8")
    # A pattern Python's re would backtrack on for days over the first line.
    (ws / "trap.txt").write_text("a" * 40 + "!\n" + "a" * 8 + "\n", encoding="utf-8")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "heron.cli.main", "mcp", "serve", "perception", "--workspace", str(ws)],
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = {t.name: t for t in (await session.list_tools()).tools}
        read_file = await session.call_tool("read_file", {"path": "notes.txt"})
        grep = await session.call_tool("grep_files", {"pattern": "needle"})
        trap = await session.call_tool("grep_files", {"pattern": "(a+)+$", "path": "trap.txt"})

    assert {"read_file", "list_dir", "grep_files", "read_artifact"} <= set(listed)
    assert not {"write_file", "shell"} & set(listed)
    hints = listed["read_file"].annotations
    assert hints is not None
    assert (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint) == (
        True,
        False,
        True,
    )
    assert listed["fetch_url"].annotations is not None
    assert listed["fetch_url"].annotations.open_world_hint is True
    assert "path" in listed["read_file"].input_schema["properties"]
    assert not read_file.is_error and "needle here" in _text(read_file)
    assert not grep.is_error and "notes.txt" in _text(grep) and "needle" in _text(grep)
    assert not trap.is_error and "trap.txt:2: aaaaaaaa" in _text(trap), _text(trap)


async def test_http_execution_server_writes_then_reads_and_failures_are_errors(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    flags = ("perception", "execution", "--workspace", str(ws), "--autonomy", "full")
    with _http_server(tmp_path, *flags) as url:
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            listed = {t.name: t for t in (await session.list_tools()).tools}
            wrote = await session.call_tool("write_file", {"path": "out.txt", "content": "hi\n"})
            back = await session.call_tool("read_file", {"path": "out.txt"})
            missing = await session.call_tool("read_file", {"path": "nope.txt"})
            invalid = await session.call_tool("write_file", {"path": "x.txt", "bogus": 1})

    delete = listed["delete_path"].annotations
    assert delete is not None and delete.destructive_hint is True and not delete.read_only_hint
    assert not wrote.is_error, _text(wrote)
    assert (ws / "out.txt").read_text(encoding="utf-8") == "hi\n"
    assert not back.is_error and "hi" in _text(back)
    assert missing.is_error and "nope.txt" in _text(missing)
    assert invalid.is_error and "invalid arguments" in _text(invalid)
    assert not (ws / "x.txt").exists()


async def test_supervised_server_refuses_calls_that_need_approval(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with _http_server(tmp_path, "execution", "--workspace", str(ws)) as url:
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            refused = await session.call_tool("write_file", {"path": "a.txt", "content": "x"})

    assert refused.is_error
    assert "needs approval" in _text(refused) and "denied it by policy" in _text(refused)
    assert not (ws / "a.txt").exists()


async def test_http_server_asks_the_client_to_approve_and_runs_only_on_yes(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    decisions = iter(["yes", "no"])
    asked: list[str] = []

    async def elicit(_ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"decision": next(decisions)})

    with _http_server(tmp_path, "execution", "--workspace", str(ws)) as url:
        async with Client(url, elicitation_callback=elicit) as client:
            approved = await client.call_tool("write_file", {"path": "a.txt", "content": "x"})
            refused = await client.call_tool("write_file", {"path": "b.txt", "content": "y"})

    assert not approved.is_error, _text(approved)
    assert (ws / "a.txt").read_text(encoding="utf-8") == "x"
    assert refused.is_error and "Denied by the operator" in _text(refused)
    assert not (ws / "b.txt").exists()
    assert len(asked) == 2 and asked[0].startswith("heron wants to run write_file")


async def test_http_server_links_a_large_output_and_serves_it_page_by_page(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "long.txt").write_text("".join(f"row {i}\n" for i in range(1, 701)), encoding="utf-8")
    with _http_server(tmp_path, "perception", "--workspace", str(ws)) as url:
        async with Client(url) as client:
            result = await client.call_tool("read_file", {"path": "long.txt", "limit": 700})
            links = [c for c in result.content if isinstance(c, types.ResourceLink)]
            assert len(links) == 1, _text(result)
            listed = await client.list_resources()
            first = (await client.read_resource(links[0].uri)).contents[0]
            assert isinstance(first, types.TextResourceContents) and first.meta is not None
            second = (await client.read_resource(first.meta["heron/next"])).contents[0]
            assert isinstance(second, types.TextResourceContents)

    assert "saved as artifact art_" in _text(result)
    assert [r.uri for r in listed.resources] == [links[0].uri]
    assert first.meta["heron/lines"] == "1-200" and first.meta["heron/total_lines"] > 700
    assert "row 1" in first.text and "row 199" in first.text and "row 250" not in first.text
    assert second.meta is not None and second.meta["heron/lines"] == "201-400"


def test_run_with_builtin_sets_reads_and_edits_a_file(heron: Heron) -> None:
    ws = heron.root / "project"
    ws.mkdir()
    (ws / "app.txt").write_text("colour = red\n", encoding="utf-8")
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "r1", "name": "read_file", "arguments": {"path": "app.txt"}}]},
        {
            "expect": {"last_message_contains": "colour = red"},
            "tool_calls": [
                {
                    "id": "e1",
                    "name": "edit_file",
                    "arguments": {"path": "app.txt", "old_string": "red", "new_string": "blue"},
                }
            ],
        },
        {"text": "Changed the colour."},
    ]
    done = heron.run(
        "run",
        "make it blue",
        "--model",
        heron.script("script.yaml", turns),
        "--events",
        "jsonl",
        "--builtin",
        "perception",
        "--builtin",
        "execution",
        "--workspace",
        str(ws),
        "--autonomy",
        "full",
    )

    assert done.code == 0, done.stderr
    events = done.events()
    assert_one_result_per_call(events)
    results = {e["id"]: e for e in events if e["type"] == "tool_result"}
    assert results["r1"]["success"] and results["e1"]["success"], results
    assert (ws / "app.txt").read_text(encoding="utf-8") == "colour = blue\n"
    assert events[-1] == {**events[-1], "type": "final", "text": "Changed the colour."}


def test_served_calls_follow_heron_toml_and_land_in_the_execution_audit(tmp_path: Path) -> None:
    """One configuration, one behaviour: the result bound and the loop detector of heron.toml
    apply to a client's calls as to the agent's, and each call is in `heron audit`."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "big.txt").write_text("".join(f"line {i:03} " + "x" * 90 + "\n" for i in range(40)))
    (tmp_path / "heron.toml").write_text(
        "[agent]\nmax_tool_result_chars = 400\n\n[loop_detection]\nmax_repeats = 2\n",
        encoding="utf-8",
    )
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "heron.cli.main", "mcp", "serve", "perception", "--workspace", str(ws)],
        env=_env(tmp_path),
        cwd=tmp_path,
    )

    async def three_reads() -> list[types.CallToolResult]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return [await session.call_tool("read_file", {"path": "big.txt"}) for _ in range(3)]

    calls = asyncio.run(three_reads())
    first, second, third = (_text(c) for c in calls)

    assert not calls[0].is_error and "characters omitted by heron's tool-result limit" in first
    assert "line 000" in first and "line 039" in first and "line 020" not in first
    assert len(first) < 600, len(first)
    # max_repeats = 2 (default 3): the second identical call warns, the third is withheld.
    assert "[heron loop detector]" in second and "2 times in a row" in second
    assert third.startswith("[heron loop detector: result withheld]")
    audited = subprocess.run(
        [*HERON, "audit", "--json", "--session", "mcp:heron-perception"],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=True,
    )
    rows = [json.loads(line) for line in audited.stdout.splitlines()]
    seen = [(r["tool"], r["status"], r["channel"]) for r in rows]
    assert seen == [("read_file", "ok", "mcp")] * 3
    assert {r["operator"] for r in rows} == {"mcp:stdio"}
    assert all('"big.txt"' in r["arguments"] for r in rows)


def test_http_server_refuses_a_body_over_the_input_limit_before_reading_it(
    tmp_path: Path,
) -> None:
    with _http_server(tmp_path, "perception") as url:
        message = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x" * MAX}}
        headers = {"Accept": "application/json, text/event-stream"}
        over = httpx.post(url, json=message, headers=headers, trust_env=False, timeout=TIMEOUT_S)
        fine = httpx.post(url, content=b"{}", headers=headers, trust_env=False, timeout=TIMEOUT_S)
    assert (over.status_code, over.json()) == (
        413,
        {"status": "invalid", "error": "body too large"},
    )
    assert fine.status_code != 413  # the server goes on (the SDK answers a non-message itself)
