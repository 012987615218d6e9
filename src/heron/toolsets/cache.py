"""A result cache for read-only tools that forgets what a workspace write may have changed.

`WorkspaceResultCache` implements the engine's `ResultCache`: the dispatcher asks it before
running a read-only call, stores successful read-only outputs, and calls `invalidate` after every
successful call that is not read-only. Entries are keyed by tool name plus the canonical JSON of
the arguments and live for `ttl_s` seconds.

Invalidation works on path arguments (`path`, `src`, `dst` and any argument whose name says it
holds a path, such as `file`, `target_dir` or `paths`). A write drops every entry whose paths
overlap a written path — the same path, or one inside the other (writing `src/a.py` drops a
listing of `src`, deleting `src` drops a read of `src/a.py`). Because the engine passes the
arguments as the model wrote them, an entry without a path argument may have read anything
(`grep_files` over the default root), and a write without a path argument may have written
anything (`shell`); either way the entry is dropped. Paths are compared lexically after
normalisation; an absolute path is compared with a relative one conservatively (always
overlapping), since the cache does not know the workspace root.
"""

from __future__ import annotations

import posixpath
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from heron._support.canonical import canonical_json
from heron.tools.definition import ToolSpec

__all__ = ["WorkspaceResultCache", "path_arguments"]

_PATH_NAMES = frozenset(
    {"path", "paths", "src", "dst", "source", "destination", "target", "file", "files"}
    | {"filename", "filenames", "dir", "directory", "folder", "cwd", "workdir"}
)
_PATH_SUFFIX = re.compile(r"_(path|paths|file|files|dir|dirs|directory|folder|src|dst)$")


def _is_path_name(name: str) -> bool:
    lowered = name.lower()
    return lowered in _PATH_NAMES or _PATH_SUFFIX.search(lowered) is not None


def path_arguments(arguments: dict[str, Any]) -> tuple[str, ...]:
    """The normalised path values among `arguments` (strings, or lists of strings)."""
    found: list[str] = []
    for name, value in arguments.items():
        if not _is_path_name(name):
            continue
        values = value if isinstance(value, list) else [value]
        found += [_normalise(item) for item in values if isinstance(item, str) and item]
    return tuple(found)


def _normalise(path: str) -> str:
    return posixpath.normpath(path.replace("\\", "/"))


def _overlap(a: str, b: str) -> bool:
    if posixpath.isabs(a) != posixpath.isabs(b) or "." in (a, b):
        return True  # relative vs absolute cannot be compared safely; `.` is the whole root
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


@dataclass(frozen=True, kw_only=True, slots=True)
class _Entry:
    output: str
    expires_at: float
    paths: tuple[str, ...]


class WorkspaceResultCache:
    """TTL cache of read-only tool outputs with path-aware invalidation (see module docs)."""

    def __init__(
        self,
        ttl_s: float = 60,
        clock: Callable[[], float] = time.monotonic,
        *,
        max_entries: int = 1024,
    ) -> None:
        if ttl_s <= 0 or max_entries <= 0:
            raise ValueError("ttl_s and max_entries must be positive")
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._clock = clock
        self._entries: dict[tuple[str, str], _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, spec: ToolSpec, arguments: dict[str, Any]) -> str | None:
        """A fresh cached output for this exact call, or None."""
        key = _key(spec, arguments)
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self._clock() >= entry.expires_at:
            del self._entries[key]
            return None
        return entry.output

    def put(self, spec: ToolSpec, arguments: dict[str, Any], output: str) -> None:
        """Remember a read-only call's output for `ttl_s` seconds."""
        key = _key(spec, arguments)
        self._entries.pop(key, None)
        if len(self._entries) >= self.max_entries:
            self._evict()
        self._entries[key] = _Entry(
            output=output,
            expires_at=self._clock() + self.ttl_s,
            paths=path_arguments(arguments),
        )

    def invalidate(self, spec: ToolSpec, arguments: dict[str, Any]) -> None:
        """Drop the entries a successful non-read-only call may have made stale."""
        written = path_arguments(arguments)
        if not written:
            self._entries.clear()
            return
        for key in list(self._stale(written)):
            del self._entries[key]

    def clear(self) -> None:
        self._entries.clear()

    def _stale(self, written: tuple[str, ...]) -> Iterator[tuple[str, str]]:
        for key, entry in self._entries.items():
            if not entry.paths or any(_overlap(r, w) for r in entry.paths for w in written):
                yield key

    def _evict(self) -> None:
        """Drop expired entries; if none expired, the oldest one (insertion order)."""
        now = self._clock()
        expired = [key for key, entry in self._entries.items() if now >= entry.expires_at]
        for key in expired:
            del self._entries[key]
        if not expired:
            del self._entries[next(iter(self._entries))]


def _key(spec: ToolSpec, arguments: dict[str, Any]) -> tuple[str, str]:
    return spec.name, canonical_json(arguments)
