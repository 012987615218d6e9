"""`heron sessions list|show|resume|fork|export|import` (`resume` runs `heron.cli.chat`).

Sessions live in the state database (see `heron.sessions`); `heron run --session NAME` and
`heron chat --session NAME` write to them, everything here reads or copies them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from heron.cli import common
from heron.cli.common import EXIT_ERROR, EXIT_OK, UsageError

if TYPE_CHECKING:
    from heron.sessions.store import SessionEntry, SessionStore

Action = Callable[[argparse.Namespace, "SessionStore"], int]


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    *,
    resume: Callable[[argparse.Namespace], int],
) -> None:
    """Add `sessions` to the `heron` parser; `resume` handles `sessions resume` (the chat)."""
    sessions = sub.add_parser("sessions", help="list, show, resume, fork, export, import sessions")
    ssub = sessions.add_subparsers(dest="sessions_command", required=True, metavar="ACTION")

    def action(name: str, help_text: str, run: Action) -> argparse.ArgumentParser:
        parser = ssub.add_parser(name, help=help_text)
        parser.set_defaults(handler=cmd_sessions, action=run)
        return parser

    listing = action("list", "every stored session, most recent first", _list)
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    common.add_config_flags(listing)
    common.add_store_flag(listing)

    show = action("show", "a session's entries, one line each", _show)
    show.add_argument("name")
    show.add_argument("--json", action="store_true", help="the entries as JSON Lines (= export)")
    common.add_config_flags(show)
    common.add_store_flag(show)

    resumed = ssub.add_parser(
        "resume", help="continue a session in the chat (repairs a turn cut off mid-call)"
    )
    resumed.add_argument("name")
    resumed.add_argument(
        "--repair-only", action="store_true", help="repair the stored history and exit"
    )
    common.add_agent_flags(resumed)
    resumed.set_defaults(handler=resume)

    fork = action("fork", "copy a session (or its start) into a new one", _fork)
    fork.add_argument("source")
    fork.add_argument("target")
    fork.add_argument("--at", type=int, metavar="ENTRY", help="copy up to this entry id")
    common.add_config_flags(fork)
    common.add_store_flag(fork)

    export = action("export", "write a session as JSON Lines of entries", _export)
    export.add_argument("name")
    export.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")
    common.add_config_flags(export)
    common.add_store_flag(export)

    imp = action("import", "read a JSON Lines export into a new session", _import)
    imp.add_argument("file", type=Path, help="the export; - reads stdin")
    imp.add_argument("--as", dest="as_name", metavar="NAME", help="session name to create")
    common.add_config_flags(imp)
    common.add_store_flag(imp)


def cmd_sessions(args: argparse.Namespace) -> int:
    store = common.open_session_store(args)
    try:
        result: int = args.action(args, store)
        return result
    finally:
        store.close()


def _list(args: argparse.Namespace, store: SessionStore) -> int:
    import json

    for info in store.list_sessions():
        if args.json:
            row = {
                "session": info.session,
                "entries": info.entries,
                "last_entry": info.last_entry,
                "updated": common.when(info.updated),
            }
            common.out(json.dumps(row, ensure_ascii=False))
        else:
            common.out(
                f"{info.session:40} {info.entries:6} entries  updated {common.when(info.updated)}"
            )
    return EXIT_OK


def _show(args: argparse.Namespace, store: SessionStore) -> int:
    from heron.cli.render import summarize_message
    from heron.sessions.export import export_lines
    from heron.sessions.repair import open_calls

    entries = _entries(store, args.name)
    if args.json:
        sys.stdout.writelines(export_lines(entries))
        return EXIT_OK
    first, last = common.when(entries[0].timestamp), common.when(entries[-1].timestamp)
    common.out(f"session {args.name} · {len(entries)} entries · {first} → {last}")
    for entry in entries:
        role = entry.message.role
        common.out(
            f"#{entry.entry_id:<6} {common.when(entry.timestamp)[11:19]}  {role:9}  "
            f"{summarize_message(entry.message)}"
        )
    pending = open_calls([e.message for e in entries])
    if pending:
        common.out(
            f"(ended mid-turn: {len(pending)} tool call(s) without a result; resuming the "
            "session closes them as interrupted)"
        )
    return EXIT_OK


def _entries(store: SessionStore, name: str) -> list[SessionEntry]:
    entries = store.entries(name)
    if not entries:
        raise UsageError(f"no session named {name!r}; see `heron sessions list`")
    return entries


def _fork(args: argparse.Namespace, store: SessionStore) -> int:
    from heron.sessions.export import SessionImportError, fork_session
    from heron.sessions.names import check_session_name

    try:
        check_session_name(args.target)
        written = fork_session(store, args.source, args.target, at=args.at)
    except (ValueError, SessionImportError) as exc:
        raise UsageError(str(exc)) from exc
    common.out(
        f"forked {args.source} into {written.session}: {written.entries} entries "
        f"(new ids {written.first_entry}..{written.last_entry})"
    )
    return EXIT_OK


def _export(args: argparse.Namespace, store: SessionStore) -> int:
    from heron.sessions.export import export_lines

    entries = _entries(store, args.name)
    if args.output is None:
        sys.stdout.writelines(export_lines(entries))
        return EXIT_OK
    try:
        with args.output.open("x", encoding="utf-8") as out:
            out.writelines(export_lines(entries))
    except FileExistsError:
        raise UsageError(f"{args.output} exists; refusing to overwrite it") from None
    except OSError as exc:
        raise UsageError(f"cannot write {args.output}: {exc}") from exc
    common.err(f"wrote {len(entries)} entries of {args.name} to {args.output}")
    return EXIT_OK


def _import(args: argparse.Namespace, store: SessionStore) -> int:
    from heron._support.folder_files import open_regular
    from heron.sessions.export import (
        SessionImportError,
        import_lines,
        import_session,
        parse_export,
    )
    from heron.sessions.names import check_session_name

    try:
        if str(args.file) == "-":
            parsed = parse_export(import_lines(sys.stdin.buffer))
        else:
            with open_regular(args.file, follow=True) as (handle, _):  # never a FIFO's wait
                parsed = parse_export(import_lines(handle))
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"{args.file} is not UTF-8 text: {exc}") from exc
    except SessionImportError as exc:
        common.err(f"{args.file} is not a valid session export: {exc}")
        return EXIT_ERROR
    name = args.as_name or parsed.session
    try:
        check_session_name(name)
        written = import_session(store, parsed, name=name)
    except SessionImportError as exc:
        common.err(str(exc))
        return EXIT_ERROR
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    common.out(
        f"imported {written.entries} entries as session {written.session} "
        f"(new ids {written.first_entry}..{written.last_entry})"
    )
    return EXIT_OK
