"""The library's builders (`heron.config.build`): the model heron picks when none is configured,
and the configured agent as a Python user builds it."""

from __future__ import annotations

from pathlib import Path

import pytest

from heron.config import (
    BuildError,
    HeronConfig,
    NoModelError,
    build_agent,
    detect_model,
    load_config,
    open_agent,
    with_model,
)
from heron.config.build import ollama_root
from support.ollama import closed_port, ollama


def test_an_openai_key_wins_then_an_anthropic_key() -> None:
    both = detect_model({"OPENAI_API_KEY": "sk-1", "ANTHROPIC_API_KEY": "sk-ant-1"})
    anthropic = detect_model({"ANTHROPIC_API_KEY": "sk-ant-1", "OLLAMA_HOST": "127.0.0.1:1"})

    assert both is not None and (both.model, both.reason) == (
        "openai:gpt-4o-mini",
        "OPENAI_API_KEY is set",
    )
    assert anthropic is not None and anthropic.model == "anthropic:claude-sonnet-4-5"
    assert anthropic.base_url is None


def test_without_keys_the_first_chat_model_of_a_local_ollama_is_picked() -> None:
    with ollama(["nomic-embed-text:latest", "qwen3:latest", "llama3.2:1b"]) as server:
        choice = detect_model({"OLLAMA_HOST": server.host})

    assert choice is not None
    assert choice.model == "ollama:qwen3:latest"
    assert choice.base_url == f"{server.url}/v1"
    assert server.url in choice.reason


def test_nothing_is_picked_without_keys_and_without_ollama() -> None:
    assert detect_model({"OLLAMA_HOST": f"127.0.0.1:{closed_port()}"}) is None
    with ollama([]) as empty:
        assert detect_model({"OLLAMA_HOST": empty.host}) is None


@pytest.mark.parametrize(
    ("value", "root"),
    [
        ("", "http://127.0.0.1:11434"),
        ("0.0.0.0", "http://127.0.0.1:11434"),
        ("example.test", "http://example.test:11434"),
        ("127.0.0.1:9999", "http://127.0.0.1:9999"),
        ("http://box.test", "http://box.test:80"),
        ("https://box.test:8443/", "https://box.test:8443"),
        ("[::1]:7000", "http://[::1]:7000"),
    ],
)
def test_ollama_host_is_read_as_the_ollama_command_reads_it(value: str, root: str) -> None:
    assert ollama_root({"OLLAMA_HOST": value}) == root


def test_with_model_sets_the_model_and_the_endpoint_it_needs() -> None:
    with ollama(["qwen3"]) as server:
        choice = detect_model({"OLLAMA_HOST": server.host})
    assert choice is not None
    config = with_model(HeronConfig(), choice)
    assert (config.agent.model, config.agent.base_url) == ("ollama:qwen3", f"{server.url}/v1")


def test_an_agent_without_a_model_is_a_no_model_error(tmp_path: Path) -> None:
    config = HeronConfig.model_validate({"state": {"dir": str(tmp_path)}})

    with pytest.raises(NoModelError, match=r"no model configured"):
        build_agent(config)
    assert issubclass(NoModelError, BuildError)


async def test_a_python_user_builds_the_configured_agent_from_heron_toml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    (tmp_path / "tools.py").write_text(
        "import heron\n\n@heron.tool(read_only=True)\ndef shout(text: str) -> str:\n"
        '    """Say it louder.\n\n    Args:\n        text: What to say.\n    """\n'
        "    return text.upper()\n",
        encoding="utf-8",
    )
    (tmp_path / "script.yaml").write_text(
        "turns:\n  - tool_calls: [{id: c1, name: shout, arguments: {text: hi}}]\n"
        "  - {text: done, expect: {last_message_contains: HI}}\n",
        encoding="utf-8",
    )
    (tmp_path / "heron.toml").write_text(
        f'[agent]\nmodel = "scripted:{tmp_path / "script.yaml"}"\n\n'
        f'[tools]\nmodules = ["{tmp_path / "tools.py"}"]\n\n[state]\ndir = "{tmp_path / "s"}"\n',
        encoding="utf-8",
    )

    async with open_agent(load_config(project_dir=tmp_path)) as agent:
        result = await agent.run("shout hi")

    assert agent.registry.names() == ["shout"]
    assert result.ok and result.text == "done"


def test_tools_that_do_not_load_are_a_build_error(tmp_path: Path) -> None:
    config = HeronConfig.model_validate(
        {"agent": {"model": "scripted:demo"}, "tools": {"modules": [str(tmp_path / "no.py")]}}
    )
    from heron.config import load_user_tools

    with pytest.raises(BuildError, match=r"cannot load tools: .*no\.py"):
        load_user_tools(config)
