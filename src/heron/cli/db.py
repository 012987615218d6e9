"""`heron db migrate` and `heron db status`: the schema versions of the store.

The store is `--store` (a PostgreSQL URL), else `[store] url`, else the SQLite database of the
state directory; the versions are `heron._support.migrations`.
"""

from __future__ import annotations

import argparse
import json
import sys

from heron.cli import common


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `db migrate` and `db status` to the `heron` parser."""
    db = sub.add_parser("db", help="the store's schema versions: migrate, status")
    actions = db.add_subparsers(dest="db_command", required=True)
    for name, handler, text in (
        ("migrate", cmd_migrate, "apply the schema versions the store lacks"),
        ("status", cmd_status, "show the schema versions applied and pending"),
    ):
        parser = actions.add_parser(name, help=text)
        common.add_config_flags(parser)
        common.add_store_flag(parser)
        parser.add_argument("--json", action="store_true", help="one JSON object")
        parser.set_defaults(handler=handler)


def _applied(args: argparse.Namespace, *, migrate: bool) -> tuple[str, set[int], list[int]]:
    """The back end's name, its applied versions and (with `migrate`) those just applied."""
    url = common.store_url(args)
    if url is not None:
        from heron._support.postgres import schema_of
        from heron.errors import StoreError

        try:
            applied, done = schema_of(url, migrate=migrate)
        except StoreError as exc:
            raise common.UsageError(str(exc)) from exc
        return "postgresql", applied, [m.version for m in done]
    from heron._support.state import migrate_sqlite, open_db, sqlite_versions

    db = open_db(common.state_dir(args))
    try:
        ran = migrate_sqlite(db) if migrate else []
        return "sqlite", sqlite_versions(db), [m.version for m in ran]
    finally:
        db.close()


def _report(args: argparse.Namespace, *, migrate: bool) -> int:
    from heron._support.migrations import POSTGRESQL, SQLITE

    backend, applied, done = _applied(args, migrate=migrate)
    known = POSTGRESQL if backend == "postgresql" else SQLITE
    pending = [m.version for m in known if m.version not in applied]
    view = {
        "backend": backend,
        "version": max(applied, default=0),
        "latest": max(m.version for m in known),
        "applied_now": done,
        "pending": pending,
    }
    if args.json:
        sys.stdout.write(json.dumps(view) + "\n")
    else:
        sys.stdout.write(
            f"{backend}: schema version {view['version']} of {view['latest']}"
            + (f"; applied now: {done}" if done else "")
            + (f"; pending: {pending} (run `heron db migrate`)" if pending else "")
            + "\n"
        )
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    return _report(args, migrate=True)


def cmd_status(args: argparse.Namespace) -> int:
    return _report(args, migrate=False)
