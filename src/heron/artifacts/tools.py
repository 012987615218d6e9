"""Tools that read stored artifacts: `read_artifact` pages through one, `grep_artifact` searches it.

`artifact_tools(store)` builds both over one `ArtifactStore`. They are read-only. Artifacts are
stored raw; everything these tools show passes through `heron.safety.redact.scrub_text`, so a
credential
printed by a command stays masked however the artifact is read back later. Neither tool loads a
whole artifact: pages are found through the store's line index in a memory-mapped file, and a
search streams the file in blocks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, ParamSpec

from pydantic import Field

from heron._support.patterns import MAX_PATTERN_CHARS, OutsidePattern, PatternError
from heron.artifacts.store import ArtifactError, ArtifactInfo, ArtifactStore
from heron.safety.redact import scrub_text
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool

__all__ = ["artifact_tools"]

DEFAULT_READ_LIMIT = 200
MAX_READ_LIMIT = 2000
MAX_READ_CHARS = 40_000
MAX_LINE_CHARS = 2000
DEFAULT_MATCHES = 50
MAX_MATCHES = 500
MATCH_WINDOW = 300
"""Characters of a matching line shown around the match."""

P = ParamSpec("P")
Offset = Annotated[int, Field(ge=1)]
Limit = Annotated[int, Field(ge=1, le=MAX_READ_LIMIT)]
Matches = Annotated[int, Field(ge=1, le=MAX_MATCHES)]
_EXAMPLE_ID = "art_3f2a9c0d1e2b4a5f"


def _refusals(fn: Callable[P, ToolResult]) -> Callable[P, ToolResult]:
    """Unknown, expired or missing artifacts and bad offsets become clear failed results."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> ToolResult:
        try:
            return fn(*args, **kwargs)
        except ArtifactError as exc:
            return ToolResult.fail(str(exc), data={"error": exc.reason, "message": str(exc)})
        except ValueError as exc:
            return ToolResult.fail(str(exc), data={"error": "invalid_offset", "message": str(exc)})

    return wrapper


def _describe(info: ArtifactInfo) -> str:
    return f"{info.id} (output of {info.tool}, call {info.call_id}; {info.size:,} bytes)"


def _read(store: ArtifactStore, artifact_id: str, offset: int, limit: int) -> ToolResult:
    page = store.read(
        artifact_id,
        offset=offset,
        limit=limit,
        max_chars=MAX_READ_CHARS,
        max_line_chars=MAX_LINE_CHARS,
    )
    info = page.info
    meta: dict[str, Any] = {"id": info.id, "tool": info.tool, "call_id": info.call_id}
    meta |= {"size": info.size, "total_lines": info.lines}
    if not page.lines:
        return ToolResult.ok(f"{_describe(info)}: empty (0 lines)", data=meta)
    last = page.lines[-1].number
    head = f"{_describe(info)} — lines {offset:,}–{last:,} of {info.lines:,} shown"
    if last < info.lines:
        head += f"; pass offset={last + 1} to continue"
        head += " (output size limit reached)" if page.size_capped else ""
    else:
        head += " (end of output)"
    rows = [head]
    for line in page.lines:
        text = line.text
        if line.cut:
            text += f" [… line cut here; the whole line is {line.size:,} bytes]"
        rows.append(f"{line.number:>6}\t{text}")
    meta |= {"offset": offset, "last_line": last}
    meta["next_offset"] = last + 1 if last < info.lines else None
    return ToolResult.ok(scrub_text("\n".join(rows)), data=meta)


def _window(text: str, column: int) -> str:
    if len(text) <= MATCH_WINDOW:
        return text
    start = max(0, min(column - MATCH_WINDOW // 3, len(text) - MATCH_WINDOW))
    shown = text[start : start + MATCH_WINDOW]
    return ("…" if start else "") + shown + ("…" if start + MATCH_WINDOW < len(text) else "")


def _grep(
    store: ArtifactStore, artifact_id: str, pattern: str, offset: int, max_matches: int
) -> ToolResult:
    if len(pattern) > MAX_PATTERN_CHARS:
        message = f"pattern is longer than {MAX_PATTERN_CHARS:,} characters"
        return ToolResult.fail(message, data={"error": "invalid_pattern", "message": message})
    try:
        regex = OutsidePattern(pattern)
    except PatternError as exc:
        message = f"invalid regular expression {pattern!r}: {exc}"
        return ToolResult.fail(message, data={"error": "invalid_regex", "message": message})
    report = store.grep(artifact_id, regex, offset=offset, max_matches=max_matches)
    info, hits = report.info, report.hits
    where = f"lines {offset:,}–{info.lines:,}" if offset > 1 else f"all {info.lines:,} lines"
    noun = "line matches" if report.total == 1 else "lines match"
    head = f"{report.total:,} {noun} /{pattern}/ in {_describe(info)}, {where} searched"
    next_offset = None
    if report.total > len(hits):
        next_offset = hits[-1].line + 1
        head += (
            f"; the first {len(hits)} shown — pass offset={next_offset} for the matches after "
            f"line {hits[-1].line:,}, or narrow the pattern"
        )
    matches = [
        {"line": hit.line, "column": hit.column, "text": scrub_text(_window(hit.text, hit.column))}
        for hit in hits
    ]
    rows = [head, *(f"{m['line']}: {m['text']}" for m in matches)]
    data = {"id": info.id, "total": report.total, "matches": matches, "next_offset": next_offset}
    return ToolResult.ok(scrub_text("\n".join(rows)), data=data)


def artifact_tools(store: ArtifactStore) -> list[Tool]:
    """`read_artifact` and `grep_artifact` over `store`."""

    @tool(
        read_only=True,
        idempotent=True,
        owner="builtin",
        examples=[{"id": _EXAMPLE_ID}, {"id": _EXAMPLE_ID, "offset": 51, "limit": 100}],
    )
    @_refusals
    def read_artifact(id: str, offset: Offset = 1, limit: Limit = DEFAULT_READ_LIMIT) -> ToolResult:
        """Read a saved tool output (an artifact) page by page, with line numbers. Use it when a
        result said "full output saved as artifact art_…" and you need the lines it left out.

        Only reads artifacts named in earlier results; unknown or expired ids are refused (rerun
        the command then). Truncation is always stated: the first line says e.g. "lines 51–250
        of 8,623 shown; pass offset=251 to continue". Lines longer than 2,000 characters are cut
        with a marker; a page stops early at 40,000 characters. Credentials in the output are
        shown masked. Fast at any offset, even in a 100 MB artifact.

        Args:
            id: The artifact id from the result marker, e.g. `art_3f2a9c0d1e2b4a5f`.
            offset: First line to show, 1-based.
            limit: Number of lines to show (1-2000).

        Returns:
            A header line, then `<line number><TAB><text>` per line.
        """
        return _read(store, id, offset, limit)

    @tool(
        read_only=True,
        idempotent=True,
        owner="builtin",
        examples=[
            {"id": _EXAMPLE_ID, "pattern": "ERROR|FAILED"},
            {"id": _EXAMPLE_ID, "pattern": r"(?i)timeout after \d+ ?s", "offset": 4200},
        ],
    )
    @_refusals
    def grep_artifact(
        id: str, pattern: str, offset: Offset = 1, max_matches: Matches = DEFAULT_MATCHES
    ) -> ToolResult:
        """Search a saved tool output (an artifact) for lines matching a regular expression.
        Use it to find errors or one entry in a long output instead of paging through it.

        RE2 syntax (Python's without lookaround and backreferences: a search takes time linear
        in the text), case-sensitive unless the pattern starts with `(?i)`; each line is
        searched on its own, so a pattern never spans lines. Invalid patterns and patterns over
        1,000 characters are refused with the reason. Shows the first `max_matches` matching
        lines with line numbers (about 300 characters around the match for long lines) and
        always the total count; pass a later offset to see more. Credentials are shown masked.
        Scans the whole artifact: well under a second for 100 MB.

        Args:
            id: The artifact id from the result marker, e.g. `art_3f2a9c0d1e2b4a5f`.
            pattern: Regular expression, e.g. `ERROR|FAILED` or `status=5\\d\\d`.
            offset: First line to search, 1-based.
            max_matches: Matching lines to show (1-500); the total is always counted.

        Returns:
            A header with the total, then `<line number>: <text>` per matching line.
        """
        return _grep(store, id, pattern, offset, max_matches)

    return [read_artifact, grep_artifact]
