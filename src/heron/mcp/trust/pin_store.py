"""`pin_store`: where a process keeps the MCP servers' pins, chosen from the store it uses —
the state directory's database, or the shared PostgreSQL store every worker reads (a server
approved once, from any machine, is trusted by every worker; a change refused by all)."""

from __future__ import annotations

from pathlib import Path

from heron.mcp.trust.pins import TrustStore
from heron.mcp.trust.sqlite_store import SqliteTrustStore

__all__ = ["pin_store"]


def pin_store(state_dir: Path, *, store_url: str | None = None) -> TrustStore:
    """The pins of the shared store at `store_url` (on the process's one pool of it), else
    `state_dir`'s."""
    if store_url is None:
        return SqliteTrustStore(state_dir)
    from heron._support.postgres import process_pool
    from heron.mcp.trust.postgres_store import PostgresTrustStore

    return PostgresTrustStore(process_pool(store_url))
