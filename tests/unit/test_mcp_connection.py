"""The connection layer's contract with the MCP SDK, checked without starting a server."""

from __future__ import annotations

import inspect

import mcp_types

from heron.mcp.client import connection


def test_the_sdks_private_http_client_factory_is_where_heron_imports_it() -> None:
    # heron builds its Streamable HTTP client with `mcp.shared._httpx_utils`, a private SDK
    # module, to set configured headers with the SDK's own timeouts. If this fails, an SDK
    # release moved or changed that factory: update `heron/mcp/client/connection.py`.
    from mcp.shared._httpx_utils import create_mcp_http_client

    assert connection.create_mcp_http_client is create_mcp_http_client
    assert {"headers", "timeout", "auth"} <= set(
        inspect.signature(create_mcp_http_client).parameters
    )
    http = create_mcp_http_client(headers={"Authorization": "Bearer t0k"})
    assert http.headers["authorization"] == "Bearer t0k"
    assert hasattr(http, "__aenter__") and hasattr(http, "__aexit__")


def test_an_sdk_tool_becomes_a_definition_with_its_raw_annotations() -> None:
    tool = mcp_types.Tool(
        name="echo",
        title="Echo",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
        annotations=mcp_types.ToolAnnotations(read_only_hint=True),
    )
    definition = connection.tool_definition("every", tool)
    assert definition.prefixed == "every__echo"
    assert definition.description == "" and definition.title == "Echo"
    assert definition.annotations == {"readOnlyHint": True}


def test_start_failures_are_described_in_words() -> None:
    describe = connection.describe_start_failure
    assert describe(TimeoutError()) == "it did not answer in time"
    assert describe(FileNotFoundError(2, "No such file", "mcp-nope")) == (
        "its command was not found (mcp-nope)"
    )
    group = BaseExceptionGroup("start", [TimeoutError(), RuntimeError("exit 1")])
    assert describe(group) == "it did not answer in time; exit 1"
