"""heron: an agent runtime built around tools.

The public API is imported lazily, so `import heron` (and the `heron` command) stays fast.
Every public name is listed once in `_EXPORTS` (name → module, grouped by subject); the
`TYPE_CHECKING` block repeats the imports for type checkers (`X as X` marks a re-export), and
`tests/unit/test_public_api.py` keeps the two in step.
"""

from __future__ import annotations

from heron._support.lazy import lazy_getattr

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: `heron --help` never imports `typing`

if TYPE_CHECKING:  # `X as X` marks each name as re-exported for type checkers
    from heron._support.vocabulary import HumanDecision as HumanDecision
    from heron._support.vocabulary import Outcome as Outcome
    from heron._support.vocabulary import Status as Status
    from heron._support.vocabulary import StatusError as StatusError
    from heron._support.vocabulary import Urgency as Urgency
    from heron._support.vocabulary import advance_status as advance_status
    from heron.agent import Agent as Agent
    from heron.agent import RunResult as RunResult
    from heron.always_on.subagents.definitions import AgentFileError as AgentFileError
    from heron.config.build import BuildError as BuildError
    from heron.config.build import NoModelError as NoModelError
    from heron.config.builtin import BuiltinError as BuiltinError
    from heron.config.schema import ConfigError as ConfigError
    from heron.errors import ConfigurationError as ConfigurationError
    from heron.errors import HeronError as HeronError
    from heron.errors import StoreError as StoreError
    from heron.mcp.config import McpConfigError as McpConfigError
    from heron.messages import AssistantMessage as AssistantMessage
    from heron.messages import MediaPart as MediaPart
    from heron.messages import Message as Message
    from heron.messages import SystemMessage as SystemMessage
    from heron.messages import ToolCallPart as ToolCallPart
    from heron.messages import ToolResultMessage as ToolResultMessage
    from heron.messages import UserMessage as UserMessage
    from heron.models.base import InvalidHistoryError as InvalidHistoryError
    from heron.models.base import Model as Model
    from heron.models.base import ModelError as ModelError
    from heron.models.base import ModelRequest as ModelRequest
    from heron.models.base import StreamInterrupted as StreamInterrupted
    from heron.models.base import Usage as Usage
    from heron.models.resolve import ProviderConfigError as ProviderConfigError
    from heron.models.resolve import resolve_model as resolve_model
    from heron.models.retry import AllModelsFailedError as AllModelsFailedError
    from heron.models.retry import ProviderError as ProviderError
    from heron.models.retry import RetriesExhaustedError as RetriesExhaustedError
    from heron.models.scripted import FunctionModel as FunctionModel
    from heron.models.scripted import ModelTurn as ModelTurn
    from heron.models.scripted import ScriptedModel as ScriptedModel
    from heron.models.scripted import ScriptMismatchError as ScriptMismatchError
    from heron.tools.definition import RUNTIME_ARG_NOTES as RUNTIME_ARG_NOTES
    from heron.tools.definition import Tool as Tool
    from heron.tools.definition import ToolAnnotations as ToolAnnotations
    from heron.tools.definition import ToolArgumentsError as ToolArgumentsError
    from heron.tools.definition import ToolContext as ToolContext
    from heron.tools.definition import ToolDefinitionError as ToolDefinitionError
    from heron.tools.definition import ToolExample as ToolExample
    from heron.tools.definition import ToolResult as ToolResult
    from heron.tools.definition import ToolSpec as ToolSpec
    from heron.tools.function_tool import FunctionTool as FunctionTool
    from heron.tools.function_tool import tool as tool
    from heron.tools.registry import ActivatedToolSet as ActivatedToolSet
    from heron.tools.registry import Autonomy as Autonomy
    from heron.tools.registry import ToolRegistry as ToolRegistry
    from heron.tools.validation import SchemaValidator as SchemaValidator
    from heron.turn.approval import ApprovalAnswer as ApprovalAnswer
    from heron.turn.approval import ApprovalManager as ApprovalManager
    from heron.turn.approval import ApprovalPolicy as ApprovalPolicy
    from heron.turn.approval import ApprovalRequest as ApprovalRequest
    from heron.turn.approval import Approver as Approver
    from heron.turn.approval import BackChannelApprover as BackChannelApprover
    from heron.turn.approval import NoApprover as NoApprover
    from heron.turn.approval import TerminalApprover as TerminalApprover
    from heron.turn.cancel import CancelScope as CancelScope
    from heron.turn.context import IterationBudget as IterationBudget
    from heron.turn.context import LoopDetectionKnobs as LoopDetectionKnobs
    from heron.turn.context import Receipt as Receipt
    from heron.turn.context import RuntimeKnobs as RuntimeKnobs
    from heron.turn.context import TurnState as TurnState
    from heron.turn.events import ApprovalDecisionEvent as ApprovalDecisionEvent
    from heron.turn.events import ApprovalRequestEvent as ApprovalRequestEvent
    from heron.turn.events import BaseEvent as BaseEvent
    from heron.turn.events import CallIdRenamedEvent as CallIdRenamedEvent
    from heron.turn.events import CancelledEvent as CancelledEvent
    from heron.turn.events import ErrorEvent as ErrorEvent
    from heron.turn.events import EventSink as EventSink
    from heron.turn.events import ExtensionErrorEvent as ExtensionErrorEvent
    from heron.turn.events import FinalEvent as FinalEvent
    from heron.turn.events import HistoryTrimmedEvent as HistoryTrimmedEvent
    from heron.turn.events import LoopDetectedEvent as LoopDetectedEvent
    from heron.turn.events import PlanEvent as PlanEvent
    from heron.turn.events import PlanItem as PlanItem
    from heron.turn.events import ProgressEvent as ProgressEvent
    from heron.turn.events import ReasoningDeltaEvent as ReasoningDeltaEvent
    from heron.turn.events import TextDeltaEvent as TextDeltaEvent
    from heron.turn.events import ToolCallEvent as ToolCallEvent
    from heron.turn.events import ToolResultEvent as ToolResultEvent
    from heron.turn.events import TruncatedEvent as TruncatedEvent
    from heron.turn.events import TurnEvent as TurnEvent
    from heron.turn.hooks import Cancel as Cancel
    from heron.turn.hooks import HookCall as HookCall
    from heron.turn.hooks import HookOutcome as HookOutcome
    from heron.turn.hooks import Rewrite as Rewrite
    from heron.turn.hooks import ToolHook as ToolHook
    from heron.turn.observer import Observer as Observer
    from heron.turn.observer import RecordingObserver as RecordingObserver
    from heron.turn.observer import ToolCallRecord as ToolCallRecord
    from heron.turn.observer import ToolCallStartRecord as ToolCallStartRecord
    from heron.turn.outcome import TurnOutcome as TurnOutcome
    from heron.turn.receipts import ReceiptKeyStore as ReceiptKeyStore
    from heron.turn.receipts import ReceiptScope as ReceiptScope
    from heron.turn.receipts import parse_receipt as parse_receipt
    from heron.turn.receipts import verify_receipt as verify_receipt

_EXPORTS: dict[str, str] = {
    # agent
    "Agent": "heron.agent",
    "Autonomy": "heron.tools.registry",
    "RunResult": "heron.agent",
    "TurnOutcome": "heron.turn.outcome",
    # errors: the root, the developer's mistakes, a store's failure, what a model call can raise
    "HeronError": "heron.errors",
    "ConfigurationError": "heron.errors",
    "StoreError": "heron.errors",
    "AgentFileError": "heron.always_on.subagents.definitions",
    "BuiltinError": "heron.config.builtin",
    "BuildError": "heron.config.build",
    "ConfigError": "heron.config.schema",
    "NoModelError": "heron.config.build",
    "McpConfigError": "heron.mcp.config",
    "ProviderConfigError": "heron.models.resolve",
    "ToolDefinitionError": "heron.tools.definition",
    "ToolArgumentsError": "heron.tools.definition",
    "AllModelsFailedError": "heron.models.retry",
    "InvalidHistoryError": "heron.models.base",
    "ModelError": "heron.models.base",
    "ProviderError": "heron.models.retry",
    "RetriesExhaustedError": "heron.models.retry",
    "ScriptMismatchError": "heron.models.scripted",
    "StreamInterrupted": "heron.models.base",
    # messages
    "AssistantMessage": "heron.messages",
    "MediaPart": "heron.messages",
    "Message": "heron.messages",
    "SystemMessage": "heron.messages",
    "ToolCallPart": "heron.messages",
    "ToolResultMessage": "heron.messages",
    "UserMessage": "heron.messages",
    # models
    "FunctionModel": "heron.models.scripted",
    "Model": "heron.models.base",
    "ModelRequest": "heron.models.base",
    "ModelTurn": "heron.models.scripted",
    "ScriptedModel": "heron.models.scripted",
    "Usage": "heron.models.base",
    "resolve_model": "heron.models.resolve",
    # tools
    "RUNTIME_ARG_NOTES": "heron.tools.definition",
    "ActivatedToolSet": "heron.tools.registry",
    "FunctionTool": "heron.tools.function_tool",
    "SchemaValidator": "heron.tools.validation",
    "Tool": "heron.tools.definition",
    "ToolAnnotations": "heron.tools.definition",
    "ToolContext": "heron.tools.definition",
    "ToolExample": "heron.tools.definition",
    "ToolRegistry": "heron.tools.registry",
    "ToolResult": "heron.tools.definition",
    "ToolSpec": "heron.tools.definition",
    "tool": "heron.tools.function_tool",
    # approval
    "ApprovalAnswer": "heron.turn.approval",
    "ApprovalManager": "heron.turn.approval",
    "ApprovalPolicy": "heron.turn.approval",
    "ApprovalRequest": "heron.turn.approval",
    "Approver": "heron.turn.approval",
    "BackChannelApprover": "heron.turn.approval",
    "NoApprover": "heron.turn.approval",
    "TerminalApprover": "heron.turn.approval",
    # the status and decision vocabularies of everything that runs or waits for a person
    "HumanDecision": "heron._support.vocabulary",
    "Outcome": "heron._support.vocabulary",
    "Status": "heron._support.vocabulary",
    "StatusError": "heron._support.vocabulary",
    "Urgency": "heron._support.vocabulary",
    "advance_status": "heron._support.vocabulary",
    # hooks: `Cancel` skips one call (a hook decision), unlike `CancelScope`
    "Cancel": "heron.turn.hooks",
    "HookCall": "heron.turn.hooks",
    "HookOutcome": "heron.turn.hooks",
    "Rewrite": "heron.turn.hooks",
    "ToolHook": "heron.turn.hooks",
    # cancellation of a whole turn
    "CancelScope": "heron.turn.cancel",
    # knobs and per-turn state
    "IterationBudget": "heron.turn.context",
    "LoopDetectionKnobs": "heron.turn.context",
    "RuntimeKnobs": "heron.turn.context",
    "TurnState": "heron.turn.context",
    # observer
    "Observer": "heron.turn.observer",
    "RecordingObserver": "heron.turn.observer",
    "ToolCallRecord": "heron.turn.observer",
    "ToolCallStartRecord": "heron.turn.observer",
    # receipts
    "Receipt": "heron.turn.context",
    "ReceiptKeyStore": "heron.turn.receipts",
    "ReceiptScope": "heron.turn.receipts",
    "parse_receipt": "heron.turn.receipts",
    "verify_receipt": "heron.turn.receipts",
    # events
    "ApprovalDecisionEvent": "heron.turn.events",
    "ApprovalRequestEvent": "heron.turn.events",
    "BaseEvent": "heron.turn.events",
    "CallIdRenamedEvent": "heron.turn.events",
    "CancelledEvent": "heron.turn.events",
    "ErrorEvent": "heron.turn.events",
    "EventSink": "heron.turn.events",
    "ExtensionErrorEvent": "heron.turn.events",
    "FinalEvent": "heron.turn.events",
    "HistoryTrimmedEvent": "heron.turn.events",
    "LoopDetectedEvent": "heron.turn.events",
    "PlanEvent": "heron.turn.events",
    "PlanItem": "heron.turn.events",
    "ProgressEvent": "heron.turn.events",
    "ReasoningDeltaEvent": "heron.turn.events",
    "TextDeltaEvent": "heron.turn.events",
    "ToolCallEvent": "heron.turn.events",
    "ToolResultEvent": "heron.turn.events",
    "TruncatedEvent": "heron.turn.events",
    "TurnEvent": "heron.turn.events",
}

__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())

__all__ = sorted(_EXPORTS)
