"""Test and demo models: `ScriptedModel` (a fixed script of turns) and `FunctionModel` (a
Python callable decides each turn). Both are public API; both check every request's history
against the rules real providers enforce.

Script file format (JSON or YAML)::

    protocol: native            # or "text": `text` then carries <tool_call> blocks
    turns:
      - tool_calls:
          - {id: c1, name: echo, arguments: {text: hi}}
      - text: done
        delay_ms: 20            # simulated model latency
        expect: {last_message_contains: hi}

`DEMO_SCRIPT` is the script of the quick start (`heron demo`, `scripted:demo`), found as package
data by its path, so that the models never import `heron.demo`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from heron._support.folder_files import open_regular, read_at_most
from heron.messages import Message, ToolResultMessage, UserMessage
from heron.models.base import (
    ModelError,
    ModelPart,
    ModelRequest,
    ModelToolCall,
    ReasoningDelta,
    TextDelta,
)
from heron.models.history_rules import HistoryChecker

DEMO_SCRIPT: Final = ("demo", "quickstart.yaml")
MAX_SCRIPT_BYTES: Final = 64 * 1024 * 1024
"""A model script read at most."""
"""Where the quick-start script lies inside the `heron` package (see `demo_script_path`)."""


def demo_script_path() -> Path:
    """The quick-start script shipped with heron (what `scripted:demo` plays)."""
    return Path(str(files("heron").joinpath(*DEMO_SCRIPT)))


class ScriptedCall(BaseModel):
    """A tool call in a script. `arguments` may be a JSON string to simulate malformed output."""

    model_config = ConfigDict(extra="forbid")
    id: str | None = None
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class TurnExpectation(BaseModel):
    """Checks a scripted turn makes against the request it answers; a mismatch fails the run."""

    model_config = ConfigDict(extra="forbid")
    last_message_contains: str | None = None
    last_role: Literal["user", "tool", "assistant"] | None = None
    tools_include: list[str] = Field(default_factory=list)
    tools_exclude: list[str] = Field(default_factory=list)


class ModelTurn(BaseModel):
    """One assistant turn: text, tool calls, or both."""

    model_config = ConfigDict(extra="forbid")
    text: str = ""
    reasoning: str | None = None
    tool_calls: list[ScriptedCall] = Field(default_factory=list)
    delay_ms: int = 0
    expect: TurnExpectation | None = None


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")
    protocol: Literal["native", "text"] = "native"
    turns: list[ModelTurn]


class ScriptMismatchError(ModelError):
    """A scripted turn's expectation did not hold, or the script ran out."""


def _request_tool_names(request: ModelRequest) -> set[str]:
    return {spec.name for spec in request.tools}


def _last_content(request: ModelRequest) -> tuple[str, str]:
    if not request.messages:
        return "", ""
    last = request.messages[-1]
    if isinstance(last, UserMessage | ToolResultMessage):
        return last.role, last.content
    return last.role, getattr(last, "text", "")


def _check_expectation(turn: ModelTurn, index: int, request: ModelRequest, system: str) -> None:
    exp = turn.expect
    if exp is None:
        return
    problems: list[str] = []
    role, content = _last_content(request)
    if exp.last_role and role != exp.last_role:
        problems.append(f"last message role is {role!r}, expected {exp.last_role!r}")
    if exp.last_message_contains and exp.last_message_contains not in content:
        problems.append(f"last message does not contain {exp.last_message_contains!r}")
    names = _request_tool_names(request)
    for name in exp.tools_include:
        if name not in names and name not in system:
            problems.append(f"tool {name!r} is not offered")
    for name in exp.tools_exclude:
        if name in names:
            problems.append(f"tool {name!r} is offered but should not be")
    if problems:
        raise ScriptMismatchError(
            f"scripted turn {index + 1} does not match: " + "; ".join(problems)
        )


class _TurnModel(ABC):
    """Shared streaming of `ModelTurn`s with provider history checks."""

    def __init__(self, *, name: str, native_tools: bool) -> None:
        self._name = name
        self._native = native_tools
        self._checker = HistoryChecker()
        self.requests: list[ModelRequest] = []
        """Every request received, for assertions in tests (`messages` is the live history)."""
        self._sizes: list[int] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def native_tools(self) -> bool:
        return self._native

    def messages_at(self, index: int) -> list[Message]:
        """The history exactly as request `index` saw it (negative indexes count from the end)."""
        request = self.requests[index]
        return list(request.messages[: self._sizes[index]])

    @abstractmethod
    async def _next_turn(self, request: ModelRequest) -> ModelTurn: ...

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelPart]:
        self._checker.check(request.messages)
        self.requests.append(request)
        self._sizes.append(len(request.messages))
        turn = await self._next_turn(request)
        if turn.delay_ms:
            await asyncio.sleep(turn.delay_ms / 1000)
        if turn.reasoning:
            yield ReasoningDelta(text=turn.reasoning)
        if turn.text:
            yield TextDelta(text=turn.text)
        for call in turn.tool_calls:
            if isinstance(call.arguments, str):
                yield ModelToolCall(id=call.id, name=call.name, arguments_json=call.arguments)
            else:
                yield ModelToolCall(id=call.id, name=call.name, arguments=call.arguments)


class ScriptedModel(_TurnModel):
    """Plays a fixed script of assistant turns and fails loudly when it runs out or a turn's
    expectation does not hold."""

    def __init__(
        self,
        turns: Sequence[ModelTurn | dict[str, Any]],
        *,
        protocol: Literal["native", "text"] = "native",
        name: str = "scripted",
    ) -> None:
        super().__init__(name=name, native_tools=protocol == "native")
        self.protocol = protocol
        self._turns = [
            t if isinstance(t, ModelTurn) else ModelTurn.model_validate(t) for t in turns
        ]
        self._index = 0

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        import yaml  # only a script read from a file needs it: no start-up cost otherwise

        path = Path(path)
        try:
            with open_regular(path, follow=True) as (fh, size):  # never /dev/zero or a FIFO
                raw = read_at_most(fh, size, MAX_SCRIPT_BYTES).decode("utf-8")
            data = json.loads(raw) if path.suffix == ".json" else yaml.safe_load(raw)
            script = Script.model_validate(data)
        except (OSError, ValueError, yaml.YAMLError, ValidationError) as exc:
            raise ModelError(f"cannot load model script {path}: {exc}") from exc
        except RecursionError:  # both parsers recurse into nested values
            raise ModelError(f"cannot load model script {path}: nested too deeply") from None
        return cls(script.turns, protocol=script.protocol, name=f"scripted:{path.name}")

    @property
    def remaining(self) -> int:
        return len(self._turns) - self._index

    async def _next_turn(self, request: ModelRequest) -> ModelTurn:
        if self._index >= len(self._turns):
            raise ScriptMismatchError(
                f"the model script is exhausted after {len(self._turns)} turns "
                f"(request {len(self.requests)} had no scripted answer)"
            )
        turn = self._turns[self._index]
        _check_expectation(turn, self._index, request, request.system)
        self._index += 1
        return turn


TurnFunction = Callable[[ModelRequest], "ModelTurn | str | Awaitable[ModelTurn | str]"]


class FunctionModel(_TurnModel):
    """A Python callable decides each turn from the request (history, offered tools).

    The callable returns a `ModelTurn` (or plain text for a final answer), sync or async.
    """

    def __init__(
        self, fn: TurnFunction, *, native_tools: bool = True, name: str = "function"
    ) -> None:
        super().__init__(name=name, native_tools=native_tools)
        self._fn = fn

    async def _next_turn(self, request: ModelRequest) -> ModelTurn:
        result = self._fn(request)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, str):
            return ModelTurn(text=result)
        return result
