"""Anthropic Messages adapter.

Uses the official `anthropic` SDK, imported when an adapter is built. The SDK's own retries are
off: `RetryingModel` owns that policy.

The system prompt goes in the separate `system` field. Native mode sends `ToolSpec`s as tools
(`input_schema` shares the spec's parameters dict) and renders history as `tool_use` blocks in
assistant turns and `tool_result` blocks grouped in the next user turn; text-protocol mode
sends no tools and renders calls and results as protocol text. Consecutive turns of one role
are merged, as the API wants roles to alternate.

Streaming: `text_delta` passes through, `thinking_delta` becomes `ReasoningDelta`, and each
`tool_use` block is assembled from its `input_json_delta` fragments and emitted complete at
its `content_block_stop`. Usage counts all input tokens (`input_tokens` plus cache reads and
writes) as input and reports cache reads as cached.

Deferred discovery keeps the prompt cache: with `deferred_loading` (the default) every tool of
`ModelRequest.deferred_tools` is sent in every request after the other tools, marked
`defer_loading: true`, so the `tools` array never changes during a session; the Messages API
keeps deferred tools out of the model's context until a `tool_reference` block in a tool result
loads them. A result that loaded tools (`ToolResultMessage.loaded_tools`) carries a
`tool_reference` for each, after its text. Loading a tool therefore only appends to the
conversation, and the cached prefix (tools, system, earlier messages) stays byte-identical.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from heron.messages import (
    AssistantMessage,
    MediaPart,
    Message,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
)
from heron.models.base import ModelPart, ModelRequest, Usage
from heron.models.retry import ErrorKind, ProviderError, error_message, status_error
from heron.models.sdk_adapter import SdkAdapter, StreamProgress, import_sdk, tool_call_from_json
from heron.models.text_protocol import render_assistant_tool_calls, render_tool_results
from heron.safety.secrets import Secret
from heron.tools.definition import ToolSpec

if TYPE_CHECKING:
    import anthropic

_STREAM_ERROR_KINDS: Final[Mapping[str, ErrorKind]] = {
    "rate_limit_error": "rate_limit",
    "overloaded_error": "unavailable",
    "api_error": "unavailable",
    "timeout_error": "unavailable",
}
"""Error events inside a 200 stream, by `error.type`; others are not worth retrying."""


class _PendingUse:
    __slots__ = ("id", "initial", "name", "parts")

    def __init__(self, call_id: str, name: str, initial: Any) -> None:
        self.id = call_id
        self.name = name
        self.initial = initial
        self.parts: list[str] = []


class AnthropicMessagesModel(SdkAdapter):
    """A Claude model behind the Messages API, streamed.

    Args:
        model: The model name (`claude-…`).
        api_key: The key (a `Secret` keeps it out of reprs).
        base_url: The API root; None for Anthropic itself (or `ANTHROPIC_BASE_URL`).
        native_tools: Native tool use, or heron's text protocol.
        max_tokens: Output token limit (the API requires one).
        timeout_s: Connect timeout and the longest silence allowed while streaming.
        prompt_cache: Mark the request for prompt caching, so each iteration of a turn reads
            the unchanged prefix of the conversation from the cache.
        request_options: Extra body fields sent with every request (`thinking`, …).
        vision: The model reads images and PDFs; None: by model name (`default_vision`).
        deferred_loading: Send discoverable tools with `defer_loading: true` and load them
            with `tool_reference` blocks (the Messages API's tool search mechanism), so loading
            a tool never changes the cached prefix. False: loaded tools are appended to the
            tool list, which costs one prompt-cache miss per loading.
    """

    _client: anthropic.AsyncAnthropic

    def __init__(
        self,
        model: str,
        *,
        api_key: Secret | str,
        base_url: str | None = None,
        native_tools: bool = True,
        max_tokens: int = 8192,
        timeout_s: float = 120.0,
        prompt_cache: bool = True,
        request_options: Mapping[str, Any] | None = None,
        vision: bool | None = None,
        deferred_loading: bool = True,
    ) -> None:
        sdk = import_sdk("anthropic", "the Anthropic provider needs")
        super().__init__(
            sdk.AsyncAnthropic,
            tool_param,
            model,
            provider="anthropic",
            api_key=api_key,
            base_url=base_url,
            native_tools=native_tools,
            timeout_s=timeout_s,
            request_options=request_options,
            vision=vision,
        )
        self._max_tokens = max_tokens
        self._prompt_cache = prompt_cache
        self._deferred_loading = deferred_loading
        self._deferred_for: tuple[Sequence[ToolSpec], Sequence[ToolSpec]] | None = None
        self._deferred_body: list[dict[str, Any]] = []

    # -- request ----------------------------------------------------------------------------

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for `request`, request options included."""
        deferred = request.deferred_tools if self._native and self._deferred_loading else ()
        system, messages = render_messages(
            request.system,
            request.messages,
            native=self._native,
            vision=self.vision,
            references=frozenset(s.name for s in deferred),
        )
        body: dict[str, Any] = {
            **self._options,
            "model": self.model,
            "max_tokens": self._max_tokens,
            "messages": messages,
            "stream": True,
        }
        if system:
            body["system"] = system
        if self._native and request.tools:
            body["tools"] = (
                self._with_deferred(request.tools, deferred)
                if deferred
                else self._tool_specs(request.tools)
            )
        if self._prompt_cache:
            body["cache_control"] = {"type": "ephemeral"}
        return body

    def _with_deferred(
        self, tools: Sequence[ToolSpec], deferred: Sequence[ToolSpec]
    ) -> list[dict[str, Any]]:
        """The loaded tools that are not deferred, then every deferred tool, marked: the same
        list whatever has been loaded (loading happens through `tool_reference`s)."""
        # The engine passes the same tuples while nothing changes; a new activation only adds
        # a deferred tool to `tools`, which leaves the list as it was.
        last = self._deferred_for
        if last is None or last[0] is not tools or last[1] is not deferred:
            names = {s.name for s in deferred}
            self._deferred_body = [tool_param(s) for s in tools if s.name not in names] + [
                {**tool_param(s), "defer_loading": True} for s in deferred
            ]
            self._deferred_for = (tools, deferred)
        return self._deferred_body

    # -- response ---------------------------------------------------------------------------

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelPart]:
        body = self.request_body(request)
        try:
            # As in the OpenAI adapter, the wire body goes in `extra_body` (sent as it is, and
            # documented to win over parameters), so request options may carry any field.
            response = await self._client.messages.create(
                model=self.model,
                max_tokens=self._max_tokens,
                messages=(),
                stream=True,
                extra_body=body,
            )
        except Exception as exc:
            raise self._translate(exc) from exc
        progress = StreamProgress()
        pending: dict[int, _PendingUse] = {}
        fresh = cache_read = cache_write = output_tokens = 0
        finished = False
        try:
            async for event in response:
                if event.type == "content_block_delta":
                    delta = event.delta
                    if delta.type == "text_delta":
                        yield progress.text_delta(delta.text)
                    elif delta.type == "thinking_delta":
                        yield progress.reasoning_delta(delta.thinking)
                    elif delta.type == "input_json_delta":
                        use = pending.get(event.index)
                        if use is not None:
                            use.parts.append(delta.partial_json)
                elif event.type == "content_block_start":
                    block = event.content_block
                    if block.type == "tool_use":
                        pending[event.index] = _PendingUse(block.id, block.name, block.input)
                    elif block.type == "text" and block.text:
                        yield progress.text_delta(block.text)
                    elif block.type == "thinking" and block.thinking:
                        yield progress.reasoning_delta(block.thinking)
                elif event.type == "content_block_stop":
                    use = pending.pop(event.index, None)
                    if use is not None:
                        progress.calls += 1
                        yield _complete(use)
                elif event.type == "message_start":
                    start = event.message.usage
                    fresh, output_tokens = start.input_tokens, start.output_tokens
                    cache_read = start.cache_read_input_tokens or 0
                    cache_write = start.cache_creation_input_tokens or 0
                elif event.type == "message_delta":
                    # Counts here are cumulative; input counts appear only when they changed.
                    delta_usage = event.usage
                    output_tokens = delta_usage.output_tokens
                    fresh = delta_usage.input_tokens or fresh
                    cache_read = delta_usage.cache_read_input_tokens or cache_read
                    cache_write = delta_usage.cache_creation_input_tokens or cache_write
                elif event.type == "message_stop":
                    finished = True
        except Exception as exc:
            raise progress.broken(self._translate(exc)) from exc
        finally:
            await response.close()
        if not finished:
            raise progress.unfinished()
        yield Usage(
            input_tokens=fresh + cache_read + cache_write,
            output_tokens=output_tokens,
            cached_tokens=cache_read,
        )

    def _translate(self, exc: Exception) -> ProviderError:
        """The `ProviderError` for an SDK or transport failure; anything else is a bug and is
        re-raised as it is."""
        import anthropic

        if isinstance(exc, anthropic.APIStatusError):
            message = self._secret.scrub(error_message(exc.body, exc.message))
            if exc.status_code >= 400:
                return status_error(exc.status_code, message, exc.response.headers)
            # An error event inside a 200 stream: the body names the error type.
            error = exc.body.get("error") if isinstance(exc.body, dict) else None
            error_type = error.get("type") if isinstance(error, dict) else None
            return ProviderError(
                f"the server reported an error: {message}",
                kind=_STREAM_ERROR_KINDS.get(str(error_type), "request"),
            )
        transport = self._transport_error(
            exc, timeout=anthropic.APITimeoutError, connection=anthropic.APIConnectionError
        )
        if transport is not None:
            return transport
        raise exc


def _complete(use: _PendingUse) -> ModelPart:
    if use.parts:
        return tool_call_from_json(use.id, use.name, "".join(use.parts))
    # No fragments: the start block already held the whole input.
    arguments = use.initial if isinstance(use.initial, dict) else {}
    return tool_call_from_json(use.id, use.name, json.dumps(arguments, ensure_ascii=False))


def tool_param(spec: ToolSpec) -> dict[str, Any]:
    """A `ToolSpec` as a Messages API tool; the parameters schema is shared, not copied."""
    schema = spec.parameters if isinstance(spec.parameters, dict) else dict(spec.parameters)
    return {"name": spec.name, "description": spec.description, "input_schema": schema}


def render_messages(
    system: str,
    messages: Sequence[Message],
    *,
    native: bool,
    vision: bool = True,
    references: Collection[str] = frozenset(),
) -> tuple[str, list[dict[str, Any]]]:
    """Neutral history as `(system, messages)` for the Messages API.

    A leading `SystemMessage` joins `system`. Native: assistant turns carry `tool_use` blocks
    and results are `tool_result` blocks at the start of the next user turn; a result's loaded
    tools that are in `references` (the request's deferred tools) follow its text as
    `tool_reference` blocks. Text protocol: calls are `<tool_call>` blocks in the assistant text
    and each run of results becomes one text block of `<tool_result>`s. Turns of the same role
    are merged into one.
    """
    system_parts = [system] if system else []
    out: list[dict[str, Any]] = []
    results: list[tuple[str, str, str, bool]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    def flush_results() -> None:
        if results:
            add("user", [{"type": "text", "text": render_tool_results(results)}])
            results.clear()

    for message in messages:
        if isinstance(message, ToolResultMessage):
            if not native:
                results.append((message.name, message.call_id, message.content, message.is_error))
                continue
            loaded = [n for n in message.loaded_tools if n in references]
            content: str | list[dict[str, Any]] = message.content
            if loaded:
                content = [{"type": "text", "text": message.content}] + [
                    {"type": "tool_reference", "tool_name": name} for name in loaded
                ]
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.call_id,
                "content": content,
            }
            if message.is_error:
                block["is_error"] = True
            add("user", [block])
            continue
        flush_results()
        if isinstance(message, SystemMessage):
            system_parts.append(message.content)
        elif isinstance(message, AssistantMessage):
            add("assistant", _assistant_blocks(message, native=native))
        else:
            add("user", _user_blocks(message, vision=vision))
    flush_results()
    return "\n\n".join(system_parts), out


def _user_blocks(message: UserMessage, *, vision: bool) -> list[dict[str, Any]]:
    """`image` / `document` blocks for attached media (base64 sources), then the text; a model
    without vision gets a labelled placeholder per file instead."""
    if not message.media:
        return [{"type": "text", "text": message.content}]
    if not vision:
        text = "\n".join([message.content, *(m.placeholder() for m in message.media)]).strip()
        return [{"type": "text", "text": text}]
    blocks = [_media_block(m) for m in message.media]
    # The API rejects empty text blocks; a message may be media alone.
    return blocks + ([{"type": "text", "text": message.content}] if message.content else [])


def _media_block(media: MediaPart) -> dict[str, Any]:
    source = {"type": "base64", "media_type": media.mime_type, "data": media.base64()}
    return {"type": "image" if media.kind == "image" else "document", "source": source}


def _assistant_blocks(message: AssistantMessage, *, native: bool) -> list[dict[str, Any]]:
    if not native and message.tool_calls:
        calls = [(c.id, c.name, c.arguments) for c in message.tool_calls]
        return [{"type": "text", "text": render_assistant_tool_calls(message.text, calls)}]
    # The API rejects empty text blocks, and a turn with calls may have no text.
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message.text}] if message.text else []
    blocks += [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
        for c in message.tool_calls
    ]
    return blocks
