"""The artifact store: large tool outputs kept whole on disk, read back a page at a time.

Content is stored once per SHA-256 digest in an `ArtifactContents` (`heron.artifacts.contents`:
files `<root>/<sha256>`, `<state_dir>/artifacts/` in heron, or the chunks of a shared
PostgreSQL store); each stored output gets its own id (`art_` + 16 hex digits) and a metadata
row (tool, call id, size, lines, created, expires) in an `ArtifactCatalog`
(`heron.artifacts.sqlite_store.SqliteArtifactCatalog`: the shared state database). A row also
keeps a sparse line index (the number of newlines before every 64 KiB block), so a page deep
inside a 100 MB artifact is found by a binary search plus one short scan of a memory-mapped
file (or of the one chunk holding it), never by reading everything before it.

Artifacts expire after a TTL: `purge_expired()` removes expired rows and every file no row
refers to any more, `put` runs it at most once per `purge_interval_s`, and any access to an
expired artifact removes it on the spot. A new store object on the same state directory sees
every artifact that has not expired, so they survive a restart.

Outputs are stored raw. The display layer (`heron.artifacts.tools`) scrubs secrets from what it
shows. `ArtifactSpill` is the engine's `OutputSpill`: an oversize output is stored whole and the
model sees its head and tail with a marker naming the artifact.
"""

from __future__ import annotations

import array
import bisect
import hashlib
import math
import re
import secrets
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from heron._support.patterns import OutsidePattern
from heron._support.timefmt import utc_rfc3339
from heron.artifacts.contents import ArtifactContents, Buffer, FileContents
from heron.errors import HeronError, StoreError

__all__ = [
    "ArtifactCatalog",
    "ArtifactError",
    "ArtifactInfo",
    "ArtifactLine",
    "ArtifactPage",
    "ArtifactSpill",
    "ArtifactStore",
    "GrepHit",
    "GrepReport",
]

DEFAULT_TTL_S = 7 * 24 * 3600.0
_INDEX_BLOCK = 64 * 1024
_SCAN_BLOCK = 4 * 1024 * 1024
_ID_RE = re.compile(r"art_[0-9a-f]{16}")


class ArtifactError(HeronError, LookupError):
    """An artifact that cannot be read: malformed id, unknown, expired, or its file is gone."""

    def __init__(
        self, reason: Literal["invalid_id", "unknown", "expired", "missing"], message: str
    ):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, kw_only=True, slots=True)
class ArtifactInfo:
    """Metadata of one stored output. Times are seconds since the epoch."""

    id: str
    sha256: str
    tool: str
    call_id: str
    size: int
    """Bytes of UTF-8."""
    lines: int
    created: float
    expires: float


@dataclass(frozen=True, kw_only=True, slots=True)
class ArtifactLine:
    number: int
    text: str
    """The line, or its first `max_line_chars` characters when `cut`."""
    cut: bool = False
    size: int = 0
    """Bytes of the whole line (without its newline)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ArtifactPage:
    info: ArtifactInfo
    lines: list[ArtifactLine]
    size_capped: bool
    """The page stopped before `limit` lines because `max_chars` was reached."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GrepHit:
    line: int
    text: str
    column: int
    """0-based character position of the match in `text`."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GrepReport:
    info: ArtifactInfo
    hits: list[GrepHit]
    """The first `max_matches` matching lines from `offset` on."""
    total: int
    """All matching lines from `offset` on."""


Drop = Callable[[str], None]
"""Removes the content of one SHA-256 digest that no artifact refers to any more."""


class ArtifactCatalog(Protocol):
    """The metadata of stored artifacts. Synchronous, like the store's file operations; a
    back-end failure raises `heron.errors.StoreError`.

    The content operations the store hands in (`publish`, `drop`) run inside the catalog's
    atomic step, so a `put` racing a purge never loses the content its new row refers to, and
    content is never dropped while a row still refers to it.
    """

    def add(self, info: ArtifactInfo, line_index: bytes, *, publish: Callable[[], None]) -> None:
        """Store a new artifact's row; `publish()` (putting its content in place) runs first,
        in the same atomic step. If it raises, nothing is stored."""
        ...

    def get(self, artifact_id: str) -> tuple[ArtifactInfo, bytes] | None:
        """The row and line index of an artifact (expired or not), or `None`."""
        ...

    def remove(self, artifact_id: str, *, drop: Drop) -> None:
        """Remove an artifact's row, and `drop` its content if no other row refers to it."""
        ...

    def remove_expired(self, now: float, *, drop: Drop) -> int:
        """Remove every row expired at `now` (`expires <= now`), and `drop` each content no
        row refers to any more; returns how many rows went."""
        ...


class ArtifactStore:
    """Content-addressed storage of large outputs, contents in `contents` (a `Path`: files
    under it) and metadata in `catalog` (see module docs).

    Safe to share between threads and processes when the catalog is (the SQLite catalog opens a
    short-lived connection per operation): contents appear and go inside the catalog's atomic
    steps.
    """

    def __init__(
        self,
        catalog: ArtifactCatalog,
        contents: ArtifactContents | Path,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.time,
        purge_interval_s: float = 3600.0,
    ) -> None:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        self.catalog = catalog
        self.contents = FileContents(contents) if isinstance(contents, Path) else contents
        self.ttl_s = ttl_s
        self.purge_interval_s = purge_interval_s
        self._clock = clock
        self._last_purge = -math.inf

    def put(
        self, text: str, *, tool: str, call_id: str, ttl_s: float | None = None
    ) -> ArtifactInfo:
        """Store `text` whole and return its metadata."""
        now = self._clock()
        if now - self._last_purge >= self.purge_interval_s:
            self.purge_expired()
        data = text.encode("utf-8", "surrogatepass")
        info = ArtifactInfo(
            id=f"art_{secrets.token_hex(8)}",
            sha256=hashlib.sha256(data).hexdigest(),
            tool=tool,
            call_id=call_id,
            size=len(data),
            lines=_count_lines(data),
            created=now,
            expires=now + (ttl_s if ttl_s is not None else self.ttl_s),
        )
        staged = self.contents.stage(info.sha256, data)  # the slow part, outside the catalog
        try:
            self.catalog.add(info, _line_index(data), publish=staged.publish)
        finally:
            staged.discard()
        return info

    def info(self, artifact_id: str) -> ArtifactInfo:
        """Metadata of a live artifact; raises `ArtifactError` (an expired one is removed)."""
        return self._load(artifact_id)[0]

    def purge_expired(self) -> int:
        """Remove expired artifacts and unreferenced files; returns how many were removed."""
        self._last_purge = self._clock()
        return self.catalog.remove_expired(self._last_purge, drop=self._drop)

    def read(
        self,
        artifact_id: str,
        *,
        offset: int = 1,
        limit: int = 200,
        max_chars: int = 40_000,
        max_line_chars: int = 2000,
    ) -> ArtifactPage:
        """Lines `offset`… (1-based) of an artifact: at most `limit` lines and, past the first
        line, at most `max_chars` characters. Raises `ArtifactError`, or `ValueError` when
        `offset` is past the end."""
        info, index = self._load(artifact_id)
        _check_offset(info, offset)
        shown: list[ArtifactLine] = []
        if info.lines == 0:
            return ArtifactPage(info=info, lines=shown, size_capped=False)
        used = 0
        with self._map(info) as mm:
            pos = _line_start(mm, index, offset)
            for number in range(offset, min(info.lines, offset + limit - 1) + 1):
                end = mm.find(b"\n", pos)
                end = info.size if end < 0 else end
                # Four bytes per character at most, so this slice always holds enough text.
                text = _decode(mm[pos : min(end, pos + 4 * max_line_chars)])
                cut = end - pos > 4 * max_line_chars or len(text) > max_line_chars
                line = ArtifactLine(
                    number=number, text=text[:max_line_chars], cut=cut, size=end - pos
                )
                if shown and used + len(line.text) > max_chars:
                    return ArtifactPage(info=info, lines=shown, size_capped=True)
                shown.append(line)
                used += len(line.text) + 1
                pos = end + 1
        return ArtifactPage(info=info, lines=shown, size_capped=False)

    def grep(
        self, artifact_id: str, pattern: OutsidePattern, *, offset: int = 1, max_matches: int = 100
    ) -> GrepReport:
        """Lines matching `pattern` (searched in each line alone, like grep) from line
        `offset` on: the first `max_matches` and the total count. Raises `ArtifactError`, or
        `ValueError` when `offset` is past the end."""
        info, index = self._load(artifact_id)
        _check_offset(info, offset)
        hits: list[GrepHit] = []
        total = 0
        if info.lines == 0:
            return GrepReport(info=info, hits=hits, total=0)
        with self._map(info) as mm:
            base = offset
            for block in _blocks(mm, _line_start(mm, index, offset), info.size):
                lines = block.split("\n")
                for i in pattern.matching_lines(lines):
                    total += 1
                    if len(hits) < max_matches:
                        column = pattern.first_at(lines[i]) or 0
                        hits.append(GrepHit(line=base + i, text=lines[i], column=column))
                base += len(lines)
        return GrepReport(info=info, hits=hits, total=total)

    def _load(self, artifact_id: str) -> tuple[ArtifactInfo, array.array[int]]:
        if not _ID_RE.fullmatch(artifact_id):
            raise ArtifactError(
                "invalid_id", f"{artifact_id!r} is not an artifact id (they look like art_3f2a…)"
            )
        found = self.catalog.get(artifact_id)
        if found is None:
            raise ArtifactError(
                "unknown",
                f"no artifact {artifact_id}: it never existed or it expired and was removed; "
                "run the command again to get a fresh output",
            )
        info, line_index = found
        if info.expires <= self._clock():
            self.catalog.remove(info.id, drop=self._drop)
            raise ArtifactError(
                "expired",
                f"artifact {info.id} expired at {_iso(info.expires)} and was removed; "
                "run the command again to get a fresh output",
            )
        index: array.array[int] = array.array("q")
        index.frombytes(line_index)
        return info, index

    def _drop(self, sha256: str) -> None:
        self.contents.drop(sha256)

    @contextmanager
    def _map(self, info: ArtifactInfo) -> Iterator[Buffer]:
        try:
            with self.contents.open(info.sha256, info.size) as buffer:
                yield buffer
        except FileNotFoundError:
            raise ArtifactError(
                "missing", f"the data of artifact {info.id} is missing from {self.contents.where}"
            ) from None


class ArtifactSpill:
    """The engine's `OutputSpill` backed by an `ArtifactStore`.

    An output over `max_lines` lines or `max_chars` characters is stored whole; the model sees
    its first `head_lines` and last `tail_lines` lines (each side within `max_chars` characters,
    lines over a tenth of that cut) around a marker saying what was left out and how to read it.
    Outputs of `exempt_tools` (by default the artifact readers themselves) are never spilled.
    The preview is the data path, so it is not scrubbed; the engine scrubs what it renders.
    """

    def __init__(
        self,
        store: ArtifactStore,
        *,
        max_lines: int = 200,
        max_chars: int = 10_000,
        head_lines: int = 50,
        tail_lines: int = 50,
        exempt_tools: Collection[str] = ("read_artifact", "grep_artifact"),
    ) -> None:
        if min(max_lines, max_chars, head_lines) < 1 or tail_lines < 0:
            raise ValueError("spill limits must be positive")
        self.store = store
        self.max_lines = max_lines
        self.max_chars = max_chars
        self.head_lines = head_lines
        self.tail_lines = tail_lines
        self.exempt_tools = frozenset(exempt_tools)

    def spill(self, tool: str, call_id: str, output: str) -> str | None:
        """Store an oversize output; return the model-visible preview, or None to keep it."""
        if tool in self.exempt_tools:
            return None
        total = output.count("\n") + (0 if output.endswith("\n") or not output else 1)
        if total <= self.max_lines and len(output) <= self.max_chars:
            return None
        # Each side gets the whole character limit: 50 ordinary log lines fit, while a few
        # enormous lines still give a preview of at most about twice the limit.
        budget, line_cap = self.max_chars, max(200, self.max_chars // 10)
        head = _edge_lines(output, self.head_lines, budget, line_cap, from_end=False)
        tail_count = min(self.tail_lines, total - len(head))
        tail = _edge_lines(output, tail_count, budget, line_cap, from_end=True)
        omitted = total - len(head) - len(tail)
        what = (
            f"lines {len(head) + 1:,}–{len(head) + omitted:,} ({omitted:,} lines) omitted"
            if omitted
            else "long lines cut short"
        )
        try:
            info = self.store.put(output, tool=tool, call_id=call_id)
        except (OSError, StoreError) as exc:
            where = f"the full output could not be saved ({type(exc).__name__}: {exc})"
            marker = f"[… {what}; {where}, so only this preview remains …]"
        else:
            marker = (
                f"[… {what}; full output ({total:,} lines, {len(output):,} characters) saved as "
                f'artifact {info.id} — read it with read_artifact(id="{info.id}", '
                f"offset={len(head) + 1}, limit=200) or search it with "
                f'grep_artifact(id="{info.id}", pattern="…") …]'
            )
        return "\n".join([*head, marker, *tail])


def _edge_lines(text: str, count: int, budget: int, cap: int, *, from_end: bool) -> list[str]:
    """Up to `count` lines from one end of `text`, each cut to `cap` characters, together
    within `budget` characters (the first line is always taken, cut if needed)."""
    taken: list[str] = []
    used = 0
    pos = len(text) - 1 if from_end and text.endswith("\n") else len(text)
    start = 0
    while len(taken) < count and (pos >= 0 if from_end else start < len(text)):
        if from_end:
            begin = text.rfind("\n", 0, pos) + 1
            line, pos = text[begin:pos], begin - 1
        else:
            stop = text.find("\n", start)
            stop = len(text) if stop < 0 else stop
            line, start = text[start:stop], stop + 1
        if len(line) > cap:
            line = f"{line[:cap]} [… line cut: {len(line) - cap:,} more characters]"
        if taken and used + len(line) > budget:
            break
        taken.append(line)
        used += len(line) + 1
    return taken[::-1] if from_end else taken


def _check_offset(info: ArtifactInfo, offset: int) -> None:
    if offset < 1 or offset > max(info.lines, 1):
        raise ValueError(f"offset {offset} is past the end: {info.id} has {info.lines:,} lines")


def _count_lines(data: bytes) -> int:
    return data.count(b"\n") + (0 if not data or data.endswith(b"\n") else 1)


def _line_index(data: bytes) -> bytes:
    """Newlines before each `_INDEX_BLOCK`-byte block, as native 64-bit integers."""
    index = array.array("q")
    seen = 0
    for start in range(0, max(len(data), 1), _INDEX_BLOCK):
        index.append(seen)
        seen += data.count(b"\n", start, start + _INDEX_BLOCK)
    return index.tobytes()


def _line_start(mm: Buffer, index: array.array[int], line: int) -> int:
    """Byte offset where 1-based `line` starts: jump to the block holding its preceding
    newline, then scan within that block."""
    skip = line - 1
    if skip == 0:
        return 0
    block = bisect.bisect_left(index, skip) - 1
    pos = block * _INDEX_BLOCK
    for _ in range(skip - index[block]):
        pos = mm.find(b"\n", pos) + 1
    return pos


def _blocks(mm: Buffer, pos: int, size: int) -> Iterator[str]:
    """The text from `pos` on in blocks of whole lines, each without its last newline."""
    while pos < size:
        end = size
        if pos + _SCAN_BLOCK < size:
            cut = mm.rfind(b"\n", pos, pos + _SCAN_BLOCK)
            cut = cut if cut >= 0 else mm.find(b"\n", pos + _SCAN_BLOCK)
            end = size if cut < 0 else cut
        raw = mm[pos:end]
        yield _decode(raw[:-1] if end == size and raw.endswith(b"\n") else raw)
        pos = end + 1


def _decode(raw: bytes) -> str:
    # A cut through a multi-byte character or a stored lone surrogate shows as U+FFFD.
    return raw.decode("utf-8", "replace")


def _iso(epoch: float) -> str:
    return utc_rfc3339(epoch)
