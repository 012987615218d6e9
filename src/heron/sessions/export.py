"""Moving session histories between sessions and files: export, import, fork.

An export is JSON Lines, one stored entry per line, oldest first::

    {"session": "s1", "entry_id": 7, "parent_id": null, "timestamp": 1714550000.1,
     "message": {"role": "user", "content": "hi", "source": "user"}}

Import checks the whole file before it writes anything: one session per file, entry ids
unique and increasing, each `parent_id` naming the entry before it, every message valid, and
a history a provider would accept (calls left open at the very end are allowed: resuming
repairs them). It refuses a target session that already has entries, so importing the same
file twice cannot duplicate a history. Entries get new ids in the target database (ids are
unique per database, not per session) and keep their timestamps.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from pydantic import ValidationError

from heron._support.limits import DEFAULT_LIMITS, InputRejected, parse_json
from heron.errors import HeronError
from heron.messages import Message
from heron.sessions.repair import SessionRepairError, repair_messages
from heron.sessions.store import MESSAGE, SessionEntry, SessionExistsError, SessionStore

FIELDS = frozenset({"session", "entry_id", "parent_id", "timestamp", "message"})


class SessionImportError(HeronError, ValueError):
    """The file is not a valid session export, or its target session is taken."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ParsedExport:
    """A checked export: the session it came from and its entries, oldest first."""

    session: str
    entries: tuple[SessionEntry, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Written:
    """Entries written to `session` by an import or a fork."""

    session: str
    entries: int
    first_entry: int
    last_entry: int


def entry_json(entry: SessionEntry) -> dict[str, Any]:
    """One entry as the JSON object of its export line."""
    return {
        "session": entry.session,
        "entry_id": entry.entry_id,
        "parent_id": entry.parent_id,
        "timestamp": entry.timestamp,
        "message": entry.message.model_dump(mode="json"),
    }


def export_lines(entries: Iterable[SessionEntry]) -> Iterator[str]:
    """The export of `entries`: one compact JSON line each, newline included."""
    for entry in entries:
        yield json.dumps(entry_json(entry), ensure_ascii=False, separators=(",", ":")) + "\n"


def parse_export(lines: Iterable[str]) -> ParsedExport:
    """Check a whole export; raise `SessionImportError` naming the first problem and its line."""
    entries: list[SessionEntry] = []
    first_line: dict[int, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        entry = _parse_line(number, line)
        if entries:
            _check_order(number, entry, entries[-1], entries[0].session, first_line)
        elif entry.parent_id is not None:
            raise SessionImportError(
                f"line {number}: the first entry has parent_id {entry.parent_id}; a session's "
                "first entry has none (is the file cut at the top?)"
            )
        first_line[entry.entry_id] = number
        entries.append(entry)
    if not entries:
        raise SessionImportError("the file holds no entries")
    try:
        repair_messages([e.message for e in entries])
    except SessionRepairError as exc:
        raise SessionImportError(str(exc)) from exc
    return ParsedExport(session=entries[0].session, entries=tuple(entries))


def import_lines(handle: BinaryIO) -> Iterator[str]:
    """The lines of an export file (or stdin) as text, each read at most to the input limit
    plus one byte: a file without newlines (`/dev/zero`) is refused at the limit, not held
    in memory whole. `SessionImportError` for a line past it; `UnicodeDecodeError` for bytes
    that are not UTF-8."""
    limit = DEFAULT_LIMITS.max_bytes
    for number in itertools.count(1):
        line = handle.readline(limit + 1)
        if not line:
            return
        if len(line) > limit:
            raise SessionImportError(f"line {number}: longer than {limit:,} bytes")
        yield line.decode("utf-8")


def _parse_line(number: int, line: str) -> SessionEntry:
    try:
        data = parse_json(line)  # an import file is outside data: within the input limits
    except InputRejected as exc:
        raise SessionImportError(f"line {number}: not JSON heron takes in ({exc.problem})") from exc
    if not isinstance(data, dict):
        raise SessionImportError(f"line {number}: not a JSON object")
    if set(data) != FIELDS:
        missing = sorted(FIELDS - set(data))
        extra = sorted(set(data) - FIELDS)
        problems = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unknown {', '.join(extra)}"] if extra else []
        )
        raise SessionImportError(f"line {number}: {'; '.join(problems)}")
    session, entry_id, parent_id, ts = (
        data["session"],
        data["entry_id"],
        data["parent_id"],
        data["timestamp"],
    )
    if not isinstance(session, str) or not session:
        raise SessionImportError(f"line {number}: session must be a non-empty string")
    if not _is_id(entry_id):
        raise SessionImportError(f"line {number}: entry_id must be a positive integer")
    if parent_id is not None and not _is_id(parent_id):
        raise SessionImportError(f"line {number}: parent_id must be a positive integer or null")
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        raise SessionImportError(f"line {number}: timestamp must be a number of seconds")
    try:
        message: Message = MESSAGE.validate_python(data["message"])
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SessionImportError(
            f"line {number}: invalid message ({where}: {first['msg']})"
        ) from exc
    return SessionEntry(
        entry_id=entry_id, session=session, parent_id=parent_id, timestamp=ts, message=message
    )


def _is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _check_order(
    number: int,
    entry: SessionEntry,
    previous: SessionEntry,
    session: str,
    first_line: dict[int, int],
) -> None:
    if entry.session != session:
        raise SessionImportError(
            f"line {number}: entry of session {entry.session!r} in an export of {session!r}; "
            "a file holds one session"
        )
    if entry.entry_id in first_line:
        raise SessionImportError(
            f"line {number}: entry id {entry.entry_id} clashes with line "
            f"{first_line[entry.entry_id]}; every entry id appears once"
        )
    if entry.entry_id < previous.entry_id:
        raise SessionImportError(
            f"line {number}: entry id {entry.entry_id} comes after {previous.entry_id}; "
            "entries must be oldest first"
        )
    if entry.parent_id != previous.entry_id:
        raise SessionImportError(
            f"line {number}: parent_id {entry.parent_id} does not name the entry before it "
            f"({previous.entry_id}); the chain is broken (entries missing or reordered?)"
        )


def import_session(
    store: SessionStore, parsed: ParsedExport, *, name: str | None = None
) -> Written:
    """Write a checked export as session `name` (default: its own name), in one transaction.

    Raises `SessionImportError` when the target already has entries.
    """
    return _copy(store, [(e.timestamp, e.message) for e in parsed.entries], name or parsed.session)


def fork_session(
    store: SessionStore, source: str, target: str, *, at: int | None = None
) -> Written:
    """Copy `source` up to and including entry `at` (default: all of it) into a new session.

    The copy keeps the timestamps; `source` is untouched. A fork cut inside a tool round has
    open calls at its end, which resuming it repairs.
    """
    entries = store.entries(source)
    if not entries:
        raise SessionImportError(f"no session named {source!r}")
    if at is not None:
        ids = [e.entry_id for e in entries]
        if at not in ids:
            raise SessionImportError(
                f"entry {at} is not in session {source!r} (its entries are {ids[0]}..{ids[-1]})"
            )
        entries = entries[: ids.index(at) + 1]
    return _copy(store, [(e.timestamp, e.message) for e in entries], target)


def _copy(store: SessionStore, items: Sequence[tuple[float, Message]], target: str) -> Written:
    try:
        first, head = store.create(target, items)
    except SessionExistsError as exc:
        raise SessionImportError(
            f"session {target!r} already exists ({exc.entries} entries); refusing to "
            "duplicate or mix histories — choose another name"
        ) from None
    return Written(session=target, entries=len(items), first_entry=first, last_entry=head)
