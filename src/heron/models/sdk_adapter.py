"""What the SDK-backed provider adapters share.

`OpenAIChatModel` and `AnthropicMessagesModel` drive official SDKs of one design: the clients
take the same options and raise the same kinds of errors. `SdkAdapter` holds that common
part: the client (with the SDK's own retries off, as `RetryingModel` owns that policy), the key
in a `Secret`, the converted tool specs, and the translation of timeouts, failed connections and
unreadable events into `ProviderError`s. `StreamProgress` keeps what a stream emitted, so a
failure after output becomes `StreamInterrupted` instead of a retryable error, and
`tool_call_from_json` turns a streamed call's argument text into a `ModelToolCall`.

The adapters import this module and never the factory (`heron.models.resolve`), which alone
names them.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any, Protocol

from heron._support.limits import InputRejected, parse_json
from heron.models.base import (
    ModelError,
    ModelToolCall,
    ReasoningDelta,
    StreamInterrupted,
    TextDelta,
)
from heron.models.retry import ProviderError, transport_failure
from heron.safety.secrets import Secret
from heron.tools.definition import ToolSpec


def import_sdk(module: str, needed_by: str) -> ModuleType:
    """Import an optional provider SDK; without it, a `ModelError` naming the heron extra of
    the same name that installs it. `needed_by` starts the message ("the Anthropic provider
    needs")."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ModelError(
            f"{needed_by} the `{module}` package: pip install 'heron[{module}]'"
        ) from exc


class SdkClient(Protocol):
    """The part of an SDK client the shared code uses."""

    @property
    def base_url(self) -> object:
        """The API root the client sends to."""
        ...

    async def close(self) -> None:
        """Close the HTTP connections."""
        ...


VISION_MODELS = ("gpt-4o", "gpt-4.1", "claude-")
"""Name prefixes of models known to read images; other models are assumed text-only."""


def default_vision(model: str) -> bool:
    """Whether `model` reads images and PDFs, by the `VISION_MODELS` prefixes."""
    return model.lower().startswith(VISION_MODELS)


class SdkAdapter:
    """The state and plumbing of an adapter over an SDK client.

    A subclass declares the concrete type of `_client` (its SDK's client class).

    Args:
        connect: The SDK's async client class (or a factory taking the same arguments).
        tool_format: A `ToolSpec` in the API's tool format.
        model: The provider's model name.
        provider: The prefix of `name` (`provider:model`).
        api_key: The key (a `Secret` keeps it out of reprs).
        base_url: The API root; None for the SDK's default.
        native_tools: Native tool calls, or heron's text protocol.
        timeout_s: Connect timeout and the longest silence allowed while streaming.
        request_options: Extra body fields sent with every request.
        vision: The model reads images and PDFs; None: `default_vision(model)`. Without it,
            attached media become labelled text placeholders.
    """

    def __init__(
        self,
        connect: Callable[..., SdkClient],
        tool_format: Callable[[ToolSpec], dict[str, Any]],
        model: str,
        *,
        provider: str,
        api_key: Secret | str,
        base_url: str | None,
        native_tools: bool,
        timeout_s: float,
        request_options: Mapping[str, Any] | None,
        vision: bool | None = None,
    ) -> None:
        self.model = model
        self.vision = default_vision(model) if vision is None else vision
        self._name = f"{provider}:{model}"
        self._native = native_tools
        self._secret = api_key if isinstance(api_key, Secret) else Secret(api_key)
        self._timeout_s = timeout_s
        self._options = dict(request_options) if request_options else {}
        self._client: SdkClient = connect(
            api_key=self._secret.reveal(),
            base_url=base_url,
            timeout=timeout_s,
            max_retries=0,
        )
        self.base_url = str(self._client.base_url)
        self._tool_format = tool_format
        self._tools_for: Sequence[ToolSpec] | None = None
        self._tools: list[dict[str, Any]] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def native_tools(self) -> bool:
        return self._native

    def __repr__(self) -> str:
        protocol = "native" if self._native else "text"
        kind = type(self).__name__
        return f"{kind}({self._name!r}, base_url={self.base_url!r}, tools={protocol})"

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.close()

    def _tool_specs(self, specs: Sequence[ToolSpec]) -> list[dict[str, Any]]:
        # The engine passes the same tuple while the tool set is unchanged.
        if specs is not self._tools_for:
            self._tools = [self._tool_format(spec) for spec in specs]
            self._tools_for = specs
        return self._tools

    def _transport_error(
        self, exc: Exception, *, timeout: type[Exception], connection: type[Exception]
    ) -> ProviderError | None:
        """The `ProviderError` for a timeout, a failed connection or an unreadable stream event;
        None for anything else. `timeout` and `connection` are the SDK's own error classes."""
        if isinstance(exc, timeout):
            kind: str | None = "timeout"
        elif isinstance(exc, connection):
            kind = "connection"
        else:
            kind = transport_failure(exc)
        if kind == "timeout":
            return ProviderError(
                f"no response from {self.base_url} within {self._timeout_s:g} s", kind="timeout"
            )
        if kind == "connection":
            cause = exc.__cause__ or exc
            return ProviderError(
                self._secret.scrub(f"connection to {self.base_url} failed: {cause}"),
                kind="connection",
            )
        if isinstance(exc, json.JSONDecodeError):
            # The SDK decodes each event's JSON; a server that sends garbage lands here.
            return ProviderError(f"unreadable stream event: {exc}", kind="protocol")
        return None


class StreamProgress:
    """What one response stream has emitted so far: text, reasoning and complete tool calls."""

    __slots__ = ("calls", "reasoning", "text")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls = 0

    def text_delta(self, text: str) -> TextDelta:
        """Record `text` and return the part that emits it."""
        self.text.append(text)
        return TextDelta(text=text)

    def reasoning_delta(self, text: str) -> ReasoningDelta:
        """Record reasoning `text` and return the part that emits it."""
        self.reasoning.append(text)
        return ReasoningDelta(text=text)

    def broken(self, error: ProviderError) -> ModelError:
        """What to raise when the stream failed with `error`: `StreamInterrupted` once output
        was emitted (it must not be retried), else `error` itself."""
        if not self._emitted():
            return error
        return StreamInterrupted(
            f"the response stream broke off: {error}",
            partial_text="".join(self.text),
            partial_reasoning="".join(self.reasoning),
        )

    def unfinished(self) -> ModelError:
        """What to raise when the stream ended before the model said it had finished."""
        message = "the response stream ended before the model finished"
        if not self._emitted():
            return ProviderError(message, kind="connection")
        return StreamInterrupted(
            message, partial_text="".join(self.text), partial_reasoning="".join(self.reasoning)
        )

    def _emitted(self) -> bool:
        return bool(self.text or self.reasoning or self.calls)


def tool_call_from_json(call_id: str | None, name: str, raw: str) -> ModelToolCall:
    """A complete tool call from its streamed argument text.

    `arguments_json` always keeps the raw text, so the engine can report malformed JSON to the
    model; `arguments` is filled in only when the text is a JSON object, which lets the engine
    start call checks while the model is still streaming.
    """
    arguments: dict[str, Any] | None = None
    try:
        value = parse_json(raw) if raw.strip() else {}
    except InputRejected:  # malformed or over the input limits: the engine reports it
        value = None
    if isinstance(value, dict):
        arguments = value
    return ModelToolCall(id=call_id or None, name=name, arguments=arguments, arguments_json=raw)
