"""`ToolServer` seen through the official SDK's own client, connected in-process.

Every call runs heron's lifecycle (hooks, approval, loop detection, audit, receipts, spill);
approval asks the connected client the way the negotiated protocol does (`input_required`
rounds on 2026-07-28, `elicitation/create` before); progress and log notifications reach the
client; spilled outputs are resources read page by page.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

import heron
from heron.artifacts.sqlite_store import SqliteArtifactCatalog
from heron.artifacts.store import ArtifactSpill, ArtifactStore
from heron.mcp.server import ToolServer
from heron.mcp.server.asking import APPROVAL_KEY
from heron.tools.definition import ToolContext, ToolResult
from heron.turn.approval import ApprovalManager, ApprovalPolicy, BackChannelApprover
from heron.turn.approval_audit import MemoryAuditStore
from heron.turn.hooks import Cancel, HookCall, ToolHook
from heron.turn.observer import Observer, ToolCallRecord, ToolCallStartRecord
from heron.turn.receipts import ReceiptKeyStore, ReceiptScope

MODERN = "auto"  # the in-process SDK client negotiates 2026-07-28
LEGACY = "legacy"  # the 2025 initialize handshake

made: list[str] = []


@heron.tool
def touch(name: str) -> str:
    """Create a marker file called `name` (changes the world: needs approval)."""
    made.append(name)
    return f"touched {name}"


@heron.tool(read_only=True)
def look(path: str) -> ToolResult:
    """Look at `path` (read-only)."""
    return ToolResult.ok(f"nothing at {path}", data={"path": path, "found": False})


@heron.tool(read_only=True)
async def slow_count(n: int, ctx: ToolContext) -> str:
    """Count to n, reporting progress."""
    for i in range(1, n + 1):
        ctx.progress(f"counted {i} of {n}")
    return f"counted to {n}"


@heron.tool(read_only=True)
def big(lines: int) -> str:
    """Print `lines` numbered lines."""
    return "\n".join(f"line {i}" for i in range(1, lines + 1))


@heron.tool(read_only=True)
async def wait_forever() -> str:
    """Wait until cancelled."""
    await asyncio.Event().wait()
    return "never"


class Recorder(Observer):
    def __init__(self) -> None:
        self.started: list[ToolCallStartRecord] = []
        self.ended: list[ToolCallRecord] = []
        self.one_ended = asyncio.Event()

    def tool_call_start(self, record: ToolCallStartRecord) -> None:
        self.started.append(record)

    def tool_call_end(self, record: ToolCallRecord) -> None:
        self.ended.append(record)
        self.one_ended.set()


def _server(audit: MemoryAuditStore | None = None, **kw: Any) -> ToolServer:
    approval = ApprovalManager(policy=ApprovalPolicy(), audit=audit or MemoryAuditStore())
    return ToolServer([touch, look, slow_count, big, wait_forever], approval=approval, **kw)


def _text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def answering(decision: str, asked: list[str]) -> Any:
    async def elicit(_ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        if decision == "decline":
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"decision": decision})

    return elicit


# -- approval asks the connected client -----------------------------------------------------------


@pytest.mark.parametrize("mode", [MODERN, LEGACY])
async def test_a_call_that_needs_approval_asks_the_client_and_runs_on_yes(mode: str) -> None:
    made.clear()
    audit = MemoryAuditStore()
    asked: list[str] = []
    async with Client(
        _server(audit).server,
        mode=mode,  # type: ignore[arg-type]
        elicitation_callback=answering("yes", asked),
    ) as client:
        result = await client.call_tool("touch", {"name": "a"})

    assert not result.is_error and _text(result) == "touched a" and made == ["a"]
    assert asked == ["heron wants to run touch\nname: a"]
    assert [(r.decision, r.decided_by) for r in audit.list()] == [("yes", "mcp-client:mcp")]


async def test_on_2026_the_question_is_an_input_required_round_with_sealed_single_use_state() -> (
    None
):
    made.clear()
    # The callback declares form elicitation; the rounds are driven by hand below.
    async with Client(
        _server().server, mode=MODERN, elicitation_callback=answering("no", [])
    ) as client:
        first = await client.session.call_tool("touch", {"name": "b"}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        assert first.input_requests is not None and APPROVAL_KEY in first.input_requests
        state = first.request_state
        assert state is not None and "heron" not in state  # sealed, not readable
        yes = {APPROVAL_KEY: types.ElicitResult(action="accept", content={"decision": "yes"})}
        done = await client.session.call_tool(
            "touch", {"name": "b"}, input_responses=yes, request_state=state
        )
        replay = await client.session.call_tool(
            "touch", {"name": "b"}, input_responses=yes, request_state=state
        )
        with pytest.raises(MCPError, match="Invalid or expired requestState"):
            await client.session.call_tool(
                "touch", {"name": "other"}, input_responses=yes, request_state=state
            )

    assert not done.is_error and made == ["b"]
    assert replay.is_error and "expired or was already answered" in _text(replay)


@pytest.mark.parametrize("mode", [MODERN, LEGACY])
async def test_no_declined_or_cancelled_never_runs_the_call(mode: str) -> None:
    made.clear()
    audit = MemoryAuditStore()

    async def cancel(_ctx: Any, _params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="cancel")

    results = []
    for callback in (answering("no", []), answering("decline", []), cancel):
        async with Client(
            _server(audit).server,
            mode=mode,  # type: ignore[arg-type]
            elicitation_callback=callback,
        ) as client:
            results.append(await client.call_tool("touch", {"name": "c"}))

    assert made == [] and all(r.is_error for r in results)
    assert "Denied by the operator" in _text(results[0])
    assert "Denied by the operator" in _text(results[1])
    assert "denied it by policy" in _text(results[2])  # no answer is never a yes
    assert [r.decision for r in audit.list()] == ["no", "no", "unavailable"]


async def test_a_client_without_elicitation_is_refused_by_policy() -> None:
    made.clear()
    audit = MemoryAuditStore()
    async with Client(_server(audit).server, mode=LEGACY) as client:
        refused = await client.call_tool("touch", {"name": "d"})
        allowed = await client.call_tool("look", {"path": "x"})

    assert refused.is_error and made == []
    assert "needs approval" in _text(refused) and "denied it by policy" in _text(refused)
    assert [(r.decision, r.decided_by) for r in audit.list()] == [("policy_deny", "policy")]
    assert not allowed.is_error


async def test_always_is_remembered_for_the_rest_of_the_session() -> None:
    made.clear()
    asked: list[str] = []
    async with Client(
        _server().server, mode=LEGACY, elicitation_callback=answering("always", asked)
    ) as client:
        await client.call_tool("touch", {"name": "e"})
        await client.call_tool("touch", {"name": "f"})

    assert made == ["e", "f"] and len(asked) == 1


async def test_the_human_seam_answers_instead_of_the_client() -> None:
    made.clear()
    asked: list[str] = []
    shown: asyncio.Queue[str] = asyncio.Queue()
    human = BackChannelApprover("store", on_request=lambda r: shown.put_nowait(r.request_id))

    async def operator() -> None:
        human.answer(await shown.get(), "yes", operator="alice")

    async with Client(
        _server(human=human).server, mode=LEGACY, elicitation_callback=answering("no", asked)
    ) as client:
        answered = asyncio.create_task(operator())
        result = await client.call_tool("touch", {"name": "g"})
        await answered

    assert not result.is_error and made == ["g"]
    assert asked == []  # the client was not asked: the human seam answered


# -- the rest of the lifecycle --------------------------------------------------------------------


async def test_hooks_observer_receipts_and_structured_data_apply_to_served_calls(
    tmp_path: Path,
) -> None:
    class NoSecrets(ToolHook):
        async def before_tool_call(self, call: HookCall) -> Cancel | None:
            return Cancel(reason="no secrets") if "secret" in str(call.arguments) else None

    observer = Recorder()
    receipts = ReceiptScope("runtime", store=ReceiptKeyStore(tmp_path)).signer()
    server = _server(hooks=[NoSecrets()], observer=observer, receipts=receipts)
    async with Client(server.server, mode=LEGACY) as client:
        looked = await client.call_tool("look", {"path": "a.txt"})
        cancelled = await client.call_tool("look", {"path": "secret.txt"})
        invalid = await client.call_tool("look", {"path": 3})

    assert not looked.is_error and looked.structured_content == {"path": "a.txt", "found": False}
    assert looked.meta is not None and looked.meta["heron/receipt"].startswith("heron-receipt-")
    assert cancelled.is_error and "Cancelled by hook: no secrets" in _text(cancelled)
    assert invalid.is_error and "invalid arguments for 'look'" in _text(invalid)
    assert [r.tool for r in observer.started] == ["look"]  # refused calls never ran
    assert [(r.tool, r.success, r.channel) for r in observer.ended] == [("look", True, "mcp")]


async def test_loop_detection_watches_each_session() -> None:
    async with Client(_server().server, mode=LEGACY) as client:
        texts = [_text(await client.call_tool("look", {"path": "same"})) for _ in range(5)]

    assert texts[0] == "nothing at same"
    assert any("[heron loop detector]" in t for t in texts)
    assert "result withheld" in texts[-1]


async def test_a_call_the_client_cancels_is_interrupted_and_recorded_like_an_agent_s() -> None:
    observer = Recorder()
    async with Client(_server(observer=observer).server, mode=LEGACY) as client:
        with pytest.raises(MCPError):
            await client.call_tool("wait_forever", {}, read_timeout_seconds=0.3)
        # The cancellation reaches the server after the client gave up.
        await asyncio.wait_for(observer.one_ended.wait(), 10)

    assert [(r.tool, r.status, r.success) for r in observer.ended] == [
        ("wait_forever", "interrupted", False)
    ]


# -- notifications ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [MODERN, LEGACY])
async def test_tool_progress_reaches_the_client_as_progress_notifications(mode: str) -> None:
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    async with Client(_server().server, mode=mode) as client:  # type: ignore[arg-type]
        result = await client.call_tool("slow_count", {"n": 3}, progress_callback=on_progress)

    assert _text(result) == "counted to 3"
    assert seen == [(1, "counted 1 of 3"), (2, "counted 2 of 3"), (3, "counted 3 of 3")]


async def test_log_messages_follow_logging_set_level() -> None:
    logs: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async with Client(_server().server, mode=LEGACY, logging_callback=on_log) as client:
        await client.call_tool("look", {"path": "quiet"})
        quiet = list(logs)
        with pytest.warns(MCPDeprecationWarning):  # the client's side of a 2025 feature
            await client.set_logging_level("info")
        await client.call_tool("look", {"path": "loud"})

    assert quiet == []
    assert {p.level for p in logs} == {"info"} and {p.logger for p in logs} == {"heron"}
    assert logs[0].data["type"] == "tool_result" and logs[0].data["name"] == "look"


async def test_on_2026_log_messages_follow_the_request_s_own_opt_in() -> None:
    logs: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async with Client(
        _server().server, mode=MODERN, logging_callback=on_log, log_level="debug"
    ) as client:
        await client.call_tool("look", {"path": "x"})

    assert [p.data["type"] for p in logs] == ["tool_call", "tool_result"]


# -- artifacts as resources ------------------------------------------------------------------------


async def test_a_spilled_output_is_a_resource_read_page_by_page(tmp_path: Path) -> None:
    spill = ArtifactSpill(ArtifactStore(SqliteArtifactCatalog(tmp_path), tmp_path / "artifacts"))
    async with Client(_server(spill=spill).server, mode=LEGACY) as client:
        result = await client.call_tool("big", {"lines": 450})
        links = [c for c in result.content if isinstance(c, types.ResourceLink)]
        listed = await client.list_resources()
        templates = await client.list_resource_templates()
        pages = []
        uri: str | None = links[0].uri
        while uri is not None:
            page = (await client.read_resource(uri)).contents[0]
            assert isinstance(page, types.TextResourceContents)
            pages.append(page)
            uri = (page.meta or {}).get("heron/next")
        with pytest.raises(MCPError, match="no artifact art_0000000000000000"):
            await client.read_resource("heron-artifact://art_0000000000000000")

    assert "artifact art_" in _text(result) and len(links) == 1
    assert links[0].uri.startswith("heron-artifact://art_") and links[0].mime_type == "text/plain"
    assert [r.uri for r in listed.resources] == [links[0].uri]
    assert templates.resource_templates[0].uri_template.endswith("{?offset,limit}")
    assert [p.meta and p.meta["heron/lines"] for p in pages] == ["1-200", "201-400", "401-450"]
    assert "\n".join(p.text for p in pages) == "\n".join(f"line {i}" for i in range(1, 451))
