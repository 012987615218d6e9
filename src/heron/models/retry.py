"""Provider faults: typed errors, retries with backoff, fallback chains, interrupted streams.

Adapters translate every SDK failure into a `ProviderError` whose `kind` says whether trying
again can help. `RetryingModel` retries those that can — rate limits, 5xx, overload, connection
resets, timeouts — with jittered exponential backoff, honouring the provider's `Retry-After`.
The SDKs' own retries are switched off by the adapters, so this is the only retry policy.

A retry or a fallback only ever happens before the first part was emitted: once text reached
the engine, a second attempt would show it twice. A stream that dies after output raises
`StreamInterrupted` carrying what was received, so the engine can record it as interrupted
instead of silently keeping a truncated answer.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from heron.models.base import Model, ModelError, ModelPart, ModelRequest

ErrorKind = Literal[
    "rate_limit", "unavailable", "timeout", "connection", "request", "auth", "protocol"
]
"""`rate_limit` (429), `unavailable` (5xx, 408, 409, overload), `timeout`, `connection` (refused,
reset, stream ended early), `request` (4xx misuse), `auth` (401/403), `protocol` (an answer
heron cannot read)."""

RETRYABLE_KINDS: Final[frozenset[ErrorKind]] = frozenset(
    {"rate_limit", "unavailable", "timeout", "connection"}
)

_RETRYABLE_STATUS: Final = frozenset({408, 409})
"""Request timeout and conflict (a lock held by a concurrent request): worth another try."""


class ProviderError(ModelError):
    """A provider request failed. The message never contains the API key."""

    def __init__(
        self,
        message: str,
        *,
        kind: ErrorKind,
        status: int | None = None,
        retry_after_s: float | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.status = status
        self.retry_after_s = retry_after_s
        """How long the provider asked heron to wait (`Retry-After`), when it said."""
        self.retryable = kind in RETRYABLE_KINDS if retryable is None else retryable


class RetriesExhaustedError(ModelError):
    """Every attempt allowed by the retry policy failed; `last_error` is the final failure."""

    def __init__(self, message: str, *, last_error: ProviderError, attempts: int) -> None:
        super().__init__(message)
        self.last_error = last_error
        self.attempts = attempts


class AllModelsFailedError(ModelError):
    """Every model of a `FallbackModel` failed before answering."""

    def __init__(self, message: str, *, failures: Sequence[tuple[str, ModelError]]) -> None:
        super().__init__(message)
        self.failures = tuple(failures)


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms` or `Retry-After` (seconds or an HTTP date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def transport_failure(exc: BaseException) -> Literal["timeout", "connection"] | None:
    """Whether `exc` is a raw HTTP-client timeout or connection failure, as an SDK may let
    through while a stream is read.

    Checks whichever HTTP client is loaded (`httpx2` for current SDKs, `httpx` for older ones),
    so none is imported here.
    """
    for module_name in ("httpx2", "httpx"):
        module = sys.modules.get(module_name)
        if module is None:
            continue
        if isinstance(exc, module.TimeoutException):
            return "timeout"
        if isinstance(exc, module.TransportError):
            return "connection"
    return None


def error_message(body: object, fallback: str) -> str:
    """The human message in a provider's JSON error body (OpenAI or Anthropic shape)."""
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping):
            message = error.get("message")
            kind = error.get("type")
            if isinstance(message, str) and message:
                return f"{kind}: {message}" if isinstance(kind, str) and kind else message
        elif isinstance(error, str) and error:
            return error
    return fallback


def status_error(status: int, message: str, headers: Mapping[str, str]) -> ProviderError:
    """The `ProviderError` for an HTTP error status, with `Retry-After` and `x-should-retry`.

    `message` must already be scrubbed of credentials."""
    if status == 429:
        kind: ErrorKind = "rate_limit"
    elif status >= 500 or status in _RETRYABLE_STATUS:
        kind = "unavailable"
    elif status in (401, 403):
        kind = "auth"
    else:
        kind = "request"
    # Providers may overrule the status with an explicit hint; the SDKs honour it too.
    hint = headers.get("x-should-retry")
    retryable = {"true": True, "false": False}.get(hint or "")
    return ProviderError(
        f"HTTP {status}: {message}",
        kind=kind,
        status=status,
        retry_after_s=parse_retry_after(headers),
        retryable=retryable,
    )


Sleep = Callable[[float], Awaitable[object]]


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """When and how long to wait before trying a failed request again.

    Attempt `n` (from 1) that failed without a `Retry-After` waits
    `min(max_delay_s, base_delay_s * 2 ** (n - 1))`, reduced by up to `jitter` of itself at
    random so clients that failed together do not retry together. A `Retry-After` is honoured
    exactly; one longer than `max_retry_after_s` ends the retries at once with a clear error.
    """

    max_attempts: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 20.0
    max_retry_after_s: float = 60.0
    jitter: float = 0.5
    sleep: Sleep = field(default=asyncio.sleep, compare=False)
    """Injected so tests can record waits instead of waiting."""
    random: Callable[[], float] = field(default=random.random, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be between 0 and 1")

    def delay(self, attempt: int, error: ProviderError) -> float | None:
        """Seconds to wait after failed attempt `attempt`, or None to stop retrying."""
        if not error.retryable or attempt >= self.max_attempts:
            return None
        if error.retry_after_s is not None:
            if error.retry_after_s > self.max_retry_after_s:
                return None
            return error.retry_after_s
        backoff = min(self.max_delay_s, self.base_delay_s * 2.0 ** (attempt - 1))
        return backoff * (1 - self.jitter * self.random())


class RetryingModel:
    """Wraps a model so retryable failures before the first emitted part are tried again."""

    def __init__(self, model: Model, policy: RetryPolicy | None = None) -> None:
        self.model = model
        self.policy = policy or RetryPolicy()

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def native_tools(self) -> bool:
        return self.model.native_tools

    def __repr__(self) -> str:
        return f"RetryingModel({self.model!r})"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelPart]:
        attempt = 0
        while True:
            attempt += 1
            emitted = False
            try:
                async for part in self.model.stream(request):
                    emitted = True
                    yield part
                return
            except ProviderError as exc:
                if emitted or not exc.retryable:
                    raise
                wait = self.policy.delay(attempt, exc)
                if wait is None:
                    raise self._exhausted(exc, attempt) from exc
            await self.policy.sleep(wait)

    def _exhausted(self, exc: ProviderError, attempts: int) -> RetriesExhaustedError:
        if exc.retry_after_s is not None and exc.retry_after_s > self.policy.max_retry_after_s:
            return RetriesExhaustedError(
                f"{exc} — the provider asks to wait {exc.retry_after_s:g} s, longer than the "
                f"{self.policy.max_retry_after_s:g} s heron waits",
                last_error=exc,
                attempts=attempts,
            )
        return RetriesExhaustedError(
            f"{exc} (gave up after {attempts} attempts)", last_error=exc, attempts=attempts
        )

    async def aclose(self) -> None:
        """Close the wrapped model's connections."""
        await close_model(self.model)


class FallbackModel:
    """Tries each model in turn; the next one only when the previous failed before emitting.

    All models must agree on `native_tools`: the engine shapes the request (tool specs or the
    text protocol in the system prompt) before it knows which model will answer.
    """

    def __init__(self, models: Sequence[Model]) -> None:
        if not models:
            raise ValueError("FallbackModel needs at least one model")
        native = {m.native_tools for m in models}
        if len(native) > 1:
            names = ", ".join(
                f"{m.name} ({'native' if m.native_tools else 'text'})" for m in models
            )
            raise ValueError(
                f"models in a fallback chain must use the same tool protocol; got {names}"
            )
        self.models = tuple(models)
        self._name = " | ".join(m.name for m in models)

    @property
    def name(self) -> str:
        return self._name

    @property
    def native_tools(self) -> bool:
        return self.models[0].native_tools

    def __repr__(self) -> str:
        return f"FallbackModel({list(self.models)!r})"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelPart]:
        failures: list[tuple[str, ModelError]] = []
        for model in self.models:
            emitted = False
            try:
                async for part in model.stream(request):
                    emitted = True
                    yield part
                return
            except ModelError as exc:
                if emitted:
                    raise
                failures.append((model.name, exc))
        summary = "; ".join(f"{name}: {exc}" for name, exc in failures)
        raise AllModelsFailedError(f"every model failed — {summary}", failures=failures)

    async def aclose(self) -> None:
        """Close every model's connections."""
        for model in self.models:
            await close_model(model)


async def close_model(model: object) -> None:
    """Close `model`'s network resources when it has any (`aclose`); others are left alone."""
    aclose = getattr(model, "aclose", None)
    if aclose is not None:
        await aclose()
