"""`PostgresKeyStore`: signing keys in the shared PostgreSQL database (table `signing_keys`),
so every worker signs with the same keys and verifies what any other worker signed: a receipt
issued on one worker verifies on another, a decision signed on one is checked on another, a
message token minted on one is redeemed on another.

One table holds every kind of key (`receipt`, `decision`, `message`), each kind apart, as the
state directory keeps each in its own folder. A key, once saved, is never replaced.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from heron._support.postgres import Pool, pg_errors
from heron.turn.receipts import KeyIdTaken, KeyKind, ReceiptKey

__all__ = ["PostgresKeyStore"]


@pg_errors
class PostgresKeyStore:
    """`heron.turn.receipts.KeyStore` of one `kind` on a PostgreSQL pool (thread-safe)."""

    def __init__(
        self, pool: Pool, kind: KeyKind, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._pool = pool
        self.kind: KeyKind = kind
        self._clock = clock

    def save(self, key: ReceiptKey) -> None:
        with self._pool.connection() as conn:
            inserted = conn.execute(
                "INSERT INTO signing_keys (kind, key_id, secret, created_at)"
                " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (self.kind, key.key_id, key.secret, self._clock()),
            ).rowcount
        if inserted == 0 and self.load(key.key_id) != key:
            raise KeyIdTaken(f"a different {self.kind} key already uses id {key.key_id}")

    def load(self, key_id: str) -> ReceiptKey | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT secret FROM signing_keys WHERE kind = %s AND key_id = %s",
                (self.kind, key_id),
            ).fetchone()
        return None if row is None else _key(key_id, bytes(row[0]))

    def newest(self) -> ReceiptKey | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT key_id, secret FROM signing_keys WHERE kind = %s"
                " ORDER BY created_at DESC, key_id DESC LIMIT 1",
                (self.kind,),
            ).fetchone()
        return None if row is None else _key(row[0], bytes(row[1]))


def _key(key_id: str, secret: bytes) -> ReceiptKey:
    try:
        return ReceiptKey(key_id=key_id, secret=secret)
    except ValueError:
        raise ValueError(f"the stored signing key {key_id} is corrupt") from None
