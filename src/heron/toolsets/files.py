"""Workspace file tools: read, list, find, grep, write, edit, move, copy, delete.

`file_tools(ws)` builds the nine tools over one `Workspace`. Every path goes through
`Workspace.resolve`, so traversal, absolute paths and symlink escapes are refused before any
file is touched. Fidelity is strict: files are read and written as bytes, text is strict UTF-8,
and no character (curly quotes, no-break spaces, CRLF, tabs, the final newline or its absence) is
ever converted. Reads and listings are capped, and every cap is stated in the result together
with the way to see more. After a code file is written its checker runs (`heron.toolsets.lint`)
and the findings come back in the same result.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from heron.safety.workspace import TextFile, Workspace, WorkspaceError, atomic_write, entry_type
from heron.tools.definition import Tool, ToolContext, ToolResult
from heron.tools.function_tool import tool
from heron.toolsets.file_results import P, Refused, config_change, guarded, plural
from heron.toolsets.file_search import find_by_name, grep_tree, list_directory
from heron.toolsets.lint import Linters

__all__ = ["MAX_CONTENT_BYTES", "file_tools"]

MAX_CONTENT_BYTES = 5 * 1024 * 1024
"""Largest `content`, `old_string` or `new_string` accepted, in UTF-8 bytes."""
MAX_COPY_BYTES = 200 * 1024 * 1024
DEFAULT_READ_LIMIT = 200
MAX_READ_LIMIT = 2000
MAX_LINE_CHARS = 2000
MAX_READ_OUTPUT_CHARS = 60_000
MAX_LIST_ENTRIES = 500
MAX_FIND_RESULTS = 200
GREP_PAGE_SIZE = 100
MAX_GREP_MATCHES = 5000
MAX_GREP_TEXT_CHARS = 300
# Characters that look like ASCII or are invisible: read_file names them so that an edit copies
# them exactly instead of typing their ASCII look-alikes.
_LOOKALIKES = frozenset("\t\u00a0\u00ad\u2007\u200b\u200c\u200d\u2013\u2014\u2018\u2019")
_LOOKALIKES |= frozenset("\u201c\u201d\u202f\u2060\u2212\ufeff")
_TYPOGRAPHIC = str.maketrans(
    {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u00a0": " ", "\u202f": " "}
    | {"\u2007": " ", "\u2013": "-", "\u2014": "-", "\u2212": "-"}
)

Offset = Annotated[int, Field(ge=1)]
Limit = Annotated[int, Field(ge=1, le=MAX_READ_LIMIT)]


def _writable(ctx: ToolContext, path: str) -> None:
    """Refuse any change when this run's workspace is read-only (a sub-agent spawned without
    write access), before the path is even resolved."""
    if ctx.workspace_read_only:
        raise WorkspaceError(
            "read_only_workspace",
            path,
            f"nothing was changed: the workspace is read-only for this agent ({path!r} not "
            "written). Report what should change instead, or ask for a spawn with write access.",
        )


def _check_size(name: str, value: str) -> bytes:
    """The UTF-8 bytes of a text argument; refuses oversize text and lone surrogates."""
    if len(value) > MAX_CONTENT_BYTES:
        raise Refused("too_large", f"{name} is {len(value):,} characters; the limit is 5 MB")
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise Refused(
            "invalid_text", f"{name} holds an unpaired surrogate at {exc.start}; not valid text"
        ) from None
    if len(data) > MAX_CONTENT_BYTES:
        raise Refused("too_large", f"{name} is {len(data):,} bytes; the limit is 5 MB")
    return data


def _read(ws: Workspace, path: str, offset: int, limit: int) -> ToolResult:
    file = ws.read_text(ws.resolve(path, must_exist=True), purpose="read_file")
    lines = file.lines
    total = len(lines)
    meta: dict[str, Any] = {"path": file.rel, "size": file.size, "total_lines": total}
    if total == 0:
        return ToolResult.ok(f"{file.rel}: empty file (0 lines, 0 bytes)", data=meta)
    if offset > total:
        raise Refused(
            "offset_past_end", f"offset {offset} is past the end: {file.rel} has {total} lines"
        )
    shown: list[str] = []
    used = cut = 0
    last = offset - 1
    for number in range(offset, min(total, offset + limit - 1) + 1):
        line = lines[number - 1]
        if number < total or file.text.endswith("\n"):
            line = line.removesuffix("\r")  # the CR of a CRLF; the header names the endings
        if len(line) > MAX_LINE_CHARS:
            cut += 1
            more = len(line) - MAX_LINE_CHARS
            line = f"{line[:MAX_LINE_CHARS]} [… line cut here: {more:,} more characters]"
        rendered = f"{number:>6}\t{line}"
        if shown and used + len(rendered) > MAX_READ_OUTPUT_CHARS:
            break
        shown.append(rendered)
        used += len(rendered) + 1
        last = number
    notes = _read_notes(file, "".join(lines[offset - 1 : last]), cut, last == total)
    if last < total:
        head = f"{file.rel} — lines {offset}–{last} of {total} shown; pass offset={last + 1} to "
        head += "continue" + (" (output size limit reached)" if last < offset + limit - 1 else "")
    else:
        head = f"{file.rel} — lines {offset}–{last} of {total} shown (end of file)"
    meta |= {"offset": offset, "last_line": last, "next_offset": last + 1 if last < total else None}
    meta["line_endings"] = file.line_endings()
    return ToolResult.ok("\n".join([head, *notes, *shown]), data=meta)


def _read_notes(file: TextFile, shown: str, cut: int, at_end: bool) -> list[str]:
    notes: list[str] = []
    endings = file.line_endings()
    if endings not in ("LF", "none"):
        notes.append(f"line endings: {endings} (shown without the CR; edits must keep \\r\\n)")
    if at_end and not file.text.endswith("\n"):
        notes.append("no newline at end of file")
    special = sorted({ch for ch in shown if ch in _LOOKALIKES})
    if special:
        names = ", ".join(
            "TAB" if ch == "\t" else f"U+{ord(ch):04X} {unicodedata.name(ch, '?')}"
            for ch in special
        )
        notes.append(f"contains {names}; edit_file needs these exact characters")
    if cut:
        notes.append(f"{cut} line(s) longer than {MAX_LINE_CHARS:,} characters were cut")
    return [f"[{note}]" for note in notes]


def _lint_lines(linters: Linters, target: Path, content: str, data: dict[str, Any]) -> list[str]:
    report = linters.check(target, content)
    data["lint"] = report.to_data() if report is not None else None
    if report is None:
        return []
    lines = [report.render()]
    if report.status == "findings":
        lines.append("The write succeeded; fix these problems with edit_file.")
    return lines


def _write(ws: Workspace, linters: Linters, path: str, content: str) -> ToolResult:
    data_bytes = _check_size("content", content)
    target = ws.resolve(path)
    rel = ws.relative(target)
    if target == ws.root or target.is_dir():
        raise Refused("is_directory", f"{rel} is a directory; give a file path")
    missing = ws.missing_parents(target, path)
    existed = target.exists()
    if existed and not target.is_file():
        raise Refused("not_regular_file", f"{rel} is not a regular file")
    old_size = target.stat().st_size if existed else 0
    _with_parents(missing, lambda: atomic_write(target, data_bytes))
    created_dirs = [ws.relative(folder) for folder in missing]
    what = f"replaced the previous {old_size:,} bytes" if existed else "new file"
    lines = [f"wrote {len(data_bytes):,} bytes to {rel} ({what})"]
    if created_dirs:
        lines.append(f"created directories: {', '.join(created_dirs)}")
    data: dict[str, Any] = {"path": rel, "bytes": len(data_bytes), "created": not existed}
    data["created_dirs"] = created_dirs
    lines += _lint_lines(linters, target, content, data)
    return ToolResult.ok("\n".join(lines), data=data)


def _edit(ws: Workspace, linters: Linters, path: str, old: str, new: str) -> ToolResult:
    _check_size("old_string", old)
    _check_size("new_string", new)
    if not old:
        raise Refused("empty_old_string", "old_string is empty; use write_file for a whole file")
    if old == new:
        raise Refused("no_change", "old_string and new_string are identical; nothing to do")
    target = ws.resolve(path, must_exist=True)
    file = ws.read_text(target, purpose="edit_file")
    count, starts = 0, list[int]()  # overlapping matches count: "aa" is twice in "aaa"
    found = file.text.find(old)
    while found != -1:
        count += 1
        if len(starts) < 10:
            starts.append(found)
        found = file.text.find(old, found + 1)
    if count == 0:
        raise Refused(
            "no_match", f"old_string was not found in {file.rel}; {_miss_hint(file, old)}"
        )
    if count > 1:
        at = [file.text.count("\n", 0, s) + 1 for s in starts]
        where = ", ".join(map(str, at)) + (" …" if count > len(at) else "")
        raise Refused(
            "ambiguous_match",
            f"old_string matches {count} times in {file.rel} (lines {where}); include "
            "more surrounding text so that it matches exactly once",
            count=count,
            lines=at,
        )
    start = starts[0]
    result = file.text[:start] + new + file.text[start + len(old) :]
    atomic_write(target, result.encode("utf-8"))
    line = file.text.count("\n", 0, start) + 1
    spans = f"{old.count(chr(10)) + 1} line(s) became {new.count(chr(10)) + 1}"
    lines = [f"edited {file.rel}: replaced the one match at line {line} ({spans})"]
    data: dict[str, Any] = {"path": file.rel, "line": line, "bytes": len(result.encode())}
    lines += _lint_lines(linters, target, result, data)
    return ToolResult.ok("\n".join(lines), data=data)


def _miss_hint(file: TextFile, old: str) -> str:
    """Why an exact match failed, when a common look-alike explains it. Never applied."""
    if "\r\n" in file.text and "\n" in old and old.replace("\n", "\r\n") in file.text:
        return "the file has CRLF line endings and old_string has bare LF; include the \\r"
    if old.translate(_TYPOGRAPHIC) in file.text.translate(_TYPOGRAPHIC):
        return (
            "it would match if curly and straight quotes, dashes or no-break spaces were treated "
            "as equal; heron never converts them, so copy the exact characters from read_file"
        )
    squeeze = functools.partial(re.sub, r"\s+", " ")
    if squeeze(old).strip() and squeeze(old).strip() in squeeze(file.text):
        return "it would match if whitespace were ignored; check tabs, indentation and spaces"
    return "read the file again (it may have changed) and copy the text exactly"


def _move_or_copy(ws: Workspace, src: str, dst: str, *, copy: bool) -> ToolResult:
    source = ws.resolve(src, must_exist=True, follow_symlinks=copy)
    target = ws.resolve(dst, follow_symlinks=False)
    verb = "copy" if copy else "move"
    if source == ws.root:
        raise Refused("workspace_root", f"cannot {verb} the workspace root itself")
    if os.path.lexists(target):
        raise Refused(
            "destination_exists",
            f"{ws.relative(target)} already exists; {verb}_path never overwrites, so delete it "
            "first or choose another destination",
        )
    is_dir = source.is_dir() and not source.is_symlink()
    if is_dir:
        ws.check_holds_no_state(source, src)
    if is_dir and target.is_relative_to(source):
        raise Refused("into_itself", f"cannot {verb} {src!r} into itself ({dst!r})")
    if copy:
        size = _tree_size(source) if is_dir else source.stat().st_size
        if size > MAX_COPY_BYTES:
            raise Refused("too_large", f"{src!r} holds {size:,} bytes; copy_path stops at 200 MB")
    kind = "directory" if is_dir else "symbolic link" if source.is_symlink() else "file"
    missing = ws.missing_parents(target, dst)
    if not copy:
        _with_parents(missing, lambda: shutil.move(source, target))
    elif is_dir:
        _with_parents(missing, lambda: _copy_tree(source, target))
    else:
        _with_parents(missing, lambda: shutil.copy2(source, target))
    created_dirs = [ws.relative(folder) for folder in missing]
    done = "copied" if copy else "moved"
    text = f"{done} {kind} {ws.relative(source)} → {ws.relative(target)}"
    data = {"src": ws.relative(source), "dst": ws.relative(target), "type": kind}
    return ToolResult.ok(text, data=data | {"created_dirs": created_dirs})


def _with_parents(missing: list[Path], action: Callable[[], object]) -> None:
    """Create the `missing` folders, then act; if the action fails, remove them again."""
    for folder in missing:
        folder.mkdir()
    try:
        action()
    except BaseException:
        for folder in reversed(missing):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _copy_tree(source: Path, target: Path) -> None:
    try:
        shutil.copytree(source, target, symlinks=True)  # links stay links, never followed
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)  # leave no half-made copy behind
        raise


def _tree_size(folder: Path) -> int:
    return sum(
        (Path(base) / name).lstat().st_size for base, _, files in os.walk(folder) for name in files
    )


def _delete(ws: Workspace, path: str) -> ToolResult:
    target = ws.resolve(path, must_exist=True, follow_symlinks=False)
    rel = ws.relative(target)
    if target == ws.root:
        raise Refused("workspace_root", "cannot delete the workspace root itself")
    kind = entry_type(target)
    if kind == "dir":
        ws.check_holds_no_state(target, path)
        count = sum(len(files) for _, _, files in os.walk(target))
        size = _tree_size(target)
        shutil.rmtree(target)
        text = f"deleted directory {rel} ({plural(count, 'file')}, {size:,} bytes)"
    else:
        size = target.lstat().st_size
        target.unlink()
        text = f"deleted {kind} {rel}" + (
            " (its target was left alone)" if kind == "symlink" else f" ({size:,} bytes)"
        )
    return ToolResult.ok(text, data={"path": rel, "type": kind})


def file_tools(ws: Workspace, *, linters: Linters | None = None) -> list[Tool]:
    """The nine workspace file tools over `ws`; `linters` configures the checks after writes
    (default `Linters()`, so Python, JSON, YAML, TOML and JavaScript files are checked)."""
    checks = linters if linters is not None else Linters()

    def guard(fn: Callable[P, ToolResult]) -> Callable[P, ToolResult]:
        return guarded(ws, fn)

    @tool(
        read_only=True,
        idempotent=True,
        owner="builtin",
        examples=[
            {"path": "src/app.py"},
            {"path": "logs/build.log", "offset": 201, "limit": 100},
        ],
    )
    @guard
    def read_file(path: str, offset: Offset = 1, limit: Limit = DEFAULT_READ_LIMIT) -> ToolResult:
        """Read a UTF-8 text file of the workspace, with line numbers. Use it to look at a file
        before editing it, or to page through a long one.

        Cannot read binary files (images, PDFs, archives: refused with the size and a type
        hint), files that are not valid UTF-8 (the bad byte and its line are named; nothing is
        guessed or replaced), files over 20 MB, or anything outside the workspace (absolute
        paths, '..' and links leading out are refused). Truncation is always stated: the first
        line says e.g. "lines 1–200 of 5000 shown; pass offset=201 to continue". Lines longer
        than 2,000 characters are cut with a marker. The header names CRLF line endings, a
        missing final newline, tabs and look-alike characters (curly quotes, no-break spaces)
        so edit_file can copy them exactly. Cheap: reads the file once from local disk.

        Args:
            path: File path relative to the workspace root, e.g. `src/app.py`.
            offset: First line to show, 1-based.
            limit: Number of lines to show (1-2000).

        Returns:
            A header line, bracketed notes, then `<line number><TAB><text>` per line.
        """
        return _read(ws, path, offset, limit)

    @tool(read_only=True, idempotent=True, owner="builtin", examples=[{"path": "."}])
    @guard
    def list_dir(path: str = ".") -> ToolResult:
        """List one directory of the workspace (not recursive). Use it to see what a folder
        holds; use find_files to search a whole tree by name.

        Shows hidden entries too. At most 500 entries are listed, by name; the result states
        the total when there are more. Refuses files (use read_file) and paths outside the
        workspace. Cheap: one directory read.

        Args:
            path: Directory relative to the workspace root; `.` is the root.

        Returns:
            `<path>: <n> entries`, then one line per entry: `name/` for a directory,
            `name  (<size> bytes)` for a file, `name  (symlink)` or `(other)`.
        """
        return list_directory(ws, path, max_entries=MAX_LIST_ENTRIES)

    @tool(
        read_only=True,
        idempotent=True,
        owner="builtin",
        examples=[{"pattern": "*.py"}, {"pattern": "README*", "path": "docs"}],
    )
    @guard
    def find_files(pattern: str, path: str = ".") -> ToolResult:
        """Find files by NAME anywhere under a directory, with a shell glob (`*`, `?`, `[abc]`,
        case-sensitive). It does NOT search file content: use grep_files for that.

        The glob matches the file name only, so a pattern containing '/' is refused; pass the
        folder as `path` instead. Does not enter .git, node_modules, virtualenvs or cache
        folders unless `path` points inside one (the result names the folders it skipped).
        Returns at most 200 files with the total count. Cost: walks the tree, up to 100,000
        entries (about a second on a large repository).

        Args:
            pattern: File-name glob, e.g. `*.py`, `test_*.py`, `Makefile`.
            path: Directory to search, relative to the workspace root.

        Returns:
            `<n> files named '<pattern>' under <path>`, then `path  (<size> bytes)` per file.
        """
        return find_by_name(ws, pattern, path, max_results=MAX_FIND_RESULTS)

    @tool(
        read_only=True,
        idempotent=True,
        owner="builtin",
        examples=[
            {"pattern": r"def \w+_handler\("},
            {"pattern": "raise (ValueError|KeyError)", "path": "src"},
        ],
    )
    @guard
    def grep_files(pattern: str, path: str = ".", cursor: str | None = None) -> ToolResult:
        """Search file CONTENT line by line with a regular expression (RE2 syntax). Use it to find
        where something is defined or used; use find_files to search by file name.

        Matches within one line only (no multi-line patterns). Skips binary, non-UTF-8 and
        over-20 MB files, symbolic links, and .git / node_modules / cache folders unless `path`
        points inside one; the result counts what it skipped. Patterns are matched in linear
        time: lookaround and backreferences are refused, and `\\d`, `\\w` are ASCII. Pages hold
        100 matches; the result gives the total (counting stops at 5,000) and a cursor for the
        next page. Cost: reads every text file under `path`, roughly a second per 100 MB.

        Args:
            pattern: RE2 pattern (Python's syntax without lookaround and backreferences),
                e.g. `class \\w+Error` or `import (os|sys)`.
            path: File or directory to search, relative to the workspace root.
            cursor: The `cursor` from the previous page of the same search; omit to start.

        Returns:
            A header with the total and the next cursor, then `path:line: text` per match
            (text cut at 300 characters).
        """
        return grep_tree(
            ws,
            pattern,
            path,
            cursor,
            page_size=GREP_PAGE_SIZE,
            max_matches=MAX_GREP_MATCHES,
            max_text_chars=MAX_GREP_TEXT_CHARS,
        )

    @tool(
        destructive=True,
        idempotent=True,
        workspace_only=True,
        owner="builtin",
        approval_for=config_change(ws.root, "path"),
        examples=[{"path": "notes/todo.md", "content": "# To do\n- ship it\n"}],
    )
    @guard
    def write_file(path: str, content: str, ctx: ToolContext) -> ToolResult:
        """Create a file or replace a whole file with `content`, byte for byte. Use it for new
        files and complete rewrites; use edit_file to change part of a file.

        Nothing is converted: quotes, no-break spaces, tabs, CRLF and the presence or absence
        of a final newline are written exactly as given (UTF-8). Missing parent folders are
        created and named in the result. Refuses content over 5 MB, directories, paths whose
        parent is a file, and paths outside the workspace. The write is atomic. After writing
        a Python, JavaScript, JSON, YAML or TOML file its checker runs and any problems are
        listed in the same result (the write has still happened). Cost: one local write,
        plus about 0.1 s for checking a code file.

        Args:
            path: File path relative to the workspace root.
            content: The complete new content of the file.

        Returns:
            `wrote <n> bytes to <path> (new file | replaced the previous <n> bytes)`, then
            the check result, e.g. `line 10: F821 Undefined name `result``.
        """
        _writable(ctx, path)
        return _write(ws, checks, path, content)

    @tool(
        workspace_only=True,
        owner="builtin",
        approval_for=config_change(ws.root, "path"),
        examples=[
            {"path": "src/app.py", "old_string": "return reslt", "new_string": "return result"}
        ],
    )
    @guard
    def edit_file(path: str, old_string: str, new_string: str, ctx: ToolContext) -> ToolResult:
        """Replace the one exact occurrence of `old_string` in a file with `new_string`. Use it
        for targeted changes; copy `old_string` from read_file output (without line numbers).

        The match is exact, character for character: curly vs straight quotes, no-break
        spaces, tabs and CRLF line endings (write `\\r\\n`) all count, and nothing is ever
        adjusted for you. Zero matches is an error with a hint when a look-alike explains it;
        more than one match is an error giving the count and lines, so add surrounding text.
        Refuses binary, non-UTF-8 and over-20 MB files and strings over 5 MB. The write is
        atomic, and code files are checked afterwards as with write_file (about 0.1 s).

        Args:
            path: File path relative to the workspace root.
            old_string: Exact text to replace; must occur exactly once.
            new_string: Replacement text (may be empty to delete `old_string`).

        Returns:
            `edited <path>: replaced the one match at line <n>`, then the check result.
        """
        _writable(ctx, path)
        return _edit(ws, checks, path, old_string, new_string)

    @tool(
        workspace_only=True,
        owner="builtin",
        approval_for=config_change(ws.root, "src", "dst"),
        examples=[{"src": "draft.md", "dst": "docs/final.md"}],
    )
    @guard
    def move_path(src: str, dst: str, ctx: ToolContext) -> ToolResult:
        """Move or rename a file, folder or symbolic link inside the workspace.

        Never overwrites: refuses when `dst` exists. Refuses moving a folder into itself, moving
        the workspace root, and paths outside the workspace. Missing parent folders of `dst`
        are created. Cheap (a rename).

        Args:
            src: Existing path relative to the workspace root.
            dst: New path relative to the workspace root; must not exist yet.

        Returns:
            `moved <type> <src> → <dst>`.
        """
        _writable(ctx, dst)
        return _move_or_copy(ws, src, dst, copy=False)

    @tool(
        workspace_only=True,
        owner="builtin",
        approval_for=config_change(ws.root, "dst"),
        examples=[{"src": "config.yaml", "dst": "config.backup.yaml"}],
    )
    @guard
    def copy_path(src: str, dst: str, ctx: ToolContext) -> ToolResult:
        """Copy a file, or a folder with everything in it, inside the workspace.

        Never overwrites: refuses when `dst` exists. Refuses copying a folder into itself,
        sources over 200 MB and paths outside the workspace. Links inside a copied folder are
        copied as links. A failed folder copy is removed again. Cost: proportional to size.

        Args:
            src: Existing file or folder relative to the workspace root.
            dst: Destination path; must not exist yet.

        Returns:
            `copied <type> <src> → <dst>`.
        """
        _writable(ctx, dst)
        return _move_or_copy(ws, src, dst, copy=True)

    @tool(
        destructive=True,
        workspace_only=True,
        owner="builtin",
        approval_for=config_change(ws.root, "path"),
        examples=[{"path": "build/tmp.txt"}],
    )
    @guard
    def delete_path(path: str, ctx: ToolContext) -> ToolResult:
        """Delete a file, a symbolic link (not its target) or a folder with everything in it.
        Permanent: there is no trash. Needs approval under supervised autonomy.

        Refuses the workspace root, missing paths and paths outside the workspace. Cost:
        proportional to the number of files removed.

        Args:
            path: Path relative to the workspace root.

        Returns:
            `deleted <type> <path>` with the number of files and bytes removed.
        """
        _writable(ctx, path)
        return _delete(ws, path)

    return [
        read_file,
        list_dir,
        find_files,
        grep_files,
        write_file,
        edit_file,
        move_path,
        copy_path,
        delete_path,
    ]
