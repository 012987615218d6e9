"""The stores of `heron serve` on a PostgreSQL database shared with other workers
(`heron serve --store`, docs/deployment.md)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from heron.always_on.sessions import HostIndex
from heron.connectors.mail.maildir import Maildir
from heron.sessions.lease import LeaseStore

if TYPE_CHECKING:
    from heron.always_on.bus.postgres_store import PostgresBusStore
    from heron.always_on.server import HeronServer

__all__ = ["open_shared"]


def open_shared(server: HeronServer, url: str) -> tuple[PostgresBusStore, HostIndex, LeaseStore]:
    """The stores on the shared PostgreSQL database, with this worker's leases. Requests to
    a human stay in this worker's state directory (docs/deployment.md)."""
    from heron._support.postgres import open_pool
    from heron.always_on.bus.postgres_store import PostgresBusStore
    from heron.always_on.channels.postgres_mail_inbound import PostgresThreadIndex
    from heron.always_on.postgres_sessions import PostgresHostIndex
    from heron.always_on.postgres_workspaces import PostgresWorkspaceBindings
    from heron.always_on.triggers.postgres_store import open_pg_trigger_stores
    from heron.sessions.postgres_leases import PostgresLeases
    from heron.sessions.postgres_store import PostgresSessionStore

    cfg = server.config
    pool = open_pool(url, max_size=16)
    if cfg.maildir is not None:
        server.maildir = Maildir(cfg.maildir)
        server.threads = PostgresThreadIndex(pool)
    server.bus = bus = PostgresBusStore(PostgresSessionStore(pool))
    server._trigger_stores = open_pg_trigger_stores(url, fence=bus.sessions)
    server.workspaces = PostgresWorkspaceBindings(pool)
    owner = f"{os.uname().nodename}:{os.getpid()}:{os.urandom(3).hex()}"
    return bus, PostgresHostIndex(pool), PostgresLeases(pool, owner=owner, ttl_s=cfg.lease_s)
