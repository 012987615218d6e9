"""The commands that read what workers of a shared store share: `heron receipts verify
--store` checks a receipt a tool got on one worker from any machine that reaches the store,
with no state directory of the signer; `heron messages --store` lists and opens the messages
every worker sent; an MCP server approved once in the shared store is approved for all."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from heron._support.postgres import close_process_pools
from heron.cli.main import main
from heron.collaboration.postgres_store import PostgresMessageStore
from heron.collaboration.store import StoredMessage
from heron.mcp.config import McpServerConfig
from heron.mcp.trust import ToolDefinition, launch_identity
from heron.mcp.trust.pin_store import pin_store
from heron.turn.receipts import ReceiptScope
from heron.turn.signing_keys import key_store
from support.postgres import postgres_server, postgres_url

__all__ = ["postgres_server", "postgres_url"]  # fixtures, found by pytest here


@pytest.fixture(autouse=True)
def _pools() -> Iterator[None]:
    yield
    close_process_pools()  # each test has its own database


def test_a_receipt_signed_on_one_worker_verifies_through_the_shared_store(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = key_store("receipt", state_dir=tmp_path / "worker-a", store_url=postgres_url)
    receipt = (
        ReceiptScope("runtime", store=keys)
        .signer()
        .sign(tool="shell", arguments={"command": "uptime"}, output="up 3 days\n")
    )
    close_process_pools()
    verify = ["receipts", "verify", receipt, "--tool", "shell"]
    verify += ["--args", json.dumps({"command": "uptime"}), "--output", "up 3 days\n"]
    elsewhere = ["--state-dir", str(tmp_path / "worker-b")]
    assert main([*verify, *elsewhere, "--store", postgres_url]) == 0
    assert capsys.readouterr().out.startswith("valid: shell produced this output")
    assert main([*verify, *elsewhere]) != 0  # that worker's own files hold no such key
    assert "no receipt key" in capsys.readouterr().out


def test_messages_lists_and_opens_what_any_worker_sent(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sent = StoredMessage(
        id="msg-0001",
        thread="session:ops",
        session="ops",
        kind="message",
        to="user",
        text="the deploy finished",
        urgency="normal",
        sender="Heron <heron@example.com>",
        created=1000.0,
    )
    store = PostgresMessageStore.open(postgres_url)
    try:
        store.add(sent)
        local = ["--state-dir", str(tmp_path / "elsewhere"), "--store", postgres_url]
        assert main(["messages", "list", "--json", *local]) == 0
        [listed] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert (listed["id"], listed["text"]) == ("msg-0001", "the deploy finished")
        assert main(["messages", "show", "msg-0001", *local]) == 0
        assert "the deploy finished" in capsys.readouterr().out
        opened = store.get("msg-0001")
        assert opened is not None and opened.read_via == "console"  # read, in the shared store
    finally:
        store.close()


def test_an_mcp_server_approved_through_the_shared_store_is_approved_for_every_worker(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "heron.toml"
    config.write_text('[mcp.servers.clock]\ncommand = "clock-server"\n', encoding="utf-8")
    server = McpServerConfig(command="clock-server")
    worker_a = pin_store(tmp_path / "worker-a", store_url=postgres_url)
    worker_a.approve("clock", launch_identity(server), [ToolDefinition(server="clock", name="now")])
    listing = ["mcp", "list", "--config", str(config), "--state-dir", str(tmp_path / "worker-b")]
    assert main([*listing, "--store", postgres_url]) == 0
    assert "[approved " in capsys.readouterr().out
    assert main(listing) == 0  # worker b's own database: nothing approved there
    assert "[not approved yet]" in capsys.readouterr().out
