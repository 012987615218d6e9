"""`SqliteTrustStore`: MCP server pins in heron's state database (table `mcp_server_pins`;
project agent files keep their approvals the same way in `agent_pins`).

Every operation opens its own short-lived connection, so one store object may be shared by the
CLI, the client manager and threads.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from heron._support.canonical import canonical_json
from heron._support.state import open_db, sqlite_errors
from heron.mcp.trust.pins import ServerIdentity, ServerPin, ToolDefinition, new_pin

_SCHEMA = """
CREATE TABLE IF NOT EXISTS {table} (
    server TEXT PRIMARY KEY,
    launch TEXT NOT NULL,
    package_version TEXT NOT NULL,
    server_version TEXT NOT NULL,
    digest TEXT NOT NULL,
    definitions TEXT NOT NULL,
    approved_at REAL NOT NULL
)
"""


_TABLES = frozenset({"mcp_server_pins", "agent_pins"})
"""The tables pins live in: MCP servers', and project agent files' (`heron agents approve`)."""


@sqlite_errors
class SqliteTrustStore:
    """`TrustStore` in `<state_dir>/heron.db`."""

    def __init__(self, state_dir: Path, *, table: str = "mcp_server_pins") -> None:
        if table not in _TABLES:
            raise ValueError(f"unknown pin table {table!r}")
        self._state_dir = state_dir
        self._table = table

    def _connect(self) -> sqlite3.Connection:
        conn = open_db(self._state_dir)
        conn.execute(_SCHEMA.format(table=self._table))
        return conn

    def get(self, server: str) -> ServerPin | None:
        conn = self._connect()
        try:
            row = conn.execute(
                "SELECT launch, package_version, server_version, digest, definitions, "
                f"approved_at FROM {self._table} WHERE server = ?",
                (server,),
            ).fetchone()
        finally:
            conn.close()
        if row is None:
            return None
        launch, package_version, server_version, digest, defs, approved_at = row
        return ServerPin(
            server=server,
            identity=ServerIdentity(
                launch=launch, package_version=package_version, server_version=server_version
            ),
            digest=digest,
            definitions=tuple(ToolDefinition.from_canonical(server, d) for d in json.loads(defs)),
            approved_at=approved_at,
        )

    def pins(self) -> list[ServerPin]:
        conn = self._connect()
        try:
            names = [r[0] for r in conn.execute(f"SELECT server FROM {self._table}")]
        finally:
            conn.close()
        return [p for p in (self.get(n) for n in sorted(names)) if p is not None]

    def approve(
        self, server: str, identity: ServerIdentity, definitions: Sequence[ToolDefinition]
    ) -> ServerPin:
        pin = new_pin(server, identity, definitions, approved_at=time.time())
        conn = self._connect()
        try:
            with conn:
                conn.execute(
                    f"INSERT OR REPLACE INTO {self._table} VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        server,
                        identity.launch,
                        identity.package_version,
                        identity.server_version,
                        pin.digest,
                        canonical_json([d.canonical() for d in pin.definitions]),
                        pin.approved_at,
                    ),
                )
        finally:
            conn.close()
        return pin

    def revoke(self, server: str) -> bool:
        conn = self._connect()
        try:
            with conn:
                cur = conn.execute(f"DELETE FROM {self._table} WHERE server = ?", (server,))
        finally:
            conn.close()
        return cur.rowcount > 0
