"""heron: an agent runtime built around tools.

The public API is imported lazily, so `import heron` (and the `heron` command) stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from heron._support.lazy import lazy_getattr

if TYPE_CHECKING:
    from heron.agent import Agent, RunResult
    from heron.messages import (
        AssistantMessage,
        Message,
        SystemMessage,
        ToolCallPart,
        ToolResultMessage,
        UserMessage,
    )
    from heron.models.base import Model, ModelRequest
    from heron.models.scripted import FunctionModel, ModelTurn, ScriptedModel
    from heron.tools.definition import Tool, ToolAnnotations, ToolContext, ToolResult, ToolSpec
    from heron.tools.function_tool import FunctionTool, tool
    from heron.tools.registry import ActivatedToolSet, ToolRegistry
    from heron.turn.approval import (
        ApprovalAnswer,
        ApprovalManager,
        ApprovalPolicy,
        ApprovalRequest,
        BackChannelApprover,
        NoApprover,
        TerminalApprover,
    )
    from heron.turn.cancel import CancelScope
    from heron.turn.context import IterationBudget, LoopDetectionKnobs, RuntimeKnobs, TurnState
    from heron.turn.events import EventSink, TurnEvent
    from heron.turn.hooks import Cancel, HookCall, Rewrite, ToolHook
    from heron.turn.loop import TurnOutcome
    from heron.turn.observer import Observer, RecordingObserver
    from heron.turn.receipts import ReceiptScope, verify_receipt

_EXPORTS: dict[str, str] = {
    "ActivatedToolSet": "heron.tools.registry",
    "Agent": "heron.agent",
    "ApprovalAnswer": "heron.turn.approval",
    "ApprovalManager": "heron.turn.approval",
    "ApprovalPolicy": "heron.turn.approval",
    "ApprovalRequest": "heron.turn.approval",
    "AssistantMessage": "heron.messages",
    "BackChannelApprover": "heron.turn.approval",
    "Cancel": "heron.turn.hooks",
    "CancelScope": "heron.turn.cancel",
    "EventSink": "heron.turn.events",
    "FunctionModel": "heron.models.scripted",
    "FunctionTool": "heron.tools.function_tool",
    "HookCall": "heron.turn.hooks",
    "IterationBudget": "heron.turn.context",
    "LoopDetectionKnobs": "heron.turn.context",
    "Message": "heron.messages",
    "Model": "heron.models.base",
    "ModelRequest": "heron.models.base",
    "ModelTurn": "heron.models.scripted",
    "NoApprover": "heron.turn.approval",
    "Observer": "heron.turn.observer",
    "ReceiptScope": "heron.turn.receipts",
    "RecordingObserver": "heron.turn.observer",
    "Rewrite": "heron.turn.hooks",
    "RunResult": "heron.agent",
    "RuntimeKnobs": "heron.turn.context",
    "ScriptedModel": "heron.models.scripted",
    "SystemMessage": "heron.messages",
    "TerminalApprover": "heron.turn.approval",
    "Tool": "heron.tools.definition",
    "ToolAnnotations": "heron.tools.definition",
    "ToolCallPart": "heron.messages",
    "ToolContext": "heron.tools.definition",
    "ToolHook": "heron.turn.hooks",
    "ToolRegistry": "heron.tools.registry",
    "ToolResult": "heron.tools.definition",
    "ToolResultMessage": "heron.messages",
    "ToolSpec": "heron.tools.definition",
    "TurnEvent": "heron.turn.events",
    "TurnOutcome": "heron.turn.loop",
    "TurnState": "heron.turn.context",
    "UserMessage": "heron.messages",
    "tool": "heron.tools.function_tool",
    "verify_receipt": "heron.turn.receipts",
}


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())


__all__ = [
    "ActivatedToolSet",
    "Agent",
    "ApprovalAnswer",
    "ApprovalManager",
    "ApprovalPolicy",
    "ApprovalRequest",
    "AssistantMessage",
    "BackChannelApprover",
    "Cancel",
    "CancelScope",
    "EventSink",
    "FunctionModel",
    "FunctionTool",
    "HookCall",
    "IterationBudget",
    "LoopDetectionKnobs",
    "Message",
    "Model",
    "ModelRequest",
    "ModelTurn",
    "NoApprover",
    "Observer",
    "ReceiptScope",
    "RecordingObserver",
    "Rewrite",
    "RunResult",
    "RuntimeKnobs",
    "ScriptedModel",
    "SystemMessage",
    "TerminalApprover",
    "Tool",
    "ToolAnnotations",
    "ToolCallPart",
    "ToolContext",
    "ToolHook",
    "ToolRegistry",
    "ToolResult",
    "ToolResultMessage",
    "ToolSpec",
    "TurnEvent",
    "TurnOutcome",
    "TurnState",
    "UserMessage",
    "tool",
    "verify_receipt",
]
