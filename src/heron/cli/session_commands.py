"""`heron sessions list|show|resume|fork|export|import` and `heron chat`.

Registered by `heron.cli.main`; only argparse is imported at load time so `heron --help` stays
fast. Sessions live in the state database (see `heron.sessions`); `heron run --session NAME`
and `heron chat --session NAME` write to them, everything here reads, copies or repairs them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from heron.config import HeronConfig
    from heron.messages import Message
    from heron.sessions.session import CliSession
    from heron.sessions.store import SessionStore

Handler = Callable[[argparse.Namespace], int]
EXIT_OK, EXIT_ERROR = 0, 1


def add_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    *,
    agent_flags: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Add `sessions` and `chat` to the `heron` parser; `agent_flags` adds `--model` & co."""
    sessions = sub.add_parser("sessions", help="list, show, resume, fork, export, import sessions")
    ssub = sessions.add_subparsers(dest="sessions_command", required=True, metavar="ACTION")

    listing = ssub.add_parser("list", help="every stored session, most recent first")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    _store_flags(listing)

    show = ssub.add_parser("show", help="a session's entries, one line each")
    show.add_argument("name")
    show.add_argument("--json", action="store_true", help="the entries as JSON Lines (= export)")
    _store_flags(show)

    resume = ssub.add_parser(
        "resume", help="continue a session in the chat (repairs a turn cut off mid-call)"
    )
    resume.add_argument("name")
    resume.add_argument(
        "--repair-only", action="store_true", help="repair the stored history and exit"
    )
    agent_flags(resume)

    fork = ssub.add_parser("fork", help="copy a session (or its start) into a new one")
    fork.add_argument("source")
    fork.add_argument("target")
    fork.add_argument("--at", type=int, metavar="ENTRY", help="copy up to this entry id")
    _store_flags(fork)

    export = ssub.add_parser("export", help="write a session as JSON Lines of entries")
    export.add_argument("name")
    export.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")
    _store_flags(export)

    imp = ssub.add_parser("import", help="read a JSON Lines export into a new session")
    imp.add_argument("file", type=Path, help="the export; - reads stdin")
    imp.add_argument("--as", dest="as_name", metavar="NAME", help="session name to create")
    _store_flags(imp)

    chat = sub.add_parser(
        "chat",
        help="interactive chat with live tool cards and approvals",
        description="Enter sends; Esc then Enter, or a line ending in a backslash, starts a "
        "new line. /help lists the commands. Ctrl-C cancels the running step; a second "
        "Ctrl-C exits.",
    )
    chat.add_argument("--session", metavar="NAME", help="resume or create this session")
    chat.add_argument(
        "--interrupt-word",
        default="stop",
        metavar="WORD",
        help="typed on a line of its own while a step runs, stops it (default: stop)",
    )
    agent_flags(chat)


def _store_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", type=Path, help="default: [state] dir of the configuration")
    parser.add_argument("--config", type=Path, help="configuration file (default ./heron.toml)")


def handlers() -> dict[str, Handler]:
    return {"sessions": cmd_sessions, "chat": cmd_chat}


def cmd_chat(args: argparse.Namespace) -> int:
    from heron.cli.chat import run_chat

    return run_chat(args, session=args.session, must_exist=False)


def cmd_sessions(args: argparse.Namespace) -> int:
    if args.sessions_command == "resume":
        if args.repair_only:
            return _repair_only(args)
        from heron.cli.chat import run_chat

        return run_chat(args, session=args.name, must_exist=True)
    actions: dict[str, Callable[[argparse.Namespace, SessionStore], int]] = {
        "list": _list,
        "show": _show,
        "fork": _fork,
        "export": _export,
        "import": _import,
    }
    from heron.sessions.store import SessionStore

    store = SessionStore.open(store_state_dir(args))
    try:
        return actions[args.sessions_command](args, store)
    finally:
        store.close()


# -- shared with `heron run` and `heron chat` ---------------------------------------------------


def open_session(state_dir: Path, name: str | None, *, must_exist: bool = False) -> CliSession:
    """Take session `name` (new when None) for this process, and report a repair on stderr.

    Raises `UsageError` for a bad or unknown name; `SessionInUseError` and
    `SessionRepairError` pass through (see `session_failed`).
    """
    from heron.cli.commands import UsageError
    from heron.sessions.session import CliSession

    try:
        session = CliSession.open(state_dir, name, must_exist=must_exist)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if session.repaired:
        names = ", ".join(f"{r.name} ({r.call_id})" for r in session.repaired)
        _err(
            f"heron: session {session.name!r} ended mid-turn last time; closed "
            f"{len(session.repaired)} open tool call(s) as interrupted: {names}"
        )
    return session


def session_errors() -> tuple[type[BaseException], ...]:
    """What `open_session` and a turn in a session raise that `session_failed` reports."""
    from heron.sessions.lock import SessionInUseError
    from heron.sessions.repair import SessionRepairError
    from heron.sessions.store import ConcurrentWriteError

    return (SessionInUseError, SessionRepairError, ConcurrentWriteError)


def session_failed(exc: BaseException) -> int:
    """Report a session error on stderr; the exit code."""
    from heron.sessions.repair import SessionRepairError

    hint = ""
    if isinstance(exc, SessionRepairError):
        hint = (
            " (`heron sessions show NAME` lists its entries; `heron sessions fork NAME NEW "
            "--at ENTRY` copies its valid start into a new session)"
        )
    _err(f"heron: {exc}{hint}")
    return EXIT_ERROR


def announce_session(session: CliSession, *, always: bool) -> None:
    """Tell the operator where the conversation is stored (stderr, so stdout stays clean):
    always for people (`always`), else only when stderr is a terminal; never when nothing
    was stored (the run failed before its first message)."""
    if session.writer.head and (always or sys.stderr.isatty()):
        _err(
            f"heron: session {session.name} — continue it with "
            f"`heron chat --session {session.name}`"
        )


# -- the actions --------------------------------------------------------------------------------


def store_state_dir(args: argparse.Namespace) -> Path:
    """`--state-dir`, else the `[state] dir` of the configuration (`--config`), else the default."""
    if args.state_dir is not None:
        return Path(args.state_dir)
    return _state_dir(_load_config(args.config))


def _load_config(config_file: Path | None) -> HeronConfig:
    from heron.cli.commands import UsageError
    from heron.config import ConfigError, load_config

    try:
        return load_config(config_file=config_file)
    except ConfigError as exc:
        raise UsageError(f"configuration error: {exc}") from exc


def _state_dir(config: HeronConfig) -> Path:
    from heron.cli.commands import _state_dir

    return _state_dir(config)


def _list(args: argparse.Namespace, store: SessionStore) -> int:
    import json

    for info in store.list_sessions():
        if args.json:
            row = {
                "session": info.session,
                "entries": info.entries,
                "last_entry": info.last_entry,
                "updated": _when(info.updated),
            }
            _out(json.dumps(row, ensure_ascii=False))
        else:
            _out(f"{info.session:40} {info.entries:6} entries  updated {_when(info.updated)}")
    return EXIT_OK


def _show(args: argparse.Namespace, store: SessionStore) -> int:
    from heron.cli.commands import UsageError
    from heron.sessions.export import export_lines
    from heron.sessions.repair import open_calls

    entries = store.entries(args.name)
    if not entries:
        raise UsageError(f"no session named {args.name!r}; see `heron sessions list`")
    if args.json:
        sys.stdout.writelines(export_lines(entries))
        return EXIT_OK
    first, last = entries[0].timestamp, entries[-1].timestamp
    _out(f"session {args.name} · {len(entries)} entries · {_when(first)} → {_when(last)}")
    for entry in entries:
        role = entry.message.role
        _out(
            f"#{entry.entry_id:<6} {_when(entry.timestamp)[11:19]}  {role:9}  "
            f"{summarize_message(entry.message)}"
        )
    pending = open_calls([e.message for e in entries])
    if pending:
        _out(
            f"(ended mid-turn: {len(pending)} tool call(s) without a result; resuming the "
            "session closes them as interrupted)"
        )
    return EXIT_OK


def summarize_message(message: Message, width: int = 100) -> str:
    """One line for a history message: its text, its tool calls, or its result."""
    from heron.messages import AssistantMessage, ToolResultMessage, UserMessage

    if isinstance(message, UserMessage):
        text = (
            message.content if message.source == "user" else f"[{message.source}] {message.content}"
        )
    elif isinstance(message, AssistantMessage):
        calls = " ".join(f"→ {c.name} [{c.id}]" for c in message.tool_calls)
        text = " ".join(p for p in (message.text, calls) if p)
    elif isinstance(message, ToolResultMessage):
        mark = "✘ " if message.is_error else ""
        text = f"[{message.call_id}] {message.name}: {mark}{message.content}"
    else:
        text = message.content
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _fork(args: argparse.Namespace, store: SessionStore) -> int:
    from heron.cli.commands import UsageError
    from heron.sessions.export import SessionImportError, fork_session
    from heron.sessions.session import check_session_name

    try:
        check_session_name(args.target)
        written = fork_session(store, args.source, args.target, at=args.at)
    except (ValueError, SessionImportError) as exc:
        raise UsageError(str(exc)) from exc
    _out(
        f"forked {args.source} into {written.session}: {written.entries} entries "
        f"(new ids {written.first_entry}..{written.last_entry})"
    )
    return EXIT_OK


def _export(args: argparse.Namespace, store: SessionStore) -> int:
    from heron.cli.commands import UsageError
    from heron.sessions.export import export_lines

    entries = store.entries(args.name)
    if not entries:
        raise UsageError(f"no session named {args.name!r}; see `heron sessions list`")
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
    _err(f"heron: wrote {len(entries)} entries of {args.name} to {args.output}")
    return EXIT_OK


def _import(args: argparse.Namespace, store: SessionStore) -> int:
    from heron.cli.commands import UsageError
    from heron.sessions.export import SessionImportError, import_session, parse_export
    from heron.sessions.session import check_session_name

    try:
        if str(args.file) == "-":
            parsed = parse_export(sys.stdin)
        else:
            with args.file.open(encoding="utf-8") as lines:
                parsed = parse_export(lines)
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"{args.file} is not UTF-8 text: {exc}") from exc
    except SessionImportError as exc:
        _err(f"heron: {args.file} is not a valid session export: {exc}")
        return EXIT_ERROR
    name = args.as_name or parsed.session
    try:
        check_session_name(name)
        written = import_session(store, parsed, name=name)
    except SessionImportError as exc:
        _err(f"heron: {exc}")
        return EXIT_ERROR
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    _out(
        f"imported {written.entries} entries as session {written.session} "
        f"(new ids {written.first_entry}..{written.last_entry})"
    )
    return EXIT_OK


def _repair_only(args: argparse.Namespace) -> int:
    from heron.cli.commands import _config

    state_dir = _state_dir(_config(args))
    try:
        session = open_session(state_dir, args.name, must_exist=True)
    except session_errors() as exc:
        return session_failed(exc)
    try:
        if not session.repaired:
            _out(f"session {session.name}: nothing to repair")
        else:
            _out(
                f"session {session.name}: appended {len(session.repaired)} interrupted "
                f"result(s); head is now entry {session.writer.head}"
            )
    finally:
        session.close()
    return EXIT_OK


def _when(epoch: float) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(epoch).astimezone().isoformat(timespec="seconds")


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
