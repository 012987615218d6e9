"""What each model request cost, recorded at the model.

The engine reads the `Usage` parts a stream reports but keeps them to itself, so whoever wants
a per-request account (`/cost` in `heron chat`, the multimodal demo's comparison of paths)
wraps the model in a `MeteredModel`. It records one `ModelCall` per request, before the first
part arrives (a cancelled stream still counts as a request), with the usage the provider
reported and, when the meter has a `TokenCounter`, the request's input tokens counted locally
by `heron.models.tokens.count_request`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from heron.models.base import Model, ModelPart, ModelRequest, Usage
from heron.models.tokens import TokenCounter, count_request

__all__ = ["MeteredModel", "ModelCall"]


@dataclass(kw_only=True, slots=True)
class ModelCall:
    """One provider request and the usage it reported (None when it reported none)."""

    model: str
    turn_id: str
    iteration: int
    usage: Usage | None = None
    counted_tokens: int | None = None
    """The request's input tokens as the meter's counter counts them; None without a counter."""


class MeteredModel:
    """Wraps a model and keeps, per request, the token usage its stream reported.

    Args:
        inner: The model that answers.
        calls: Where the `ModelCall`s go; pass the list of an earlier meter to keep one
            account across a model switch. None starts a new list.
        counter: Also count each request's input tokens locally (system prompt, history and
            tool definitions), e.g. `counter_for_model(inner.name)`. None counts nothing,
            which costs nothing per request.
    """

    def __init__(
        self,
        inner: Model,
        calls: list[ModelCall] | None = None,
        *,
        counter: TokenCounter | None = None,
    ) -> None:
        self.inner = inner
        self.calls: list[ModelCall] = [] if calls is None else calls
        self.counter = counter

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def native_tools(self) -> bool:
        return self.inner.native_tools

    @property
    def counted_tokens(self) -> int:
        """Input tokens of every recorded request, as the counter counted them."""
        return sum(call.counted_tokens or 0 for call in self.calls)

    @property
    def reported_input_tokens(self) -> int | None:
        """Input tokens of every recorded request as the providers reported them; None when
        any request reported no usage."""
        if any(call.usage is None for call in self.calls):
            return None
        return sum(call.usage.input_tokens for call in self.calls if call.usage is not None)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelPart]:
        call = ModelCall(
            model=self.inner.name, turn_id=request.turn_id, iteration=request.iteration
        )
        if self.counter is not None:
            call.counted_tokens = count_request(
                self.counter, system=request.system, messages=request.messages, tools=request.tools
            )
        # Recorded before the first part: a cancelled stream still counts as a request.
        self.calls.append(call)
        async for part in self.inner.stream(request):
            if isinstance(part, Usage):
                call.usage = _add_usage(call.usage, part)
            yield part


def _add_usage(total: Usage | None, part: Usage) -> Usage:
    """`total` plus `part`, field by field (`part` itself when there is no total yet)."""
    if total is None:
        return part
    return Usage(
        input_tokens=total.input_tokens + part.input_tokens,
        output_tokens=total.output_tokens + part.output_tokens,
        cached_tokens=total.cached_tokens + part.cached_tokens,
    )
