"""OpenAI Chat Completions adapter (OpenAI, Ollama, vLLM, llama.cpp server, LM Studio, …).

Uses the official `openai` SDK, imported when an adapter is built so `import heron` stays fast
and the SDK stays optional. The SDK's own retries are off: `RetryingModel` owns that policy.

Native mode sends `ToolSpec`s as function tools and renders history as `assistant.tool_calls`
plus `role: tool` results. Text-protocol mode sends no tools; tool calls and results are
rendered as the text blocks the protocol prompt taught the model, and the engine parses the
streamed text.

Streaming: text deltas pass through as they arrive; reasoning arrives in `reasoning_content`
or `reasoning` fields on servers that separate it (DeepSeek, vLLM, llama.cpp, Ollama, …);
tool calls are assembled from fragments keyed by index and emitted complete when the choice
finishes; usage comes from the final chunk (`stream_options.include_usage`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from heron.messages import (
    AssistantMessage,
    MediaPart,
    Message,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
)
from heron.models.base import ModelPart, ModelRequest, Usage
from heron.models.retry import ProviderError, error_message, status_error
from heron.models.sdk_adapter import SdkAdapter, StreamProgress, import_sdk, tool_call_from_json
from heron.models.text_protocol import render_assistant_tool_calls, render_tool_results
from heron.safety.secrets import Secret
from heron.tools.definition import ToolSpec

if TYPE_CHECKING:
    import openai

REASONING_FIELDS = ("reasoning_content", "reasoning")
"""Delta fields OpenAI-compatible servers use for thinking, in order of preference."""


class _PendingCall:
    __slots__ = ("id", "name", "parts")

    def __init__(self, call_id: str | None) -> None:
        self.id = call_id
        self.name = ""
        self.parts: list[str] = []


class OpenAIChatModel(SdkAdapter):
    """A model behind the Chat Completions API, streamed.

    Args:
        model: The provider's model name.
        api_key: The key (a `Secret` keeps it out of reprs); servers without keys take any.
        base_url: The API root (`…/v1`); None for OpenAI itself (or `OPENAI_BASE_URL`).
        provider: The prefix used in `name` (`openai`, `ollama`, `openai-compatible`).
        native_tools: Native tool calls, or heron's text protocol.
        timeout_s: Connect timeout and the longest silence allowed while streaming.
        stream_usage: Ask for token usage in the stream (`stream_options.include_usage`).
        request_options: Extra body fields sent with every request.
        vision: The model reads images and PDFs; None: by model name (`default_vision`).
    """

    _client: openai.AsyncOpenAI

    def __init__(
        self,
        model: str,
        *,
        api_key: Secret | str,
        base_url: str | None = None,
        provider: str = "openai",
        native_tools: bool = True,
        timeout_s: float = 120.0,
        stream_usage: bool = True,
        request_options: Mapping[str, Any] | None = None,
        vision: bool | None = None,
    ) -> None:
        sdk = import_sdk("openai", "the OpenAI-compatible providers need")
        super().__init__(
            sdk.AsyncOpenAI,
            function_tool,
            model,
            provider=provider,
            api_key=api_key,
            base_url=base_url,
            native_tools=native_tools,
            timeout_s=timeout_s,
            request_options=request_options,
            vision=vision,
        )
        self._stream_usage = stream_usage

    # -- request ----------------------------------------------------------------------------

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for `request`, request options included."""
        body: dict[str, Any] = {
            **self._options,
            "model": self.model,
            "messages": render_messages(
                request.system, request.messages, native=self._native, vision=self.vision
            ),
            "stream": True,
        }
        if self._stream_usage:
            body["stream_options"] = {"include_usage": True}
        if self._native and request.tools:
            body["tools"] = self._tool_specs(request.tools)
        return body

    # -- response ---------------------------------------------------------------------------

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelPart]:
        body = self.request_body(request)
        try:
            # The body goes in `extra_body`, which the SDK sends as it is and documents to win
            # over its parameters. Passed as parameters, the SDK would walk every message
            # against its TypedDicts (about 3 ms for 20 messages) to change nothing in JSON
            # that is already on the wire format.
            response = await self._client.chat.completions.create(
                model=self.model, messages=(), stream=True, extra_body=body
            )
        except Exception as exc:
            raise self._translate(exc) from exc
        progress = StreamProgress()
        calls: list[_PendingCall] = []
        by_index: dict[int, _PendingCall] = {}
        usage: Usage | None = None
        finished = False
        try:
            async for chunk in response:
                if chunk.usage is not None:
                    usage = _usage(chunk.usage)
                for choice in chunk.choices:
                    if choice.index != 0:
                        continue
                    delta = choice.delta
                    extra = delta.model_extra
                    if extra:
                        for field in REASONING_FIELDS:
                            thought = extra.get(field)
                            if isinstance(thought, str) and thought:
                                yield progress.reasoning_delta(thought)
                                break
                    content = delta.content or delta.refusal
                    if content:
                        yield progress.text_delta(content)
                    if delta.tool_calls:
                        _collect(delta.tool_calls, calls, by_index)
                    if choice.finish_reason is not None:
                        finished = True
                        for call in calls:
                            yield tool_call_from_json(call.id, call.name, "".join(call.parts))
                        calls.clear()
                        by_index.clear()
        except Exception as exc:
            error = self._translate(exc)
            if finished:
                # The answer is complete; only the trailing usage chunk was lost.
                return
            raise progress.broken(error) from exc
        finally:
            await response.close()
        if not finished:
            raise progress.unfinished()
        if usage is not None:
            yield usage

    def _translate(self, exc: Exception) -> ProviderError:
        """The `ProviderError` for an SDK or transport failure; anything else is a bug and is
        re-raised as it is."""
        import openai

        if isinstance(exc, openai.APIStatusError):
            message = self._secret.scrub(error_message(exc.body, exc.message))
            return status_error(exc.status_code, message, exc.response.headers)
        transport = self._transport_error(
            exc, timeout=openai.APITimeoutError, connection=openai.APIConnectionError
        )
        if transport is not None:
            return transport
        if isinstance(exc, openai.APIError):
            # An error event inside a 200 stream: the server failed while answering.
            message = self._secret.scrub(error_message(exc.body, exc.message))
            return ProviderError(f"the server reported an error: {message}", kind="unavailable")
        raise exc


def _collect(
    fragments: Sequence[Any], calls: list[_PendingCall], by_index: dict[int, _PendingCall]
) -> None:
    """Merge tool-call fragments into pending calls, keyed by their index."""
    for fragment in fragments:
        index = fragment.index
        if index is None:
            # Some servers leave out the index: a fragment with a new id starts a new call.
            index = len(calls) - 1 if calls and not fragment.id else len(calls)
        pending = by_index.get(index)
        if pending is None or (fragment.id and pending.id and fragment.id != pending.id):
            # A different id under a used index is a new call from a server that reuses indexes.
            pending = _PendingCall(fragment.id)
            calls.append(pending)
            by_index[index] = pending
        elif fragment.id and not pending.id:
            pending.id = fragment.id
        function = fragment.function
        if function is not None:
            if function.name and not pending.name:
                pending.name = function.name
            if function.arguments:
                pending.parts.append(function.arguments)


def _usage(raw: Any) -> Usage:
    details = raw.prompt_tokens_details
    cached = details.cached_tokens if details is not None else None
    return Usage(
        input_tokens=raw.prompt_tokens or 0,
        output_tokens=raw.completion_tokens or 0,
        cached_tokens=cached or 0,
    )


def function_tool(spec: ToolSpec) -> dict[str, Any]:
    """A `ToolSpec` as a Chat Completions function tool; the parameters schema is shared."""
    parameters = spec.parameters if isinstance(spec.parameters, dict) else dict(spec.parameters)
    return {
        "type": "function",
        "function": {"name": spec.name, "description": spec.description, "parameters": parameters},
    }


def render_messages(
    system: str, messages: Sequence[Message], *, native: bool, vision: bool = True
) -> list[dict[str, Any]]:
    """Neutral history as Chat Completions messages, with `system` first.

    Native: assistant turns carry `tool_calls`, results are `role: tool` messages. Text
    protocol: calls are `<tool_call>` blocks in the assistant text, and each run of results
    becomes one user message of `<tool_result>` blocks.
    """
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    results: list[tuple[str, str, str, bool]] = []
    for message in messages:
        if isinstance(message, ToolResultMessage):
            if native:
                out.append(
                    {"role": "tool", "tool_call_id": message.call_id, "content": message.content}
                )
            else:
                results.append((message.name, message.call_id, message.content, message.is_error))
            continue
        if results:
            out.append({"role": "user", "content": render_tool_results(results)})
            results = []
        if isinstance(message, AssistantMessage):
            out.append(_assistant(message, native=native))
        elif isinstance(message, SystemMessage):
            out.append({"role": "system", "content": message.content})
        else:
            out.append({"role": "user", "content": _user_content(message, vision=vision)})
    if results:
        out.append({"role": "user", "content": render_tool_results(results)})
    return out


def _user_content(message: UserMessage, *, vision: bool) -> str | list[dict[str, Any]]:
    """Plain text, or text plus `image_url` / `file` parts (data URLs) for attached media."""
    if not message.media:
        return message.content
    if not vision:
        return "\n".join([message.content, *(m.placeholder() for m in message.media)]).strip()
    parts: list[dict[str, Any]] = [{"type": "text", "text": message.content}]
    return parts + [_media_part(m) for m in message.media]


def _media_part(media: MediaPart) -> dict[str, Any]:
    if media.kind == "image":
        return {"type": "image_url", "image_url": {"url": media.data_url()}}
    return {"type": "file", "file": {"filename": media.name, "file_data": media.data_url()}}


def _assistant(message: AssistantMessage, *, native: bool) -> dict[str, Any]:
    if not message.tool_calls:
        return {"role": "assistant", "content": message.text}
    if not native:
        calls = [(c.id, c.name, c.arguments) for c in message.tool_calls]
        return {"role": "assistant", "content": render_assistant_tool_calls(message.text, calls)}
    return {
        "role": "assistant",
        "content": message.text or None,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": json.dumps(call.arguments, ensure_ascii=False),
                },
            }
            for call in message.tool_calls
        ],
    }
