"""heron: an agent runtime built around tools."""

from heron.agent import Agent, RunResult
from heron.events import EventSink, TurnEvent
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
from heron.observer import Observer, RecordingObserver
from heron.receipts import ReceiptScope, verify_receipt
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
from heron.turn.hooks import Cancel, HookCall, Rewrite, ToolHook
from heron.turn.loop import TurnOutcome

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
