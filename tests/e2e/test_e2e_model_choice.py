"""With no model configured, `heron run` and `heron serve` never answer from a canned script:
they use a model the environment can reach — a provider key (the real adapter, against a
loopback server speaking the provider's protocol), else a local Ollama — and say which on
stderr, or stop with a message naming the ways to choose one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.cli import Heron
from support.ollama import ollama, without_models
from support.protocol_servers import (
    ProtocolServer,
    Reply,
    Text,
    anthropic_stream,
    openai_stream,
    serve,
)

PROMPT = "Summarise README.md"


@pytest.fixture
def bare(heron: Heron) -> Heron:
    """`heron` in an environment with no model to find (each test adds what it needs)."""
    without_models(heron.env)
    return heron


@pytest.fixture
def provider() -> Iterator[ProtocolServer]:
    with serve() as server:
        yield server


def assert_no_model_message(stderr: str) -> None:
    assert stderr.startswith("heron: no model configured, and none to pick"), stderr
    for way in ("--model", "[agent] model", "heron.toml", "heron demo"):
        assert way in stderr, way
    assert "Traceback" not in stderr


def test_an_openai_key_picks_an_openai_model_and_says_so(
    bare: Heron, provider: ProtocolServer
) -> None:
    provider.queue(Reply(events=openai_stream(text=["The README ", "explains heron."])))
    bare.env |= {"OPENAI_API_KEY": "sk-test-key", "OPENAI_BASE_URL": f"{provider.url}/v1"}

    done = bare.run("run", PROMPT, "--events", "jsonl")

    assert done.code == 0, done.stderr
    assert done.stderr == (
        "heron: no model configured; using openai:gpt-4o-mini because OPENAI_API_KEY is set\n"
    )
    final = done.events()[-1]
    assert (final["type"], final["text"]) == ("final", "The README explains heron.")
    [request] = provider.requests
    assert request.path == "/v1/chat/completions"
    assert request.body["model"] == "gpt-4o-mini"
    assert request.headers["authorization"] == "Bearer sk-test-key"


def test_an_anthropic_key_picks_an_anthropic_model_and_says_so(
    bare: Heron, provider: ProtocolServer
) -> None:
    provider.queue(Reply(events=anthropic_stream(Text(pieces=["A tool runtime."]))))
    bare.env |= {"ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_BASE_URL": provider.url}

    done = bare.run("run", PROMPT, "--events", "jsonl")

    assert done.code == 0, done.stderr
    assert "using anthropic:claude-sonnet-4-5 because ANTHROPIC_API_KEY is set" in done.stderr
    assert done.events()[-1]["text"] == "A tool runtime."
    [request] = provider.requests
    assert request.path == "/v1/messages"
    assert request.body["model"] == "claude-sonnet-4-5"
    assert "sk-ant-test" in request.headers["authorization"]


def test_a_local_ollama_lends_its_first_model(bare: Heron) -> None:
    with ollama(["llama3.2:1b", "qwen3:latest"]) as server:
        server.queue(Reply(events=openai_stream(text=["Local answer."])))
        bare.env["OLLAMA_HOST"] = server.host

        done = bare.run("run", PROMPT, "--events", "jsonl")

    assert done.code == 0, done.stderr
    assert done.stderr == (
        "heron: no model configured; using ollama:llama3.2:1b because the Ollama server at "
        f"{server.url} has it\n"
    )
    assert done.events()[-1]["text"] == "Local answer."
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.body["model"] == "llama3.2:1b"
    assert server.tag_requests == 1


def test_with_nothing_to_reach_run_stops_and_names_the_ways_to_choose(bare: Heron) -> None:
    done = bare.run("run", PROMPT)

    assert done.code == 2
    assert done.stdout == ""
    assert_no_model_message(done.stderr)


def test_with_nothing_to_reach_serve_stops_before_it_starts(bare: Heron) -> None:
    done = bare.run("serve", "--webhook-port", "0")

    assert done.code == 2
    assert done.stdout == ""  # no serve_started record
    assert_no_model_message(done.stderr)


def test_serve_with_a_key_says_which_model_it_serves_with(
    bare: Heron, provider: ProtocolServer
) -> None:
    bare.env |= {"OPENAI_API_KEY": "sk-test-key", "OPENAI_BASE_URL": f"{provider.url}/v1"}

    running = bare.start("serve", "--poll-interval", "0.1")
    running.wait_for_stderr("using openai:gpt-4o-mini because OPENAI_API_KEY is set")
    started = running.wait_for_event("serve_started")

    assert "send_notification" in started["tools"]
    assert provider.requests == []  # nothing asked yet: the model answers events, not start-up


def test_a_configured_model_is_used_without_a_word(bare: Heron) -> None:
    bare.env["OPENAI_API_KEY"] = "sk-never-used"
    model = bare.script("s.yaml", [{"text": "Scripted on purpose."}])

    done = bare.run("run", PROMPT, "--model", model, "--events", "jsonl")

    assert done.code == 0, done.stderr
    assert done.stderr == ""
    assert done.events()[-1]["text"] == "Scripted on purpose."


def test_an_endpoint_without_a_model_never_gets_a_key_heron_found(
    bare: Heron, provider: ProtocolServer
) -> None:
    bare.env["OPENAI_API_KEY"] = "sk-must-not-leave"

    done = bare.run("run", PROMPT, "--base-url", f"{provider.url}/v1")

    assert done.code == 2
    assert done.stderr.startswith("heron: --base-url (or [agent] base_url) needs a model too")
    assert provider.requests == []
