"""The search side of the workspace file tools: listing one folder, finding files by name and
searching file content line by line.

Each function takes its caps from the caller (`heron.toolsets.files` holds the values the tools
use) and raises `Refused` for input it cannot act on; the tool wrapper turns that into a failed
result.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
from typing import Any

from heron._support.patterns import MAX_PATTERN_CHARS, OutsidePattern, PatternError
from heron.safety.workspace import (
    MAX_SCAN_ENTRIES,
    TreeWalk,
    Workspace,
    WorkspaceError,
    entry_type,
)
from heron.tools.definition import ToolResult
from heron.toolsets.file_results import Refused, plural


def list_directory(ws: Workspace, path: str, *, max_entries: int) -> ToolResult:
    """One folder's entries by name, at most `max_entries` of them, with the total."""
    target = ws.resolve(path, must_exist=True)
    rel = ws.relative(target)
    if not target.is_dir():
        raise Refused("not_a_directory", f"{rel} is a file, not a directory; use read_file")
    hidden = {str(d) for d in ws.state_dirs()}
    names = sorted(n for n in os.listdir(target) if os.path.join(target, n) not in hidden)
    entries: list[dict[str, Any]] = []
    for name in names[:max_entries]:
        child = target / name
        kind = entry_type(child)
        size = child.lstat().st_size if kind == "file" else None
        entries.append({"name": name, "type": kind, "size": size})
    total = len(names)
    head = f"{rel}: {plural(total, 'entry', 'entries')}"
    if total > len(entries):
        head += f", the first {len(entries)} (by name) shown; narrow down with find_files"
    lines = [head, *map(_entry_row, entries)]
    data = {"path": rel, "total": total, "entries": entries, "truncated": total > len(entries)}
    return ToolResult.ok("\n".join(lines), data=data)


def _entry_row(entry: dict[str, Any]) -> str:
    if entry["type"] == "dir":
        return f"{entry['name']}/"
    if entry["type"] == "file":
        return f"{entry['name']}  ({entry['size']:,} bytes)"
    return f"{entry['name']}  ({entry['type']})"


def find_by_name(ws: Workspace, pattern: str, path: str, *, max_results: int) -> ToolResult:
    """Files under `path` whose name matches the glob `pattern`: the first `max_results` and
    the total."""
    if not pattern or "/" in pattern or len(pattern) > 256:
        raise Refused(
            "invalid_pattern",
            f"pattern {pattern!r} refused: give a file-name glob of 1-256 characters without "
            "'/', e.g. '*.py'; pass the directory to search as path",
        )
    start = ws.resolve(path, must_exist=True)
    walk = ws.walk(start)
    found = [p for p in walk.files + walk.links if fnmatch.fnmatchcase(p.name, pattern)]
    found.sort()
    matches = [
        {"path": ws.relative(p), "type": entry_type(p), "size": p.lstat().st_size}
        for p in found[:max_results]
    ]
    rel = ws.relative(start)
    head = f"{plural(len(found), 'file')} named {pattern!r} under {rel}"
    if len(found) > len(matches):
        head += f"; the first {len(matches)} shown, pass a narrower path or pattern for the rest"
    rows = [f"{m['path']}  ({m['size']:,} bytes)" for m in matches]
    data = {"total": len(found), "matches": matches, "truncated": len(found) > len(matches)}
    return ToolResult.ok("\n".join([head, *_walk_notes(walk), *rows]), data=data)


def _walk_notes(walk: TreeWalk) -> list[str]:
    notes: list[str] = []
    if walk.skipped_dirs:
        shown = ", ".join(walk.skipped_dirs[:10])
        more = f" and {len(walk.skipped_dirs) - 10} more" if len(walk.skipped_dirs) > 10 else ""
        notes.append(f"[not searched: {shown}{more}; pass one as path to search inside it]")
    if walk.scan_limit_hit:
        notes.append(f"[stopped after {MAX_SCAN_ENTRIES:,} entries; pass a narrower path]")
    return notes


def grep_tree(
    ws: Workspace,
    pattern: str,
    path: str,
    cursor: str | None,
    *,
    page_size: int,
    max_matches: int,
    max_text_chars: int,
) -> ToolResult:
    """Lines matching the regex `pattern` in the text files under `path`: one page of
    `page_size` matches from `cursor` on, counting up to `max_matches`, each line cut at
    `max_text_chars`."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise Refused("invalid_pattern", f"pattern is longer than {MAX_PATTERN_CHARS:,} characters")
    try:
        regex = OutsidePattern(pattern)
    except PatternError as exc:
        raise Refused("invalid_regex", f"invalid regular expression {pattern!r}: {exc}") from None
    query = hashlib.sha256(f"{pattern}\0{path}".encode("utf-8", "surrogatepass")).hexdigest()[:8]
    start_at = _parse_cursor(cursor, query)
    root = ws.resolve(path, must_exist=True)
    walk = ws.walk(root)
    matches: list[dict[str, Any]] = []
    skipped = {"binary_file": 0, "not_utf8": 0, "too_large": 0, "unreadable": 0}
    for file in walk.files:
        try:
            loaded = ws.read_text(file, purpose="grep_files")
        except WorkspaceError as exc:
            skipped[exc.reason if exc.reason in skipped else "unreadable"] += 1
            continue
        lines = [line.removesuffix("\r") for line in loaded.lines]
        for index in regex.matching_lines(lines):
            matches.append({"path": loaded.rel, "line": index + 1, "text": lines[index]})
        if len(matches) >= max_matches:
            break
    capped = len(matches) >= max_matches
    page = matches[start_at : start_at + page_size]
    end = start_at + len(page)
    next_cursor = f"{end}.{query}" if end < len(matches) else None
    total = plural(len(matches), "match", "matches")
    head = f"{'at least ' if capped else ''}{total} for /{pattern}/ under {ws.relative(root)}"
    if page:
        head += f"; showing {start_at + 1}–{end}"
    if next_cursor:
        head += f"; pass cursor={next_cursor!r} for the next page"
    notes = _walk_notes(walk)
    skipped_text = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in skipped.items() if n)
    if skipped_text or walk.links:
        links = f"{len(walk.links)} symbolic links" if walk.links else ""
        notes.append(f"[files not searched: {', '.join(filter(None, [skipped_text, links]))}]")
    rows = []
    for match in page:
        shown = match["text"]
        if len(shown) > max_text_chars:
            shown = shown[:max_text_chars] + " [… cut]"
            match["text"] = shown
        rows.append(f"{match['path']}:{match['line']}: {shown}")
    data = {
        "total": len(matches),
        "total_is_lower_bound": capped,
        "matches": page,
        "next_cursor": next_cursor,
        "skipped": skipped | {"symlinks": len(walk.links)},
    }
    return ToolResult.ok("\n".join([head, *notes, *rows]), data=data)


def _parse_cursor(cursor: str | None, query: str) -> int:
    if cursor is None:
        return 0
    offset, _, tag = cursor.partition(".")
    if not offset.isdigit() or tag != query:
        raise Refused(
            "invalid_cursor",
            f"cursor {cursor!r} does not belong to this pattern and path; pass the cursor from "
            "the previous grep_files result of the same search, or none to start over",
        )
    return int(offset)
