"""`PostgresTokenRecords`: one MCP server's OAuth record in the shared PostgreSQL database
(table `mcp_oauth_records`), so every worker uses the same tokens and registration.

The row holds the envelope `heron.mcp.auth.storage.TokenStorage` writes — sealed with the token
key (AES-256-GCM, `TokenCipher`; `McpAuth` refuses a shared store without one) — and a version
that grows with every write. A refresh is claimed on the row (`refresh_owner` until
`refresh_until`, taken under `FOR UPDATE`), and the claimant's write is a compare-and-set on the
version it claimed, so two workers never rotate the same refresh token against each other and
a stale write never replaces a newer record.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import psycopg

from heron._support.postgres import Pool, pg_errors, run

__all__ = ["PostgresTokenRecords"]

Conn = psycopg.Connection[Any]


@pg_errors
class PostgresTokenRecords:
    """`heron.mcp.auth.storage.TokenRecords` of `server` on a PostgreSQL pool."""

    def __init__(self, pool: Pool, server: str, *, clock: Callable[[], float] = time.time) -> None:
        self._pool = pool
        self.server = server
        self._clock = clock

    def load(self) -> tuple[dict[str, Any], int] | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT envelope, version FROM mcp_oauth_records WHERE server = %s",
                (self.server,),
            ).fetchone()
        if row is None:
            return None
        envelope = json.loads(row[0])
        return (envelope if isinstance(envelope, dict) else {}), int(row[1])

    def save(self, envelope: dict[str, Any], *, expect: int | None) -> bool:
        text = json.dumps(envelope, separators=(",", ":"))
        now = self._clock()
        with self._pool.connection() as conn:
            if expect is None:
                cursor = conn.execute(
                    "INSERT INTO mcp_oauth_records (server, envelope, version, updated_at)"
                    " VALUES (%s, %s, 1, %s) ON CONFLICT (server) DO UPDATE SET"
                    " envelope = excluded.envelope, version = mcp_oauth_records.version + 1,"
                    " updated_at = excluded.updated_at, refresh_owner = NULL,"
                    " refresh_until = NULL",
                    (self.server, text, now),
                )
            else:
                cursor = conn.execute(
                    "UPDATE mcp_oauth_records SET envelope = %s, version = version + 1,"
                    " updated_at = %s, refresh_owner = NULL, refresh_until = NULL"
                    " WHERE server = %s AND version = %s",
                    (text, now, self.server, expect),
                )
            return cursor.rowcount == 1

    def delete(self) -> bool:
        with self._pool.connection() as conn:
            cursor = conn.execute("DELETE FROM mcp_oauth_records WHERE server = %s", (self.server,))
            return cursor.rowcount == 1

    def modified_at(self) -> float | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT updated_at FROM mcp_oauth_records WHERE server = %s", (self.server,)
            ).fetchone()
        return None if row is None else float(row[0])

    def claim_refresh(self, owner: str, *, now: float, until: float) -> int | None:
        def work(conn: Conn) -> int | None:
            row = conn.execute(
                "SELECT version, refresh_owner, refresh_until FROM mcp_oauth_records"
                " WHERE server = %s FOR UPDATE",
                (self.server,),
            ).fetchone()
            if row is None:
                return None
            version, holder, held_until = row
            if holder is not None and holder != owner and held_until > now:
                return None
            conn.execute(
                "UPDATE mcp_oauth_records SET refresh_owner = %s, refresh_until = %s"
                " WHERE server = %s",
                (owner, until, self.server),
            )
            return int(version)

        return run(self._pool, work)

    def release_refresh(self, owner: str) -> None:
        with self._pool.connection() as conn:
            conn.execute(
                "UPDATE mcp_oauth_records SET refresh_owner = NULL, refresh_until = NULL"
                " WHERE server = %s AND refresh_owner = %s",
                (self.server, owner),
            )
