"""`key_store`: where a process's signing keys of one kind are, chosen from the store it uses —
the state directory's files, or the shared PostgreSQL store every worker reads (so a receipt,
a decision or a message token signed on one worker verifies on any other)."""

from __future__ import annotations

from pathlib import Path

from heron.turn.receipts import KeyKind, KeyStore, ReceiptKeyStore

__all__ = ["key_store"]


def key_store(kind: KeyKind, *, state_dir: Path, store_url: str | None = None) -> KeyStore:
    """The keys of `kind`: the shared store at `store_url` (on the process's one pool of it),
    else `state_dir`'s files."""
    if store_url is None:
        return ReceiptKeyStore(state_dir, kind=kind)
    from heron._support.postgres import process_pool
    from heron.turn.postgres_keys import PostgresKeyStore

    return PostgresKeyStore(process_pool(store_url), kind)
