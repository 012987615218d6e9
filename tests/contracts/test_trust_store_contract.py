"""`TrustStore`: one pin per MCP server, approved, read back whole, listed and revoked."""

from __future__ import annotations

import time

import pytest

from heron.mcp.trust import ServerIdentity, ToolDefinition, TrustStore, definitions_digest
from support.stores import StoreBackend

IDENTITY = ServerIdentity(launch="stdio srv", package_version="srv==1.0", server_version="srv/1.0")


def tool(name: str, description: str = "Does a thing.", **kw: object) -> ToolDefinition:
    return ToolDefinition(server="srv", name=name, description=description, **kw)  # type: ignore[arg-type]


@pytest.fixture
def store(backend: StoreBackend) -> TrustStore:
    return backend.trust()


def test_a_pin_round_trips_through_another_store(store: TrustStore, backend: StoreBackend) -> None:
    defs = [
        tool(
            "b",
            title="Bee",
            input_schema={"type": "object", "properties": {"x": {"type": "string"}}},
            output_schema={"type": "object"},
            annotations={"readOnlyHint": True},
        ),
        tool("a"),
    ]
    before = time.time()
    pin = store.approve("srv", IDENTITY, defs)
    again = backend.trust().get("srv")
    assert again == pin
    assert again.identity == IDENTITY
    assert again.digest == definitions_digest(defs)
    assert [d.name for d in again.definitions] == ["a", "b"]
    assert before - 1 <= again.approved_at <= time.time() + 1
    assert store.get("other") is None


def test_approving_again_replaces_the_pin(store: TrustStore) -> None:
    store.approve("srv", IDENTITY, [tool("a")])
    newer = ServerIdentity(launch="stdio srv", package_version="srv==1.1")
    pin = store.approve("srv", newer, [tool("a"), tool("c")])
    assert store.get("srv") == pin
    assert [p.server for p in store.pins()] == ["srv"]


def test_pins_are_listed_in_server_name_order(store: TrustStore) -> None:
    for name in ("zeta", "alpha", "mid"):
        store.approve(name, IDENTITY, [tool("a")])
    assert [p.server for p in store.pins()] == ["alpha", "mid", "zeta"]


def test_revoking_a_pin_makes_the_server_unpinned_again(store: TrustStore) -> None:
    store.approve("srv", IDENTITY, [tool("a")])
    assert store.revoke("srv") and not store.revoke("srv")
    assert store.get("srv") is None and store.pins() == []
