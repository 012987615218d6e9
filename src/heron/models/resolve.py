"""Model strings to models: the factory of heron's provider adapters.

`resolve_model` understands:

* `openai:MODEL` — OpenAI Chat Completions; key from `OPENAI_API_KEY`.
* `anthropic:MODEL` — Anthropic Messages; key from `ANTHROPIC_API_KEY`.
* `ollama:MODEL` — a local Ollama server's OpenAI-compatible endpoint
  (default `http://127.0.0.1:11434/v1`); no key needed.
* `openai-compatible:MODEL` — any server speaking Chat Completions (vLLM, llama.cpp server,
  LM Studio, …); the base URL is required. A key, when the server wants one, comes from
  `api_key` or `OPENAI_COMPATIBLE_API_KEY` — never from `OPENAI_API_KEY`, which must not be
  sent to a third-party server.
* `scripted:FILE` — a `ScriptedModel` script (`scripted:demo` is the bundled demo).

Each model uses native tool calls or heron's text protocol. `ProviderConfig.protocols` maps
glob patterns of model strings to `native` or `text`; it is consulted before
`DEFAULT_PROTOCOLS` (local models known to lack tool support), and anything unmatched is native.

Provider models come wrapped in `RetryingModel` unless `ProviderConfig.retry` is None. API keys
are held in `Secret`s (`heron.safety.secrets`) and scrubbed from every error message.

This module is the only one that names the concrete adapters, and it imports each one only when
a model string asks for it (so `import heron` loads no provider SDK). What the adapters share
lives in `heron.models.sdk_adapter`; nothing imports back into this module from the adapters.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from heron.errors import ConfigurationError
from heron.models.base import Model, ModelError
from heron.models.retry import RetryingModel, RetryPolicy
from heron.safety.secrets import Secret

__all__ = [
    "DEFAULT_PROTOCOLS",
    "OLLAMA_BASE_URL",
    "PROVIDERS",
    "ProviderConfig",
    "ProviderConfigError",
    "ToolProtocol",
    "resolve_model",
    "tool_protocol",
]

ToolProtocol = Literal["native", "text"]

PROVIDERS: Final = ("openai", "anthropic", "ollama", "openai-compatible", "scripted")
OLLAMA_BASE_URL: Final = "http://127.0.0.1:11434/v1"

DEFAULT_PROTOCOLS: Final[Mapping[str, ToolProtocol]] = {
    # Ollama rejects `tools` for models whose template has no tool support.
    "ollama:gemma*": "text",
    "ollama:phi": "text",
    "ollama:phi:*": "text",
    "ollama:phi3*": "text",
    "ollama:phi4": "text",
    "ollama:phi4:*": "text",
    "ollama:llama2*": "text",
    "ollama:codellama*": "text",
    "ollama:llava*": "text",
    "ollama:tinyllama*": "text",
    "ollama:starcoder*": "text",
    "ollama:orca-mini*": "text",
    "ollama:vicuna*": "text",
}
"""Models known to lack native tool calls; everything else defaults to native."""

_KEYLESS: Final = "unused"
"""Sent where a server wants no key: the OpenAI SDK insists on having one."""


class ProviderConfigError(ConfigurationError, ModelError):
    """A model string or provider setting is wrong (unknown provider, missing key or URL)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ProviderConfig:
    """Settings for the models `resolve_model` builds."""

    protocols: Mapping[str, ToolProtocol] = field(default_factory=dict)
    """Glob pattern over `provider:model` → `native` | `text`; wins over `DEFAULT_PROTOCOLS`."""
    timeout_s: float = 120.0
    """Connect timeout, and the longest silence allowed while a response streams."""
    retry: RetryPolicy | None = field(default_factory=RetryPolicy)
    """None returns the bare adapter, without retries."""
    max_tokens: int = 8192
    """Output token limit for Anthropic, which requires one."""
    request_options: Mapping[str, Any] = field(default_factory=dict)
    """Extra request body fields (`temperature`, `reasoning_effort`, `thinking`, …)."""
    environ: Mapping[str, str] | None = None
    """Where API keys are looked up; `os.environ` when None."""


def tool_protocol(spec: str, config: ProviderConfig | None = None) -> ToolProtocol:
    """Whether `spec` (`provider:model`) uses native tool calls or the text protocol."""
    overrides = config.protocols if config is not None else {}
    for table in (overrides, DEFAULT_PROTOCOLS):
        for pattern, protocol in table.items():
            if fnmatch.fnmatchcase(spec, pattern):
                return protocol
    return "native"


def resolve_model(
    spec: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    config: ProviderConfig | None = None,
) -> Model:
    """The model a `provider:model` string names: the strings `heron run --model` takes.

    ```python
    model = resolve_model("openai:gpt-4o-mini")  # key from OPENAI_API_KEY
    local = resolve_model("openai-compatible:qwen3", base_url="http://127.0.0.1:8000/v1")
    demo = resolve_model("scripted:demo")
    ```

    Args:
        spec: `PROVIDER:MODEL`, where PROVIDER is one of `PROVIDERS`: `openai:gpt-4o-mini`,
            `anthropic:claude-sonnet-4-5`, `ollama:qwen3:8b`, `openai-compatible:NAME` (needs
            `base_url`), or `scripted:FILE` for a `ScriptedModel` script (`scripted:demo` is the
            bundled quick-start script).
        base_url: The API root (`http://127.0.0.1:8000/v1`); None for the provider's default
            (Ollama: `OLLAMA_BASE_URL`). Ignored for `scripted:`.
        api_key: The key; None looks it up in `config.environ` (`OPENAI_API_KEY`,
            `ANTHROPIC_API_KEY`, `OPENAI_COMPATIBLE_API_KEY`). Ollama needs none.
        config: Tool protocols, timeouts, the retry policy, extra request fields and where keys
            are looked up; None for the defaults.

    Returns:
        The adapter (`OpenAIChatModel`, `AnthropicMessagesModel`), wrapped in `RetryingModel`
        unless `config.retry` is None; or a `ScriptedModel`. The provider's SDK is imported
        only here, when its model is asked for.

    Raises:
        ProviderConfigError: `spec` is not `PROVIDER:MODEL`, names an unknown provider, or needs
            a key or a base URL that was not given. Nothing is sent over the network.
        ModelError: a `scripted:` file cannot be loaded, or the provider's SDK is not installed
            (the message names the extra that installs it).
    """
    config = config or ProviderConfig()
    provider, sep, model = spec.partition(":")
    if not sep or not model:
        raise ProviderConfigError(
            f"model {spec!r} is not of the form PROVIDER:MODEL (providers: {', '.join(PROVIDERS)})"
        )
    if provider == "scripted":
        return _scripted(model)
    environ = os.environ if config.environ is None else config.environ
    native = tool_protocol(spec, config) == "native"
    adapter: Model
    if provider == "anthropic":
        from heron.models.anthropic_messages import AnthropicMessagesModel

        adapter = AnthropicMessagesModel(
            model,
            api_key=_required_key(spec, api_key, "ANTHROPIC_API_KEY", environ),
            base_url=base_url,
            native_tools=native,
            max_tokens=config.max_tokens,
            timeout_s=config.timeout_s,
            request_options=config.request_options,
        )
    elif provider in ("openai", "ollama", "openai-compatible"):
        from heron.models.openai_chat import OpenAIChatModel

        if provider == "openai":
            key = _required_key(spec, api_key, "OPENAI_API_KEY", environ)
        elif provider == "ollama":
            base_url = base_url or OLLAMA_BASE_URL
            key = Secret(api_key or _KEYLESS)
        else:
            if not base_url:
                raise ProviderConfigError(
                    f"{spec} needs the server's base URL, e.g. http://127.0.0.1:8000/v1"
                )
            key = Secret(api_key or environ.get("OPENAI_COMPATIBLE_API_KEY") or _KEYLESS)
        adapter = OpenAIChatModel(
            model,
            api_key=key,
            base_url=base_url,
            provider=provider,
            native_tools=native,
            timeout_s=config.timeout_s,
            request_options=config.request_options,
        )
    else:
        raise ProviderConfigError(
            f"unknown model provider {provider!r} in {spec!r} (providers: {', '.join(PROVIDERS)})"
        )
    return adapter if config.retry is None else RetryingModel(adapter, config.retry)


def _scripted(target: str) -> Model:
    from heron.models.scripted import ScriptedModel, demo_script_path

    return ScriptedModel.from_file(demo_script_path() if target == "demo" else target)


def _required_key(
    spec: str, explicit: str | None, variable: str, environ: Mapping[str, str]
) -> Secret:
    value = explicit or environ.get(variable)
    if not value:
        raise ProviderConfigError(f"{spec} needs an API key: set {variable} or pass api_key")
    return Secret(value)
