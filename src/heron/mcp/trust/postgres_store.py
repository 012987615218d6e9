"""`PostgresTrustStore`: MCP server pins in the shared PostgreSQL database (table
`mcp_server_pins`), so a server approved once is pinned for every worker."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from heron._support.canonical import canonical_json
from heron._support.postgres import Pool, pg_errors
from heron.mcp.trust.pins import ServerIdentity, ServerPin, ToolDefinition, new_pin


@pg_errors
class PostgresTrustStore:
    """`TrustStore` on a PostgreSQL pool (thread-safe)."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def get(self, server: str) -> ServerPin | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT launch, package_version, server_version, digest, definitions,"
                " approved_at FROM mcp_server_pins WHERE server = %s",
                (server,),
            ).fetchone()
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
        with self._pool.connection() as conn:
            names = [r[0] for r in conn.execute("SELECT server FROM mcp_server_pins")]
        return [p for p in (self.get(n) for n in sorted(names)) if p is not None]

    def approve(
        self, server: str, identity: ServerIdentity, definitions: Sequence[ToolDefinition]
    ) -> ServerPin:
        pin = new_pin(server, identity, definitions, approved_at=time.time())
        with self._pool.connection() as conn:
            conn.execute(
                "INSERT INTO mcp_server_pins (server, launch, package_version, server_version,"
                " digest, definitions, approved_at) VALUES (%s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (server) DO UPDATE SET launch = excluded.launch,"
                " package_version = excluded.package_version,"
                " server_version = excluded.server_version, digest = excluded.digest,"
                " definitions = excluded.definitions, approved_at = excluded.approved_at",
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
        return pin

    def revoke(self, server: str) -> bool:
        with self._pool.connection() as conn:
            cursor = conn.execute("DELETE FROM mcp_server_pins WHERE server = %s", (server,))
        return cursor.rowcount > 0
