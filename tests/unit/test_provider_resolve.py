"""Model strings to models (providers, keys, base URLs, tool protocols, `Agent(model="…")`),
the retry policy's arithmetic, and fallback chains."""

from __future__ import annotations

import email.utils
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from heron import Agent, FunctionModel, ModelTurn, ScriptedModel
from heron.messages import UserMessage
from heron.models.anthropic_messages import AnthropicMessagesModel
from heron.models.base import (
    Model,
    ModelError,
    ModelPart,
    ModelRequest,
    StreamInterrupted,
    TextDelta,
)
from heron.models.openai_chat import OpenAIChatModel
from heron.models.resolve import (
    OLLAMA_BASE_URL,
    ProviderConfig,
    ProviderConfigError,
    resolve_model,
    tool_protocol,
)
from heron.models.retry import (
    AllModelsFailedError,
    FallbackModel,
    ProviderError,
    RetryingModel,
    RetryPolicy,
    close_model,
    parse_retry_after,
    status_error,
)
from support.protocol_servers import ProtocolServer, Reply, openai_stream

NO_RETRY = ProviderConfig(retry=None, environ={})


@pytest.fixture
async def closing() -> AsyncIterator[list[Model]]:
    """Models built by a test, closed after it."""
    models: list[Model] = []
    yield models
    for model in models:
        await close_model(model)


def ask() -> ModelRequest:
    return ModelRequest(system="", messages=[UserMessage(content="hi")], tools=())


async def collect(model: Model) -> list[ModelPart]:
    return [part async for part in model.stream(ask())]


# -- resolution -----------------------------------------------------------------------------


async def test_each_provider_prefix_resolves_to_its_adapter(closing: list[Model]) -> None:
    config = ProviderConfig(
        retry=None, environ={"OPENAI_API_KEY": "sk-o", "ANTHROPIC_API_KEY": "a"}
    )
    openai = resolve_model("openai:gpt-4.1", config=config)
    anthropic = resolve_model("anthropic:claude-sonnet-4-5", config=config)
    ollama = resolve_model("ollama:qwen3:8b", config=config)
    other = resolve_model(
        "openai-compatible:llama", base_url="http://127.0.0.1:8000/v1", config=config
    )
    closing.extend([openai, anthropic, ollama, other])
    assert isinstance(openai, OpenAIChatModel) and openai.name == "openai:gpt-4.1"
    assert isinstance(anthropic, AnthropicMessagesModel)
    assert anthropic.name == "anthropic:claude-sonnet-4-5"
    assert isinstance(ollama, OpenAIChatModel) and ollama.name == "ollama:qwen3:8b"
    assert ollama.base_url.rstrip("/") == OLLAMA_BASE_URL
    assert isinstance(other, OpenAIChatModel) and other.name == "openai-compatible:llama"
    assert other.base_url.rstrip("/") == "http://127.0.0.1:8000/v1"


async def test_provider_models_are_wrapped_in_the_retry_policy_by_default(
    closing: list[Model],
) -> None:
    policy = RetryPolicy(max_attempts=2)
    model = resolve_model("ollama:qwen3", config=ProviderConfig(retry=policy))
    closing.append(model)
    assert isinstance(model, RetryingModel) and model.policy is policy
    assert isinstance(model.model, OpenAIChatModel)
    assert model.name == "ollama:qwen3" and model.native_tools


async def test_ollama_talks_to_the_given_base_url_without_a_key(
    protocol_server: ProtocolServer, closing: list[Model]
) -> None:
    model = resolve_model("ollama:qwen3", base_url=f"{protocol_server.url}/v1", config=NO_RETRY)
    closing.append(model)
    protocol_server.queue(Reply(events=openai_stream(text=["hello"])))
    parts = await collect(model)
    assert parts[-1] == TextDelta(text="hello")
    assert protocol_server.requests[0].body["model"] == "qwen3"


def test_openai_compatible_without_a_base_url_is_a_clear_error() -> None:
    with pytest.raises(ProviderConfigError, match="needs the server's base URL"):
        resolve_model("openai-compatible:llama", config=NO_RETRY)


@pytest.mark.parametrize(
    ("spec", "variable"),
    [("openai:gpt-4.1", "OPENAI_API_KEY"), ("anthropic:claude-x", "ANTHROPIC_API_KEY")],
)
def test_a_missing_api_key_names_the_variable_to_set(spec: str, variable: str) -> None:
    with pytest.raises(ProviderConfigError, match=f"needs an API key: set {variable}"):
        resolve_model(spec, config=ProviderConfig(environ={variable: ""}))


async def test_the_key_comes_from_the_environment_and_never_shows_in_the_repr(
    protocol_server: ProtocolServer, closing: list[Model]
) -> None:
    key = "sk-env-0123456789abcdef"
    config = ProviderConfig(environ={"OPENAI_API_KEY": key})
    model = resolve_model("openai:gpt-test", base_url=f"{protocol_server.url}/v1", config=config)
    closing.append(model)
    protocol_server.queue(Reply(events=openai_stream(text=["ok"])))
    await collect(model)
    assert protocol_server.requests[0].headers["authorization"] == f"Bearer {key}"
    assert key not in repr(model) and key not in str(vars(model))


async def test_an_explicit_key_wins_over_the_environment(
    protocol_server: ProtocolServer, closing: list[Model]
) -> None:
    config = ProviderConfig(retry=None, environ={"OPENAI_API_KEY": "sk-from-env"})
    model = resolve_model(
        "openai:gpt-test",
        base_url=f"{protocol_server.url}/v1",
        api_key="sk-explicit",
        config=config,
    )
    closing.append(model)
    protocol_server.queue(Reply(events=openai_stream(text=["ok"])))
    await collect(model)
    assert protocol_server.requests[0].headers["authorization"] == "Bearer sk-explicit"


async def test_openai_compatible_servers_never_receive_the_openai_key(
    protocol_server: ProtocolServer, closing: list[Model]
) -> None:
    config = ProviderConfig(retry=None, environ={"OPENAI_API_KEY": "sk-openai-secret"})
    model = resolve_model(
        "openai-compatible:llama", base_url=f"{protocol_server.url}/v1", config=config
    )
    closing.append(model)
    protocol_server.queue(Reply(events=openai_stream(text=["ok"])))
    await collect(model)
    assert "sk-openai-secret" not in protocol_server.requests[0].headers["authorization"]


@pytest.mark.parametrize("spec", ["gpt-4.1", "openai:", "bedrock:claude"])
def test_malformed_or_unknown_model_strings_list_the_providers(spec: str) -> None:
    with pytest.raises(ProviderConfigError, match="openai-compatible"):
        resolve_model(spec, config=NO_RETRY)


def test_scripted_models_still_load_from_a_file(tmp_path: Path) -> None:
    script = tmp_path / "turns.yaml"
    script.write_text("turns:\n  - text: hello\n", encoding="utf-8")
    model = resolve_model(f"scripted:{script}")
    assert isinstance(model, ScriptedModel) and model.name == "scripted:turns.yaml"
    assert isinstance(resolve_model("scripted:demo"), ScriptedModel)


def test_a_missing_script_is_a_model_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="cannot load model script"):
        resolve_model(f"scripted:{tmp_path / 'nope.yaml'}")


def test_resolving_imports_neither_the_demo_nor_an_adapter_it_was_not_asked_for() -> None:
    probe = (
        "import sys\n"
        "from heron.models.resolve import resolve_model\n"
        "assert resolve_model('scripted:demo').name == 'scripted:quickstart.yaml'\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('heron.demo', 'heron.models.')))\n"
        "print(' '.join(loaded))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = done.stdout.split()
    assert "heron.models.scripted" in loaded
    assert not [m for m in loaded if m.startswith("heron.demo")]
    assert "heron.models.openai_chat" not in loaded
    assert "heron.models.anthropic_messages" not in loaded


# -- model strings in Agent -----------------------------------------------------------------


async def test_an_agent_takes_a_scripted_model_string(tmp_path: Path) -> None:
    script = tmp_path / "turns.yaml"
    script.write_text("turns:\n  - text: hello from the script\n", encoding="utf-8")
    agent = Agent(model=f"scripted:{script}")
    assert isinstance(agent.model, ScriptedModel)
    result = await agent.run("hi")
    assert result.ok and result.text == "hello from the script"


async def test_an_agent_takes_a_provider_model_string_and_talks_to_its_server(
    protocol_server: ProtocolServer,
) -> None:
    config = ProviderConfig(environ={"OPENAI_API_KEY": "sk-agent-0123456789"})
    agent = Agent(model="openai:m", base_url=f"{protocol_server.url}/v1", provider_config=config)
    try:
        assert isinstance(agent.model, RetryingModel)
        assert isinstance(agent.model.model, OpenAIChatModel)
        assert agent.model.name == "openai:m"
        protocol_server.queue(Reply(events=openai_stream(text=["hello ", "from m"])))
        result = await agent.run("hi")
    finally:
        await close_model(agent.model)
    assert result.ok and result.text == "hello from m"
    assert protocol_server.requests[0].body["model"] == "m"
    assert protocol_server.requests[0].headers["authorization"] == "Bearer sk-agent-0123456789"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("bedrock:claude", "unknown model provider 'bedrock'"),
        ("gpt-4o", "is not of the form PROVIDER:MODEL"),
    ],
)
def test_an_agent_with_an_unknown_model_string_fails_at_construction(
    spec: str, message: str
) -> None:
    with pytest.raises(ProviderConfigError, match=message) as caught:
        Agent(model=spec)
    assert "openai-compatible" in str(caught.value)  # the providers it could have named


def test_an_agent_given_a_model_refuses_settings_for_model_strings() -> None:
    with pytest.raises(ProviderConfigError, match="apply to a model string only"):
        Agent(model=ScriptedModel([]), base_url="http://127.0.0.1:1/v1")


# -- tool protocol per model ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "protocol"),
    [
        ("openai:gpt-4.1", "native"),
        ("anthropic:claude-sonnet-4-5", "native"),
        ("ollama:qwen3:8b", "native"),
        ("ollama:llama3.1", "native"),
        ("ollama:phi4-mini", "native"),
        ("ollama:gemma3:4b", "text"),
        ("ollama:phi4", "text"),
        ("ollama:llama2:13b", "text"),
        ("openai-compatible:anything", "native"),
    ],
)
def test_the_default_table_picks_native_or_text_tools(spec: str, protocol: str) -> None:
    assert tool_protocol(spec) == protocol


async def test_configured_protocols_override_the_default_table(closing: list[Model]) -> None:
    config = ProviderConfig(
        retry=None,
        environ={},
        protocols={"ollama:gemma3*": "native", "openai-compatible:tiny-*": "text"},
    )
    gemma = resolve_model("ollama:gemma3:4b", config=config)
    tiny = resolve_model(
        "openai-compatible:tiny-1b", base_url="http://127.0.0.1:1/v1", config=config
    )
    closing.extend([gemma, tiny])
    default = resolve_model("ollama:gemma3:4b", config=NO_RETRY)
    closing.append(default)
    assert gemma.native_tools and not tiny.native_tools
    assert not default.native_tools


# -- retry policy ---------------------------------------------------------------------------


def test_retry_after_is_read_from_milliseconds_seconds_or_an_http_date() -> None:
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"retry-after": "4"}) == 4.0
    when = email.utils.formatdate(1_000_030, usegmt=True)
    assert parse_retry_after({"retry-after": when}, now=1_000_000) == 30.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_backoff_doubles_up_to_the_cap_and_stops_at_the_last_attempt() -> None:
    policy = RetryPolicy(max_attempts=6, base_delay_s=1.0, max_delay_s=5.0, random=lambda: 0.0)
    error = ProviderError("busy", kind="unavailable")
    assert [policy.delay(n, error) for n in range(1, 7)] == [1.0, 2.0, 4.0, 5.0, 5.0, None]
    assert policy.delay(1, ProviderError("bad", kind="request")) is None


def test_a_provider_hint_can_make_a_status_retryable_or_not() -> None:
    assert status_error(400, "x", {"x-should-retry": "true"}).retryable
    assert not status_error(503, "x", {"x-should-retry": "false"}).retryable
    assert status_error(409, "lock", {}).retryable


async def test_a_retryable_failure_after_output_is_never_retried() -> None:
    class HalfThenBusy:
        name = "half"
        native_tools = True
        calls = 0

        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelPart]:
            self.calls += 1
            yield TextDelta(text="par")
            raise ProviderError("HTTP 503: busy", kind="unavailable", status=503)

    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    inner = HalfThenBusy()
    with pytest.raises(ProviderError, match="busy"):
        await collect(RetryingModel(inner, RetryPolicy(sleep=record)))
    assert inner.calls == 1 and waits == []


# -- fallback chains ------------------------------------------------------------------------


def failing(name: str, error: ModelError) -> FunctionModel:
    def fail(request: ModelRequest) -> ModelTurn:
        raise error

    return FunctionModel(fail, name=name)


async def test_fallback_uses_the_next_model_when_the_first_fails_before_answering() -> None:
    first = failing("a", ProviderError("HTTP 503: down", kind="unavailable", status=503))
    second = ScriptedModel([{"text": "from b"}], name="b")
    chain = FallbackModel([first, second])
    assert chain.name == "a | b"
    parts = await collect(chain)
    assert parts == [TextDelta(text="from b")]


async def test_fallback_never_replays_a_stream_that_already_emitted() -> None:
    class Broken:
        name = "half"
        native_tools = True

        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelPart]:
            yield TextDelta(text="par")
            raise StreamInterrupted("dropped", partial_text="par")

    second = ScriptedModel([{"text": "from b"}], name="b")
    with pytest.raises(StreamInterrupted):
        await collect(FallbackModel([Broken(), second]))
    assert second.remaining == 1


async def test_when_every_model_fails_the_error_names_each_failure() -> None:
    chain = FallbackModel(
        [
            failing("a", ProviderError("HTTP 401: bad key", kind="auth", status=401)),
            failing("b", ProviderError("connection refused", kind="connection")),
        ]
    )
    with pytest.raises(AllModelsFailedError) as caught:
        await collect(chain)
    message = str(caught.value)
    assert "a: HTTP 401: bad key" in message and "b: connection refused" in message
    assert [name for name, _ in caught.value.failures] == ["a", "b"]


def test_a_fallback_chain_cannot_mix_native_and_text_protocol_models() -> None:
    native = ScriptedModel([], name="n")
    text = ScriptedModel([], name="t", protocol="text")
    with pytest.raises(ValueError, match="same tool protocol"):
        FallbackModel([native, text])


def test_the_tool_protocol_can_be_forced_from_the_cli_configuration() -> None:
    from heron.config import configured_model as cli_resolve

    forced = cli_resolve(
        "openai-compatible:local", base_url="http://127.0.0.1:9/v1", tool_protocol="text"
    )
    default = cli_resolve("openai-compatible:local", base_url="http://127.0.0.1:9/v1")
    assert (forced.native_tools, default.native_tools) == (False, True)
