"""Local knowledge-base search: BM25 over cited chunks of the documents in one folder.

Documents (.md, .txt, .rst, .html) are cut into chunks at headings and paragraph breaks; each
chunk keeps its file and line range so every hit is a citation. The index is incremental: a file
is read again only when its size or mtime changed, and chunked again only when its SHA-256
changed too. Chunks and file fingerprints persist under the state directory, so a new process
re-reads nothing that did not change. The BM25 statistics themselves are corpus-wide (a single
new word changes every IDF), so the `bm25s` model is rebuilt in memory from the stored chunks
whenever the set of chunks changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import threading
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from heron._support.folder_files import FileRefused, open_inside, read_at_most
from heron._support.own_paths import state_dirs_inside
from heron.errors import HeronError
from heron.safety.secrets import known_secrets

__all__ = [
    "SUFFIXES",
    "Chunk",
    "IndexReport",
    "KnowledgeBase",
    "KnowledgeError",
    "KnowledgeHit",
    "KnowledgeResults",
    "chunk_document",
]

SUFFIXES = frozenset({".md", ".markdown", ".txt", ".rst", ".html", ".htm"})
MAX_FILE_BYTES = 20 * 2**20
"""The largest document indexed (as `read_file` reads); larger ones are refused, unread."""
PLACE = "the knowledge folder"
"""File types the knowledge base indexes; everything else in the folder is ignored."""

_FORMAT = 1  # version of the persisted index; a mismatch rebuilds from scratch
_WORD = re.compile(r"\w+")
# The English stop words bm25s uses, listed here so that tokenising does not import bm25s.
_STOPWORD_LIST = (
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with"
)
_STOPWORDS = frozenset(_STOPWORD_LIST.split())


class KnowledgeError(HeronError):
    """The knowledge base cannot be used (missing folder, empty query)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Chunk:
    """A passage of one document: the unit that is ranked and cited."""

    path: str
    """Folder-relative POSIX path."""
    start_line: int
    """First line, 1-based."""
    end_line: int
    """Last line, inclusive."""
    heading: str
    """The enclosing headings, outermost first, joined by ` > ` (empty before any heading)."""
    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class KnowledgeHit:
    """One ranked chunk with its BM25 score and a snippet around the first matching word."""

    chunk: Chunk
    score: float
    snippet: str


@dataclass(frozen=True, kw_only=True, slots=True)
class KnowledgeResults:
    """One page of ranked hits. `total` counts every chunk that matches at all."""

    query: str
    hits: tuple[KnowledgeHit, ...]
    total: int
    offset: int
    files: int
    chunks: int
    refused: tuple[tuple[str, str], ...] = ()
    """Documents not indexed, with why (`IndexReport.refused`)."""

    @property
    def next_offset(self) -> int | None:
        end = self.offset + len(self.hits)
        return end if end < self.total else None


@dataclass(frozen=True, kw_only=True, slots=True)
class IndexReport:
    """What one refresh did; `indexed` lists the only files that were chunked again."""

    indexed: tuple[str, ...] = ()
    """New files, or files whose content hash changed: read, chunked and tokenised."""
    rehashed: tuple[str, ...] = ()
    """Size or mtime changed but the content is the same: only hashed."""
    removed: tuple[str, ...] = ()
    unchanged: int = 0
    refused: tuple[tuple[str, str], ...] = ()
    """Documents not indexed, with why: a link out of the folder (the model's commands can
    plant one where the folder is in the workspace), not a regular file, over `MAX_FILE_BYTES`."""


@dataclass(kw_only=True, slots=True)
class _Entry:
    mtime_ns: int
    size: int
    sha256: str
    chunks: list[Chunk] = field(default_factory=list)


class KnowledgeBase:
    """BM25 search over the documents of `folder`, with its index kept under `state_dir`.

    Safe to share between threads: refreshes and searches take one lock.
    """

    def __init__(self, folder: Path, state_dir: Path, *, chunk_lines: int = 30) -> None:
        self.folder = Path(folder)
        self.chunk_lines = chunk_lines
        key = hashlib.sha256(str(self.folder.resolve()).encode()).hexdigest()[:16]
        self.index_file = Path(state_dir) / "knowledge" / key / "index.json"
        self._lock = threading.Lock()
        self._files: dict[str, _Entry] | None = None  # loaded on first use
        self._ranked: list[Chunk] = []
        self._bm25: Any = None
        self._stale = True

    def refresh(self) -> IndexReport:
        """Bring the index up to date with the folder; re-read only what changed."""
        with self._lock:
            return self._refresh()

    def search(self, query: str, *, offset: int = 0, limit: int = 10) -> KnowledgeResults:
        """Refresh, then rank chunks for `query`; return hits `offset` to `offset + limit`."""
        words = _tokens(query)
        if not words:
            raise KnowledgeError(
                f"the query {query!r} has no searchable words (common words like 'the' are "
                "ignored); use the distinctive words you expect in the passage"
            )
        with self._lock:
            report = self._refresh()
            files = self._files or {}
            ranked = self._rank(words)
            hits = tuple(
                KnowledgeHit(chunk=chunk, score=score, snippet=_snippet(chunk.text, words))
                for chunk, score in ranked[offset : offset + limit]
            )
            return KnowledgeResults(
                query=query,
                hits=hits,
                total=len(ranked),
                offset=offset,
                files=len(files),
                chunks=len(self._ranked),
                refused=report.refused,
            )

    def _refresh(self) -> IndexReport:
        if not self.folder.is_dir():
            raise KnowledgeError(f"the knowledge folder {self.folder} does not exist")
        files = self._files if self._files is not None else self._load()
        indexed: list[str] = []
        rehashed: list[str] = []
        unchanged = 0
        refused: list[tuple[str, str]] = []
        seen: set[str] = set()
        for path in _documents(self.folder):
            rel = path.relative_to(self.folder).as_posix()
            old = files.get(rel)
            try:
                # A regular file as indexed is not opened (a search refreshes); a link is
                # followed only by the checked open.
                kept = old is not None and _indexed_as(old, path.lstat())
                read = None if kept else _read_document(self.folder, rel, old)
            except FileRefused as exc:
                refused.append((rel, f"it links out of {PLACE}" if exc.outside else str(exc)))
                continue
            except OSError as exc:
                refused.append((rel, f"it cannot be read ({exc.strerror or exc})"))
                continue
            seen.add(rel)
            if read is None:
                unchanged += 1
                continue
            info, data = read
            digest = hashlib.sha256(data).hexdigest()
            entry = _Entry(mtime_ns=info.st_mtime_ns, size=info.st_size, sha256=digest)
            if old and old.sha256 == digest:
                entry.chunks = old.chunks
                rehashed.append(rel)
            else:
                # A file read enters the data path (and the stored index): known secrets stay out.
                text = known_secrets().mask(data.decode("utf-8", errors="replace"))
                entry.chunks = chunk_document(rel, text, max_lines=self.chunk_lines)
                indexed.append(rel)
            files[rel] = entry
        removed = sorted(files.keys() - seen)
        for rel in removed:
            del files[rel]
        self._files = files
        if indexed or rehashed or removed:
            self._save(files)
        if indexed or removed:
            self._stale = True
        return IndexReport(
            indexed=tuple(indexed),
            rehashed=tuple(rehashed),
            removed=tuple(removed),
            unchanged=unchanged,
            refused=tuple(refused),
        )

    def _rank(self, words: list[str]) -> list[tuple[Chunk, float]]:
        if self._stale:
            self._rebuild()
        if self._bm25 is None:
            return []
        known = [w for w in words if w in self._bm25.vocab_dict]
        if not known:
            return []
        scores = self._bm25.get_scores(known)  # a numpy array, one score per chunk
        matching = (scores > 0).nonzero()[0]
        order = matching[(-scores[matching]).argsort(kind="stable")]  # ties keep path order
        return [(self._ranked[i], round(float(scores[i]), 4)) for i in order]

    def _rebuild(self) -> None:
        files = self._files or {}
        self._ranked = [chunk for rel in sorted(files) for chunk in files[rel].chunks]
        self._bm25 = None
        if self._ranked:
            import bm25s  # type: ignore[import-untyped]  # slow to import: only on first search

            model = bm25s.BM25()
            model.index([_tokens(c.text) for c in self._ranked], show_progress=False)
            self._bm25 = model
        self._stale = False

    def _load(self) -> dict[str, _Entry]:
        try:
            stored = json.loads(self.index_file.read_text(encoding="utf-8"))
            if (stored.get("format"), stored.get("chunk_lines")) != (_FORMAT, self.chunk_lines):
                return {}  # written by another version or chunk size: chunk everything again
            return {
                rel: _Entry(
                    mtime_ns=item["mtime_ns"],
                    size=item["size"],
                    sha256=item["sha256"],
                    chunks=[
                        Chunk(path=rel, start_line=s, end_line=e, heading=h, text=t)
                        for s, e, h, t in item["chunks"]
                    ],
                )
                for rel, item in stored["files"].items()
            }
        except (OSError, ValueError, KeyError, TypeError):
            return {}  # no index yet, or an unreadable one: index everything again

    def _save(self, files: dict[str, _Entry]) -> None:
        payload = {
            "format": _FORMAT,
            "chunk_lines": self.chunk_lines,
            "folder": str(self.folder.resolve()),
            "files": {
                rel: {
                    "mtime_ns": e.mtime_ns,
                    "size": e.size,
                    "sha256": e.sha256,
                    "chunks": [[c.start_line, c.end_line, c.heading, c.text] for c in e.chunks],
                }
                for rel, e in files.items()
            },
        }
        self.index_file.parent.mkdir(parents=True, exist_ok=True)
        temp = self.index_file.with_suffix(f".{os.getpid()}.tmp")
        temp.write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
        os.replace(temp, self.index_file)


def _indexed_as(old: _Entry, info: os.stat_result) -> bool:
    """`info` is of a regular file with the size and mtime `old` was indexed with (a link's own
    status never is: its target is checked by the open)."""
    same = (old.mtime_ns, old.size) == (info.st_mtime_ns, info.st_size)
    return stat.S_ISREG(info.st_mode) and same


def _read_document(
    folder: Path, rel: str, old: _Entry | None
) -> tuple[os.stat_result, bytes] | None:
    """The file's status and bytes, through one checked open (a regular file inside `folder`,
    at most `MAX_FILE_BYTES`); None when it is as `old` indexed it. Raises `FileRefused`, or
    `OSError` when it cannot be opened."""
    with open_inside(folder, rel, place=PLACE, shown="it") as (handle, size):
        info = os.fstat(handle.fileno())
        if old is not None and _indexed_as(old, info):
            return None
        return info, read_at_most(handle, size, MAX_FILE_BYTES)


def _documents(folder: Path) -> list[Path]:
    """Indexable files under `folder`, sorted; hidden files and folders, and heron's state
    directories, are skipped."""
    found: list[Path] = []
    state = {str(d) for d in state_dirs_inside(Path(os.path.realpath(folder)))}
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".") and os.path.realpath(os.path.join(root, d)) not in state
        )
        for name in sorted(names):
            path = Path(root) / name
            if not name.startswith(".") and path.suffix.lower() in SUFFIXES and path.is_file():
                found.append(path)
    return found


def _tokens(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS]


def _snippet(text: str, words: list[str], width: int = 240) -> str:
    """About `width` characters of `text` around the first query word it contains."""
    flat = " ".join(text.split())
    lower = flat.lower()
    hits = [m.start() for w in words if (m := re.search(rf"\b{re.escape(w)}\b", lower))]
    start = max(0, min(hits, default=0) - width // 3)
    if start:
        start = flat.find(" ", start) + 1 or start
    piece = flat[start : start + width]
    prefix = "…" if start else ""
    return prefix + piece + ("…" if start + width < len(flat) else "")


# --- chunking ---------------------------------------------------------------------------------

Headings = dict[int, tuple[int, str]]  # 0-based line index -> (level, title)


def chunk_document(path: str, text: str, *, max_lines: int = 30) -> list[Chunk]:
    """Cut a document into chunks at headings and paragraph breaks, about `max_lines` long.

    Markdown `#` headings (outside code fences), reStructuredText underlined titles and HTML
    `<h1>`-`<h6>` start new chunks; a long section is split at its next blank line once it
    reaches `max_lines`, and hard at twice that. HTML text is placed on its source lines, so
    line ranges point into the original file.
    """
    suffix = Path(path).suffix.lower()
    if suffix in (".html", ".htm"):
        lines, headings = _html_lines(text)
    else:
        lines = text.splitlines()
        if suffix in (".md", ".markdown"):
            headings = _markdown_headings(lines)
        elif suffix == ".rst":
            headings = _rst_headings(lines)
        else:
            headings = {}
    return _split(path, lines, headings, max_lines)


def _split(path: str, lines: list[str], headings: Headings, max_lines: int) -> list[Chunk]:
    chunks: list[Chunk] = []
    trail: list[tuple[int, str]] = []
    start: int | None = None

    def flush(end: int) -> None:
        if start is None:
            return
        while end > start and not lines[end - 1].strip():
            end -= 1
        body = "\n".join(lines[start:end]).strip()
        if body:
            heading = " > ".join(title for _, title in trail)
            chunks.append(
                Chunk(path=path, start_line=start + 1, end_line=end, heading=heading, text=body)
            )

    for index, line in enumerate(lines):
        if index in headings:
            flush(index)
            level, title = headings[index]
            trail = [(lv, t) for lv, t in trail if lv < level] + [(level, title)]
            start = index
        elif not line.strip():
            if start is not None and index - start >= max_lines:
                flush(index)
                start = None
        elif start is None:
            start = index
        elif index - start >= 2 * max_lines:
            flush(index)
            start = index
    flush(len(lines))
    return chunks


_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_ATX = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def _markdown_headings(lines: list[str]) -> Headings:
    headings: Headings = {}
    fenced = False
    for index, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and (match := _ATX.match(line)):
            headings[index] = (len(match.group(1)), match.group(2))
    return headings


_ADORNMENT = re.compile(r"^([=\-~^\"'`#*+:.])\1{2,}\s*$")


def _rst_headings(lines: list[str]) -> Headings:
    """Titles underlined with a repeated punctuation character; levels in order of first use."""
    headings: Headings = {}
    styles: list[str] = []
    for index in range(len(lines) - 1):
        title, under = lines[index].strip(), lines[index + 1]
        match = _ADORNMENT.match(under)
        if (
            title
            and match
            and not _ADORNMENT.match(lines[index])
            and len(under.rstrip()) >= len(title)
        ):
            overlined = index > 0 and lines[index - 1].strip() == under.strip()
            style = match.group(1) + ("o" if overlined else "")
            if style not in styles:
                styles.append(style)
            headings[index] = (styles.index(style) + 1, title)
    return headings


class _HtmlLines(HTMLParser):
    """Places the visible text of an HTML file on the source lines it came from."""

    def __init__(self, line_count: int) -> None:
        super().__init__(convert_charrefs=True)
        self.lines = [""] * line_count
        self.headings: Headings = {}
        self._skip = 0
        self._heading: tuple[int, int, list[str]] | None = None  # (level, line index, words)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style", "template", "svg", "noscript"):
            self._skip += 1
        elif re.fullmatch(r"h[1-6]", tag) and not self._skip:
            self._heading = (int(tag[1]), self.getpos()[0] - 1, [])

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "template", "svg", "noscript"):
            self._skip = max(0, self._skip - 1)
        elif self._heading and re.fullmatch(r"h[1-6]", tag):
            level, index, words = self._heading
            self.headings[index] = (level, " ".join(" ".join(words).split()))
            self._heading = None

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        first = self.getpos()[0] - 1
        for offset, piece in enumerate(data.split("\n")):
            if piece.strip() and first + offset < len(self.lines):
                row = first + offset
                self.lines[row] = f"{self.lines[row]} {' '.join(piece.split())}".strip()
        if self._heading:
            self._heading[2].append(data)


def _html_lines(text: str) -> tuple[list[str], Headings]:
    parser = _HtmlLines(text.count("\n") + 1)
    parser.feed(text)
    parser.close()
    return parser.lines, parser.headings
