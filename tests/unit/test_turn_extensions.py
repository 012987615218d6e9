"""Extension points: call checks (sidecar / reviewer), result cache, output spill, nested calls."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from heron import Agent, ScriptedModel, ToolContext, ToolResult, tool
from heron.messages import ToolResultMessage
from heron.models.base import ModelPart, ModelRequest, ModelToolCall, TextDelta
from heron.models.history_rules import HistoryChecker
from heron.tools.definition import ToolSpec
from heron.turn.extensions import CheckRequest, CheckVerdict
from support.engine import Events, call, calls_turn

BOUND = 5.0


@tool(read_only=True)
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    lookup_calls.append(key)
    return f"value of {key}"


lookup_calls: list[str] = []


@tool()
def store(key: str) -> str:
    """Change a key.

    Args:
        key: The key.
    """
    return f"stored {key}"


class Sidecar:
    """A rule-based check that refuses deletes and escalates anything mentioning prod."""

    name = "sidecar"

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.started = asyncio.Event()

    def applies_to(self, spec: ToolSpec) -> bool:
        return not spec.annotations.read_only

    async def check(self, request: CheckRequest) -> CheckVerdict:
        self.seen.append({"tool": request.tool, "arguments": request.arguments})
        self.started.set()
        key = request.arguments.get("key", "")
        if key.startswith("delete"):
            return CheckVerdict(decision="refuse", reason="deleting keys is not allowed")
        if "prod" in key:
            return CheckVerdict(decision="escalate", reason="touches production")
        if key == "boom":
            raise RuntimeError("classifier down")
        return CheckVerdict(decision="allow")


def contents(history: list[Any]) -> dict[str, str]:
    return {m.call_id: m.content for m in history if isinstance(m, ToolResultMessage)}


async def test_check_refusal_returns_the_reason_and_never_runs(events: Events) -> None:
    sidecar = Sidecar()
    turns = [
        calls_turn(call("store", "c1", key="delete-all"), call("store", "c2", key="a")),
        {"text": "ok"},
    ]
    agent = Agent(model=ScriptedModel(turns), tools=[store], autonomy="full", checks=[sidecar])
    result = await agent.run("go", sink=events)
    got = contents(result.history)
    assert got["c1"] == "Refused before running: sidecar: deleting keys is not allowed"
    assert events.results()["c1"].status == "denied"
    assert got["c2"] == "stored a"
    (audited,) = agent.approval.audit.list()  # type: ignore[attr-defined]
    assert (audited.decision, audited.decided_by) == ("policy_deny", "check:sidecar")
    assert sidecar.seen[0] == {"tool": "store", "arguments": {"key": "delete-all"}}
    assert events.of("progress")[0].message == "checking the call: sidecar"


async def test_escalation_and_check_failure_go_to_the_human_even_under_full_autonomy(
    events: Events,
) -> None:
    turns = [
        calls_turn(call("store", "c1", key="prod-db"), call("store", "c2", key="boom")),
        {"text": "ok"},
    ]
    agent = Agent(model=ScriptedModel(turns), tools=[store], autonomy="full", checks=[Sidecar()])
    result = await agent.run("go", sink=events)
    # No operator is attached, so both escalations end as policy denials.
    requests = events.of("approval_request")
    assert [r.call_id for r in requests] == ["c1", "c2"]
    assert requests[0].reason == "sidecar: touches production"
    assert "could not decide" in requests[1].reason
    assert "no operator decision was available" in contents(result.history)["c1"]


class StreamingModel:
    """Emits a tool call, then keeps streaming until the sidecar has started on that call."""

    name = "streaming"
    native_tools = True

    def __init__(self, sidecar: Sidecar) -> None:
        self.sidecar = sidecar
        self.turn = 0
        self.checker = HistoryChecker()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelPart]:
        self.checker.check(request.messages)
        self.turn += 1
        if self.turn == 1:
            yield ModelToolCall(id="c1", name="store", arguments={"key": "a"})
            await asyncio.wait_for(self.sidecar.started.wait(), BOUND)
            yield TextDelta(text="(still streaming when the check started)")
        else:
            yield TextDelta(text="done")


async def test_checks_start_while_the_model_is_still_streaming(events: Events) -> None:
    sidecar = Sidecar()
    agent = Agent(model=StreamingModel(sidecar), tools=[store], autonomy="full", checks=[sidecar])
    result = await agent.run("go", sink=events)
    assert result.ok and contents(result.history)["c1"] == "stored a"
    assert len(sidecar.seen) == 1  # the early check's verdict was used, not run twice


class DictCache:
    def __init__(self) -> None:
        self.data: dict[tuple[str, str], str] = {}

    def get(self, spec: ToolSpec, arguments: dict[str, Any]) -> str | None:
        return self.data.get((spec.name, repr(sorted(arguments.items()))))

    def put(self, spec: ToolSpec, arguments: dict[str, Any], output: str) -> None:
        self.data[(spec.name, repr(sorted(arguments.items())))] = output

    def invalidate(self, spec: ToolSpec, arguments: dict[str, Any]) -> None:
        self.data.clear()


async def test_read_only_results_are_cached_marked_and_invalidated_by_writes(
    events: Events,
) -> None:
    lookup_calls.clear()
    turns = [
        calls_turn(call("lookup", "c1", key="k")),
        calls_turn(call("lookup", "c2", key="k")),
        calls_turn(call("store", "c3", key="k")),
        calls_turn(call("lookup", "c4", key="k")),
        {"text": "ok"},
    ]
    agent = Agent(
        model=ScriptedModel(turns), tools=[lookup, store], autonomy="full", cache=DictCache()
    )
    result = await agent.run("go", sink=events)
    by_id = events.results()
    assert [by_id[c].cached for c in ("c1", "c2", "c4")] == [False, True, False]
    assert lookup_calls == ["k", "k"]
    assert contents(result.history)["c2"] == "value of k"


class PreviewSpill:
    def __init__(self) -> None:
        self.stored: dict[str, str] = {}

    def spill(self, tool: str, call_id: str, output: str) -> str | None:
        if len(output) < 100:
            return None
        self.stored[call_id] = output
        return f"{output[:10]}\n[… {len(output) - 10} characters saved as artifact {call_id} …]"


async def test_oversize_output_is_spilled_and_the_model_sees_the_preview(events: Events) -> None:
    @tool(read_only=True)
    def dump() -> str:
        """Big output."""
        return "x" * 500

    spill = PreviewSpill()
    turns = [calls_turn(call("dump")), {"text": "ok"}]
    result = await Agent(model=ScriptedModel(turns), tools=[dump], spill=spill).run(
        "go", sink=events
    )
    assert spill.stored["c_dump"] == "x" * 500
    content = contents(result.history)["c_dump"]
    assert content.startswith("x" * 10) and "490 characters saved as artifact c_dump" in content
    assert events.results()["c_dump"].output == content


async def test_tools_can_call_tools_through_the_whole_lifecycle(events: Events) -> None:
    @tool(requires_approval=True)
    def secret_op() -> str:
        """Needs approval."""
        return "should not run"

    @tool()
    async def orchestrate(ctx: ToolContext) -> ToolResult:
        """Calls other tools and returns only a summary."""
        assert ctx.call_tool is not None
        first = await ctx.call_tool("lookup", {"key": "a"})
        second = await ctx.call_tool("lookup", {"key": "b"})
        denied = await ctx.call_tool("secret_op", {})
        bad = await ctx.call_tool("lookup", {"key": 5})
        problem = (bad.error or "")[:30]
        return ToolResult.ok(
            f"{first.output} | {second.output} | denied={not denied.success} | bad={problem}"
        )

    turns = [calls_turn(call("orchestrate")), {"text": "ok"}]
    agent = Agent(
        model=ScriptedModel(turns),
        tools=[lookup, secret_op, orchestrate],
        autonomy="supervised",
    )
    from heron import ApprovalManager, ApprovalPolicy

    agent.approval = ApprovalManager(policy=ApprovalPolicy(auto_approve=["orchestrate"]))
    result = await agent.run("go", sink=events)
    summary = contents(result.history)["c_orchestrate"]
    assert summary.startswith(
        "value of a | value of b | denied=True | bad=Error: invalid arguments"
    )
    # Nested calls are visible as cards of their own, not as history entries.
    assert [e.id for e in events.of("tool_result")] == [
        "c_orchestrate.1",
        "c_orchestrate.2",
        "c_orchestrate.3",
        "c_orchestrate.4",
        "c_orchestrate",
    ]
    assert [m.role for m in result.history] == ["user", "assistant", "tool", "assistant"]
    events.assert_one_pair_per_call()


class Misspelled:
    """A check with a bug: it answers a decision heron does not know."""

    name = "misspelled"

    def applies_to(self, spec: ToolSpec) -> bool:
        return True

    async def check(self, request: CheckRequest) -> CheckVerdict:
        return CheckVerdict(decision="deny", reason="nope")  # type: ignore[arg-type]


async def test_an_unknown_check_decision_escalates_instead_of_allowing(events: Events) -> None:
    turns = [calls_turn(call("store", "c1", key="a")), {"text": "ok"}]
    agent = Agent(model=ScriptedModel(turns), tools=[store], autonomy="full", checks=[Misspelled()])
    result = await agent.run("go", sink=events)
    (request,) = events.of("approval_request")
    assert "misspelled could not decide" in request.reason
    assert "unknown check decision 'deny'" in request.reason
    assert "stored a" not in contents(result.history)["c1"]
