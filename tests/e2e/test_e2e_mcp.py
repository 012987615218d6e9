"""MCP through the real `heron` command: `heron run` with deferred MCP tools of the reference
server, and the operator commands `heron mcp tools|call|import|status|approve|revoke|trifecta`
plus `heron doctor`, against real stdio servers."""

from __future__ import annotations

import json

from support.cli import Heron, assert_one_result_per_call, stable
from support.mcp_servers import npm_bin, probe_server


def toml_list(values: list[str]) -> str:
    return json.dumps(values)


def everything_toml(heron: Heron, extra: str = "") -> None:
    binary = npm_bin("mcp-server-everything")
    heron.write(
        "heron.toml",
        f"""[agent]
autonomy = "full"

[mcp]
exposure = "deferred"

[mcp.servers.everything]
command = {json.dumps(str(binary))}
args = ["stdio"]
{extra}""",
    )


def probe_toml(heron: Heron, note: str) -> None:
    server = probe_server()
    heron.write(
        "heron.toml",
        f"""[agent]
autonomy = "full"

[mcp.servers.probe]
command = {json.dumps(server["command"])}
args = {toml_list(server["args"])}
env = {{ PROBE_NOTE = {json.dumps(note)} }}
""",
    )


def test_heron_run_loads_a_deferred_tool_with_tool_search_and_calls_it(heron: Heron) -> None:
    everything_toml(heron)
    model = heron.script(
        "script.yaml",
        [
            {
                "tool_calls": [
                    {"id": "s1", "name": "tool_search", "arguments": {"query": "echo a message"}}
                ],
                "expect": {"tools_include": ["tool_search"], "tools_exclude": ["everything__echo"]},
            },
            {
                "tool_calls": [
                    {"id": "e1", "name": "everything__echo", "arguments": {"message": "hello"}}
                ],
                "expect": {"tools_include": ["everything__echo"]},
            },
            {"text": "It said hello.", "expect": {"last_message_contains": "Echo: hello"}},
        ],
    )
    done = heron.run("run", "Echo hello", "--model", model, "--events", "jsonl")

    assert done.code == 0, done.stderr
    assert done.stderr == ""
    events = done.events()
    assert_one_result_per_call(events)
    search = next(e for e in events if e["type"] == "tool_result" and e["id"] == "s1")
    assert search["status"] == "ok"
    assert search["output"].startswith("Loaded ")
    assert '"name": "everything__echo"' in search["output"]
    kept = [
        {k: v for k, v in e.items() if k != "output" or e["id"] != "s1"} for e in stable(events)
    ]
    assert kept == [
        {
            "type": "tool_call",
            "id": "s1",
            "name": "tool_search",
            "arguments": {"query": "echo a message"},
            "owner": "builtin",
            "injected": [],
        },
        {
            "type": "tool_result",
            "id": "s1",
            "name": "tool_search",
            "success": True,
            "status": "ok",
            "cached": False,
            "data": {
                # "message" is a word of the second tool's name: a hit in a small catalogue.
                "listed": ["everything__echo", "everything__get-annotated-message"],
                "activated": ["everything__echo", "everything__get-annotated-message"],
                "not_found": [],
                "suggestions": [],
                "nothing_found": False,
                "skills": [],
                "loaded": ["everything__echo", "everything__get-annotated-message"],
            },
        },
        {
            "type": "tool_call",
            "id": "e1",
            "name": "everything__echo",
            "arguments": {"message": "hello"},
            "owner": "mcp:everything",
            "injected": [],
        },
        {
            "type": "tool_result",
            "id": "e1",
            "name": "everything__echo",
            "success": True,
            "status": "ok",
            "output": "Echo: hello",
            "cached": False,
        },
        {"type": "text_delta", "text": "It said hello."},
        {"type": "final", "text": "It said hello.", "reason": "answer"},
    ]


def test_mcp_tools_call_status_trifecta_and_doctor_on_the_reference_server(heron: Heron) -> None:
    everything_toml(heron)

    tools = heron.run("mcp", "tools", "--json")
    assert tools.code == 0, tools.stderr
    listed = {t["name"]: t for t in json.loads(tools.stdout)}
    assert {"everything__echo", "everything__get-sum"} <= set(listed)
    assert listed["everything__get-sum"]["hints"]["readOnlyHint"] is True

    called = heron.run("mcp", "call", "everything__get-sum", '{"a": 2, "b": 3}')
    assert (called.code, called.stdout) == (0, "The sum of 2 and 3 is 5.\n"), called.stderr
    wrong = heron.run("mcp", "call", "everything__get-sum", '{"a": "two"}')
    assert wrong.code == 2 and "invalid arguments" in wrong.stderr
    missing = heron.run("mcp", "call", "everything__nope")
    assert missing.code == 2 and "has no tool 'nope'" in missing.stderr

    status = heron.run("mcp", "status")
    assert status.code == 0, status.stdout + status.stderr
    assert status.stdout.startswith("everything  running  stdio  mcp-servers/everything/")

    trifecta = heron.run("mcp", "trifecta")
    assert trifecta.code == 1, trifecta.stderr
    assert "Lethal trifecta: this tool set can read private data" in trifecta.stdout

    doctor = heron.run("doctor")
    assert doctor.code == 0, doctor.stdout
    assert "[ok  ] mcp: 1 server(s) listed" in doctor.stdout
    assert "[warn] lethal trifecta: Lethal trifecta:" in doctor.stdout


def test_mcp_import_converts_mcp_servers_json_and_heron_then_uses_them(heron: Heron) -> None:
    server = probe_server()
    heron.write(
        "claude_desktop_config.json",
        json.dumps(
            {
                "mcpServers": {
                    "probe": {**server, "disabledTools": ["crash"]},
                    "tickets": {"type": "http", "url": "http://127.0.0.1:9/mcp", "timeout": 60},
                }
            }
        ),
    )
    heron.write("heron.toml", '[agent]\nautonomy = "full"\n')

    printed = heron.run("mcp", "import", "claude_desktop_config.json")
    assert printed.code == 0, printed.stderr
    assert printed.stdout == (
        "[mcp.servers.probe]\n"
        f"command = {json.dumps(server['command'])}\n"
        f"args = {toml_list(server['args'])}\n"
        'disabled_tools = ["crash"]\n'
        "\n"
        "[mcp.servers.tickets]\n"
        'url = "http://127.0.0.1:9/mcp"\n'
        "timeout_s = 60.0\n"
    )
    assert (heron.root / "heron.toml").read_text() == '[agent]\nautonomy = "full"\n'

    written = heron.run("mcp", "import", "claude_desktop_config.json", "--write")
    assert written.code == 0, written.stderr
    assert "added 2 MCP server(s)" in written.stdout
    assert (heron.root / "heron.toml").read_text().startswith('[agent]\nautonomy = "full"\n\n')
    again = heron.run("mcp", "import", "claude_desktop_config.json", "--write")
    assert again.code == 2 and "already configures 'probe', 'tickets'" in again.stderr

    called = heron.run("mcp", "call", "probe__add", '{"a": 1, "b": 2}', "--json")
    assert called.code == 0, called.stderr
    assert json.loads(called.stdout)["data"] == {"total": 3}
    disabled = heron.run("mcp", "call", "probe__crash")
    assert disabled.code == 2 and "has no tool 'crash'" in disabled.stderr

    heron.write("sse.json", json.dumps({"mcpServers": {"old": {"type": "sse", "url": "x"}}}))
    sse = heron.run("mcp", "import", "sse.json")
    assert sse.code == 2 and "transport 'sse' is not supported" in sse.stderr


def test_a_changed_server_is_refused_until_approved_after_showing_the_diff(heron: Heron) -> None:
    probe_toml(heron, "")
    first = heron.run("mcp", "call", "probe__pid")
    assert first.code == 0, first.stderr
    assert "approved" in heron.run("mcp", "list").stdout

    probe_toml(heron, " It also reads your notes.")
    refused = heron.run("mcp", "call", "probe__pid")
    assert refused.code == 1
    assert "changed since it was approved" in refused.stderr
    assert "tool changed: pid (description)" in refused.stderr
    assert "heron mcp approve probe" in refused.stderr
    # `heron run` offers the approved definitions (from the pin); the call is refused.
    model = heron.script(
        "script.yaml",
        [
            {"tool_calls": [{"id": "p1", "name": "probe__pid", "arguments": {}}]},
            {"text": "Refused.", "expect": {"last_message_contains": "heron mcp approve probe"}},
        ],
    )
    run = heron.run("run", "pid?", "--model", model, "--events", "jsonl")
    assert run.code == 0, run.stderr
    result = next(e for e in run.events() if e["type"] == "tool_result")
    assert (result["status"], result["success"]) == ("error", False)
    assert "changed since it was approved" in result["output"]

    approved = heron.run("mcp", "approve", "probe")
    assert approved.code == 0, approved.stderr
    out = approved.stdout
    assert "pin: CHANGED since it was approved" in out
    assert "  - tool changed: pid (description)" in out
    assert '-  "description": "Report the process id of this server.",' in out
    assert '+  "description": "Report the process id of this server. It also reads your' in out
    assert "approved probe: 5 tools pinned" in out

    after = heron.run("mcp", "call", "probe__pid")
    assert after.code == 0, after.stderr
    assert after.stdout.strip().isdigit()
    unchanged = heron.run("mcp", "approve", "probe")
    assert "already approved as it is" in unchanged.stdout

    revoked = heron.run("mcp", "revoke", "probe")
    assert revoked.code == 0 and "revoked the pin of probe" in revoked.stdout
    twice = heron.run("mcp", "revoke", "probe")
    assert twice.code == 1 and "'probe' has no pin" in twice.stderr


def test_a_server_with_injected_instructions_is_refused_and_scan_shows_why(heron: Heron) -> None:
    server = probe_server("injected")
    heron.write(
        "heron.toml",
        f"""[mcp.servers.dict]
command = {json.dumps(server["command"])}
args = {toml_list(server["args"])}
""",
    )
    tools = heron.run("mcp", "tools")
    assert tools.code == 1
    assert "look like prompt injection" in tools.stderr
    assert "heron mcp approve dict" in tools.stderr

    scan = heron.run("mcp", "scan")
    assert scan.code == 1, scan.stderr
    assert "[high] dict__define: description asks for secrets" in scan.stdout
    assert "~/.ssh/id_rsa" in scan.stdout
    assert "not approved" in heron.run("mcp", "list").stdout
