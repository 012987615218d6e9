"""MCP configuration: `[mcp]` TOML sections and the common `mcpServers` JSON format."""

from __future__ import annotations

import json
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from heron.mcp.config import (
    McpConfig,
    McpConfigError,
    McpServerConfig,
    import_mcp_json,
    name_matches,
)

TOML = """
[mcp]
exposure = "deferred"
deferred_threshold = 50

[mcp.servers.files]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv"]
disabled_tools = ["write_*"]

[mcp.servers.tickets]
url = "https://tickets.example.com/mcp"
timeout_s = 60
headers = { "X-Team" = "ops" }
[mcp.servers.tickets.credentials.token]
from_env = "TICKETS_TOKEN"
header = "Authorization"
prefix = "Bearer "
expires = 2030-01-01T00:00:00Z

[[mcp.tool_filter_groups]]
mode = "always"
tools = ["files__read_*"]
"""


def test_toml_section_loads_servers_credentials_and_groups() -> None:
    config = McpConfig.model_validate(tomllib.loads(TOML)["mcp"])
    assert config.exposure == "deferred" and config.deferred_threshold == 50
    files, tickets = config.servers["files"], config.servers["tickets"]
    assert files.transport == "stdio" and tickets.transport == "http"
    assert tickets.credentials["token"].expires == datetime(2030, 1, 1, tzinfo=UTC)
    assert config.tool_filter_groups[0].mode == "always"
    assert list(config.enabled_servers()) == ["files", "tickets"]


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"command": "x", "url": "http://h/mcp"},
        {"url": "ftp://h/mcp"},
        {"url": "http://h/mcp", "args": ["-v"]},
        {"command": "x", "headers": {"A": "b"}},
    ],
)
def test_a_server_needs_exactly_one_consistent_transport(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        McpServerConfig.model_validate(fields)


def test_server_names_that_cannot_be_namespaced_are_rejected() -> None:
    with pytest.raises(ValidationError, match="'a__b'"):
        McpConfig.model_validate({"servers": {"a__b": {"command": "x"}}})


def test_disabled_tools_win_over_enabled_tools() -> None:
    server = McpServerConfig(
        command="x", enabled_tools=["read_*", "list"], disabled_tools=["*_secret"]
    )
    assert server.tool_enabled("read_file")
    assert not server.tool_enabled("read_secret")
    assert not server.tool_enabled("write_file")


def test_only_star_is_a_wildcard_in_tool_globs() -> None:
    assert name_matches("a*c*", "abcde")
    assert not name_matches("a?c", "abc")
    assert name_matches("a?c", "a?c")


def test_expired_or_missing_credentials_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERON_TEST_TOKEN", "s3cret")
    server = McpServerConfig.model_validate(
        {
            "command": "x",
            "credentials": {
                "old": {
                    "from_env": "HERON_TEST_TOKEN",
                    "env": "TOKEN",
                    "expires": datetime(2020, 1, 1),
                },
                "absent": {"from_env": "HERON_TEST_NOT_SET", "env": "OTHER"},
                "good": {"from_env": "HERON_TEST_TOKEN", "env": "GOOD"},
            },
        }
    )
    problems = server.credential_problems(datetime(2025, 1, 1, tzinfo=UTC))
    assert problems == [
        "credential 'absent': environment variable HERON_TEST_NOT_SET is not set",
        "credential 'old' expired at 2020-01-01T00:00:00; renew it",
    ]
    assert server.resolved_env()["GOOD"] == "s3cret"


def test_a_credential_goes_where_its_transport_can_carry_it() -> None:
    with pytest.raises(ValidationError, match="takes `env`"):
        McpServerConfig.model_validate(
            {"command": "x", "credentials": {"t": {"from_env": "T", "header": "Authorization"}}}
        )
    with pytest.raises(ValidationError, match="exactly one"):
        McpServerConfig.model_validate(
            {"url": "http://h/mcp", "credentials": {"t": {"from_env": "T"}}}
        )


def test_import_reads_the_mcp_servers_json_format(tmp_path: Path) -> None:
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "fs": {
                        "command": "npx",
                        "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                        "env": {"LOG": "1"},
                        "alwaysAllow": ["read_file"],
                    },
                    "remote": {"type": "http", "url": "https://x.example/mcp", "disabled": True},
                    "slow": {"command": "srv", "timeout": 120000},
                }
            }
        )
    )
    servers = import_mcp_json(path)
    assert servers["fs"].args[-1] == "/tmp" and servers["fs"].env == {"LOG": "1"}
    assert servers["remote"].url == "https://x.example/mcp" and not servers["remote"].enabled
    assert servers["slow"].timeout_s == 120


def test_import_names_every_problem_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "old": {"type": "sse", "url": "http://h/sse"},
                    "odd": {"command": "x", "colour": "blue"},
                    "bad__name": {"command": "x"},
                }
            }
        )
    )
    with pytest.raises(McpConfigError) as info:
        import_mcp_json(path)
    message = str(info.value)
    assert "transport 'sse' is not supported" in message
    assert "unknown key 'colour'" in message
    assert "mcpServers.bad__name" in message
