"""`SqliteTrustStore`: MCP server pins in heron's state database (table `mcp_server_pins`).

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
CREATE TABLE IF NOT EXISTS mcp_server_pins (
    server TEXT PRIMARY KEY,
    launch TEXT NOT NULL,
    package_version TEXT NOT NULL,
    server_version TEXT NOT NULL,
    digest TEXT NOT NULL,
    definitions TEXT NOT NULL,
    approved_at REAL NOT NULL
)
"""


@sqlite_errors
class SqliteTrustStore:
    """`TrustStore` in `<state_dir>/heron.db`."""

    def __init__(self, state_dir: Path) -> None:
        self._state_dir = state_dir

    def _connect(self) -> sqlite3.Connection:
        conn = open_db(self._state_dir)
        conn.execute(_SCHEMA)
        return conn

    def get(self, server: str) -> ServerPin | None:
        conn = self._connect()
        try:
            row = conn.execute(
                "SELECT launch, package_version, server_version, digest, definitions, "
                "approved_at FROM mcp_server_pins WHERE server = ?",
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
            names = [r[0] for r in conn.execute("SELECT server FROM mcp_server_pins")]
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
                    "INSERT OR REPLACE INTO mcp_server_pins VALUES (?, ?, ?, ?, ?, ?, ?)",
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
                cur = conn.execute("DELETE FROM mcp_server_pins WHERE server = ?", (server,))
        finally:
            conn.close()
        return cur.rowcount > 0
