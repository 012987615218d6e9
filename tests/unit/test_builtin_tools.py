"""Built-in tool sets from configuration, and the MCP tool server's lifecycle."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from heron.config import HeronConfig
from heron.config.builtin import Builtin, BuiltinConfig, BuiltinError, build_builtin
from heron.mcp.server import ToolServer, mcp_annotations
from heron.tools.definition import ToolResult
from heron.turn.approval import ApprovalManager, ApprovalPolicy
from heron.turn.approval_audit import MemoryAuditStore

PERCEPTION = {
    "read_file",
    "list_dir",
    "find_files",
    "grep_files",
    "fetch_url",
    "web_search",
    "read_artifact",
    "grep_artifact",
    "read_document",
}
EXECUTION = {
    "write_file",
    "edit_file",
    "move_path",
    "copy_path",
    "delete_path",
    "download_file",
    "shell",
    "run_python",
}


async def _build(tmp_path: Path, **fields: object) -> Builtin:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    cfg = BuiltinConfig.model_validate({"workspace": str(ws), **fields})
    return await build_builtin(cfg, state_dir=tmp_path / "state")


def _names(built: Builtin, name: str) -> set[str]:
    return {t.spec.name for t in built.tools[name]}  # type: ignore[index]


def test_the_default_configuration_names_no_builtin_set() -> None:
    assert HeronConfig().tools.builtin.sets == []


async def test_perception_and_execution_bundles_hold_exactly_their_tools(tmp_path: Path) -> None:
    built = await _build(tmp_path, sets=["execution", "perception"])
    try:
        assert list(built.tools) == ["execution", "perception"]
        assert _names(built, "perception") == PERCEPTION
        assert _names(built, "execution") == EXECUTION
        assert all(t.spec.annotations.read_only for t in built.tools["perception"])
        assert not any(t.spec.annotations.read_only for t in built.tools["execution"])
        assert built.workspace == (tmp_path / "ws").resolve()
    finally:
        await built.aclose()


async def test_send_mail_joins_execution_only_with_a_mail_section(tmp_path: Path) -> None:
    mail = {"host": "127.0.0.1", "port": 2525, "from_addr": "agent@example.org"}
    built = await _build(tmp_path, sets=["execution"], mail=mail)
    try:
        assert _names(built, "execution") == EXECUTION | {"send_mail"}
    finally:
        await built.aclose()


async def test_without_network_the_web_tools_are_left_out_and_process_sandbox_is_refused(
    tmp_path: Path,
) -> None:
    built = await _build(tmp_path, sets=["perception", "connectors"], network=False)
    try:
        assert _names(built, "perception") == PERCEPTION - {"fetch_url", "web_search"}
        # ocr_image comes with Debian's tesseract, which the test set-up installs.
        assert _names(built, "connectors") == {"read_spreadsheet", "write_spreadsheet", "ocr_image"}
    finally:
        await built.aclose()
    with pytest.raises(BuiltinError, match="sandbox"):
        await _build(tmp_path, sets=["execution"], network=False)


async def test_a_knowledge_folder_adds_knowledge_search_and_a_missing_one_is_an_error(
    tmp_path: Path,
) -> None:
    (tmp_path / "ws" / "kb").mkdir(parents=True)
    built = await _build(tmp_path, sets=["perception"], knowledge={"folder": "kb"})
    try:
        assert "knowledge_search" in _names(built, "perception")
    finally:
        await built.aclose()
    with pytest.raises(BuiltinError, match=r"knowledge\.folder"):
        await _build(tmp_path, sets=["perception"], knowledge={"folder": "absent"})


async def test_connectors_and_events_bundles(tmp_path: Path) -> None:
    built = await _build(tmp_path, sets=["connectors", "events"])
    try:
        assert {"weather_forecast", "read_spreadsheet", "browser_navigate"} <= _names(
            built, "connectors"
        )
        assert _names(built, "events") == {
            "start_job",
            "job_status",
            "job_output",
            "cancel_job",
            "list_jobs",
            "set_timer",
            "cancel_timer",
            "list_timers",
            "monitor_shell",
            "subscribe",
            "unsubscribe",
            "list_subscriptions",
        }
    finally:
        await built.aclose()


def test_unknown_builtin_keys_and_sets_are_rejected() -> None:
    with pytest.raises(ValueError, match="extra"):
        BuiltinConfig.model_validate({"sets": ["perception"], "colour": "red"})
    with pytest.raises(ValueError, match="sets"):
        BuiltinConfig.model_validate({"sets": ["everything"]})


async def test_mcp_hints_follow_heron_annotations(tmp_path: Path) -> None:
    built = await _build(tmp_path, sets=["perception", "execution"])
    try:
        specs = {t.spec.name: t.spec for t in built.all_tools()}
    finally:
        await built.aclose()
    read = mcp_annotations(specs["read_file"])
    assert (read.read_only_hint, read.destructive_hint, read.idempotent_hint) == (True, False, True)
    delete = mcp_annotations(specs["delete_path"])
    assert (delete.read_only_hint, delete.destructive_hint) == (False, True)
    assert mcp_annotations(specs["fetch_url"]).open_world_hint is True
    assert mcp_annotations(specs["edit_file"]).destructive_hint is False


def _server(built: Builtin, autonomy: str, audit: MemoryAuditStore | None = None) -> ToolServer:
    approval = ApprovalManager(
        policy=ApprovalPolicy(autonomy=autonomy),  # type: ignore[arg-type]
        audit=audit or MemoryAuditStore(),
    )
    return ToolServer(built.all_tools(), approval=approval, workspace=built.workspace)


async def test_server_refuses_unapprovable_calls_and_runs_them_under_full_autonomy(
    tmp_path: Path,
) -> None:
    built = await _build(tmp_path, sets=["perception", "execution"])
    target = built.workspace / "made.txt"
    audit = MemoryAuditStore()
    try:
        refused, _ = await _server(built, "supervised", audit).call(
            "write_file", {"path": "made.txt", "content": "x"}
        )
        assert not refused.success and "denied it by policy" in (refused.error or "")
        assert not target.exists()
        assert [e.decision for e in audit.list()] == ["policy_deny"]

        full = _server(built, "full")
        wrote, _ = await full.call("write_file", {"path": "made.txt", "content": "x"})
        shell, _ = await full.call("shell", {"command": "cat made.txt"})
        assert wrote.success and target.read_text(encoding="utf-8") == "x"
        assert shell.success and "x" in shell.output
    finally:
        await built.aclose()


async def test_server_validates_strictly_and_scopes_read_only_autonomy(tmp_path: Path) -> None:
    built = await _build(tmp_path, sets=["perception", "execution"])
    try:
        read_only = _server(built, "read-only")
        assert set(read_only.tools) == PERCEPTION
        bad, _ = await read_only.call("read_file", {"path": "a", "colour": "red"})
        absent, _ = await read_only.call("write_file", {"path": "a", "content": ""})
        assert not bad.success and "invalid arguments" in (bad.error or "")
        assert not absent.success and "no tool named 'write_file'" in (absent.error or "")
    finally:
        await built.aclose()


def test_results_become_text_structured_content_and_is_error() -> None:
    ok = ToolServer.to_mcp(ToolResult.ok("done", data={"n": 1}), receipt="r")
    failed = ToolServer.to_mcp(ToolResult.fail("broken", output="partial"))
    listed = ToolServer.to_mcp(ToolResult.ok("", data=[1, 2]))

    assert ok.content[0].text == "done" and ok.structured_content == {"n": 1}  # type: ignore[union-attr]
    assert not ok.is_error and ok.meta == {"heron/receipt": "r"}
    assert failed.is_error and failed.content[0].text == "broken\npartial"  # type: ignore[union-attr]
    assert listed.structured_content is None and listed.content[0].text == "(no output)"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("fields", "network"),
    [({}, "network none"), ({"command_network": {"execution": "host"}}, "network host")],
)
async def test_command_network_is_per_set_and_named_in_the_shell_results_sandbox_line(
    tmp_path: Path, fields: dict[str, object], network: str
) -> None:
    from heron import Agent, ScriptedModel

    built = await _build(tmp_path, sets=["execution"], sandbox="bwrap", **fields)
    model = ScriptedModel(
        [
            {"tool_calls": [{"id": "c1", "name": "shell", "arguments": {"command": "echo hi"}}]},
            {"text": "done"},
        ]
    )
    try:
        agent = Agent(model=model, tools=built.tools["execution"], autonomy="full")
        result = await agent.run("go")
    finally:
        await built.aclose()
    [output] = [m.content for m in result.history if m.role == "tool"]
    assert "hi" in output and f"[sandbox bwrap, {network}]" in output


def test_an_unknown_command_network_is_refused_with_the_modes_named() -> None:
    with pytest.raises(ValueError, match="'none', 'loopback' or 'host'"):
        BuiltinConfig.model_validate({"command_network": {"execution": "bogus"}})


@pytest.mark.parametrize("spares", [True, False])
async def test_a_bwrap_sandbox_serves_shell_calls_from_spares_until_the_sets_close(
    tmp_path: Path, spares: bool
) -> None:
    from heron import Agent, ScriptedModel
    from heron.sandbox import BwrapSandbox

    built = await _build(tmp_path, sets=["execution"], sandbox="bwrap", sandbox_spares=spares)
    [sandbox] = [
        c.__self__ for c in built._closers if isinstance(getattr(c, "__self__", None), BwrapSandbox)
    ]
    call = {"id": "c1", "name": "shell", "arguments": {"command": "echo hi"}}
    model = ScriptedModel([{"tool_calls": [call]}, {"text": "done"}])
    try:
        assert await sandbox.prepare() is spares
        agent = Agent(model=model, tools=built.tools["execution"], autonomy="full")
        result = await agent.run("go")
        served = sandbox._spares.served if sandbox._spares is not None else 0
    finally:
        await built.aclose()
    [output] = [m.content for m in result.history if m.role == "tool"]
    assert "hi" in output and served == int(spares)
    assert _children() == []  # no spare left


def _children() -> list[str]:
    found = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # asyncio's watcher threads come and go
            found += (task / "children").read_text().split()
    return found
