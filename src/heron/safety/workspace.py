"""The agent's workspace: model-supplied paths resolved safely, and byte-exact file access.

Every path a model gives is relative to the workspace root. `Workspace.resolve` refuses, before
anything touches the disk: NUL bytes, oversize paths, absolute paths and `..` components; then it
resolves symlinks (also those in the parents of a file that does not exist yet) and refuses any
path whose real location lies outside the root. Refusals are `WorkspaceError`s carrying a
machine-readable `reason` and a sentence the model can act on.

A name on disk that is not UTF-8 is shown by the tools with `\\xNN` for each undecodable byte
(the documented replacement of `heron._support.limits.clean_text`); `resolve` maps such a path
back to the name on disk, so names round-trip through the model.

Access never converts a character: `Workspace.read_text` reads bytes and decodes them as strict
UTF-8 (binary files and decoding problems are reported, never replaced), and `atomic_write`
writes bytes through a temporary file in the same directory, so a failed write leaves the old
file untouched. `Workspace.walk` lists a tree without following links or entering VCS and cache
folders, and reports what it left out.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from heron._support.folder_files import FileRefused, FileTooLarge, open_regular, read_at_most
from heron._support.own_paths import state_dirs_inside
from heron.errors import HeronError

__all__ = [
    "MAX_COMPONENT_BYTES",
    "MAX_PATH_CHARS",
    "MAX_READ_BYTES",
    "MAX_SCAN_ENTRIES",
    "SKIPPED_DIRS",
    "DecodedText",
    "TextFile",
    "TreeWalk",
    "Workspace",
    "WorkspaceError",
    "atomic_write",
    "binary_kind",
    "decode_utf8",
    "entry_type",
    "text_file",
]

MAX_PATH_CHARS = 1024
"""Longest accepted model-supplied path, in characters."""
MAX_COMPONENT_BYTES = 255
"""Longest accepted path component, in UTF-8 bytes (the usual file-system name limit)."""
MAX_READ_BYTES = 20 * 1024 * 1024
"""Largest file read, searched or edited."""
MAX_SCAN_ENTRIES = 100_000
"""Entries a tree walk looks at before it stops (and says so)."""
SKIPPED_DIRS = frozenset(
    {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox"}
    | {".mypy_cache", ".pytest_cache", ".ruff_cache"}
)
"""Directories a walk does not enter unless it starts inside one: VCS data and caches."""

WorkspaceReason = Literal[
    "invalid_root",
    "empty_path",
    "nul_byte",
    "path_too_long",
    "absolute_path",
    "traversal",
    "symlink_escape",
    "outside_workspace",
    "not_found",
    "is_directory",
    "not_a_directory",
    "not_regular_file",
    "parent_not_directory",
    "too_large",
    "binary_file",
    "not_utf8",
    "read_only_workspace",
    "heron_state",
]


class WorkspaceError(HeronError, ValueError):
    """A path the workspace refuses. `reason` is stable; the message is for the model."""

    def __init__(self, reason: WorkspaceReason, path: str, message: str, **extra: Any) -> None:
        self.reason: WorkspaceReason = reason
        self.path = path
        self.extra = extra
        """Further facts, e.g. the size and type of a refused binary file."""
        super().__init__(message)

    def to_data(self) -> dict[str, Any]:
        """The structured form of the refusal, for a tool result's `data`."""
        return {"error": self.reason, "path": self.path, "message": str(self), **self.extra}


class Workspace:
    """A root directory that model-supplied relative paths are confined to."""

    __slots__ = ("root",)

    def __init__(self, root: Path) -> None:
        real = Path(os.path.realpath(root))
        if not real.is_dir():
            raise WorkspaceError(
                "invalid_root", str(root), f"workspace root {root} is no directory"
            )
        self.root = real
        """The real (symlink-free) absolute root."""

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"

    def resolve(self, path: str, *, must_exist: bool = False, follow_symlinks: bool = True) -> Path:
        """The real absolute path for a workspace-relative `path`, or a `WorkspaceError`.

        With `follow_symlinks=False` a final symlink is kept as itself (so deleting or moving it
        acts on the link, not its target); its target must still lie inside the workspace.
        `must_exist` refuses a path that does not exist (a dangling link counts as existing
        when it is not followed).
        """
        parts = self._check_syntax(path)
        candidate = self.root.joinpath(*parts)
        if "\\x" in path and not os.path.lexists(candidate):
            candidate = _undecodable_name(candidate)
        real = Path(os.path.realpath(candidate))
        if not self._inside(real):
            raise WorkspaceError(
                "symlink_escape",
                path,
                f"path {path!r} leads outside the workspace through a symbolic link; only "
                "files inside the workspace are reachable",
            )
        if not follow_symlinks and parts:
            real = Path(os.path.realpath(candidate.parent)) / candidate.name
        if any(real == d or real.is_relative_to(d) for d in self.state_dirs()):
            raise WorkspaceError(
                "heron_state",
                path,
                f"{path!r} is in heron's own state directory (its histories, audit trail and "
                "signing keys), which no tool may read or change",
            )
        exists = real.exists() if follow_symlinks else os.path.lexists(real)
        if must_exist and not exists:
            message = f"{path!r} does not exist in the workspace"
            if os.path.lexists(candidate):
                message = f"{path!r} is a broken symbolic link (its target is missing or loops)"
            raise WorkspaceError("not_found", path, message)
        return real

    def state_dirs(self) -> tuple[Path, ...]:
        """heron's state directories inside this workspace (`heron._support.own_paths`):
        `resolve` refuses every path in them and `walk` does not enter them."""
        return state_dirs_inside(self.root)

    def check_holds_no_state(self, real_path: Path, path: str) -> None:
        """Refuse to delete, move or copy a directory that holds a state directory."""
        for state in self.state_dirs():
            if state.is_relative_to(real_path):
                raise WorkspaceError(
                    "heron_state",
                    path,
                    f"{path!r} holds heron's own state directory ({self.relative(state)}), "
                    "which no tool may delete, move or copy",
                )

    def relative(self, real_path: Path) -> str:
        """`real_path` as a workspace-relative POSIX path; `.` for the root itself."""
        if not self._inside(real_path):
            raise WorkspaceError(
                "outside_workspace", str(real_path), f"{real_path} is outside the workspace"
            )
        rel = real_path.relative_to(self.root).as_posix()
        return rel or "."

    def read_text(self, target: Path, *, purpose: str) -> TextFile:
        """Read the resolved `target` as strict UTF-8 for the tool named in `purpose`.

        Refuses what `read_bytes` refuses, files over `MAX_READ_BYTES`, binary files (with
        size and a type hint) and invalid UTF-8.
        """
        rel = self.relative(target)
        hint = " Use grep_files to find the lines you need."
        data = self.read_bytes(target, limit=MAX_READ_BYTES, purpose=purpose, too_large=hint)
        return text_file(rel, data, purpose=purpose)

    def read_bytes(self, target: Path, *, limit: int, purpose: str, too_large: str = "") -> bytes:
        """The bytes of the resolved `target`, at most `limit` of them, for `purpose`
        (`too_large`: what the refusal of a larger file adds).

        Refuses directories, devices and pipes (a read would block) and files over `limit`.
        The checks hold for what is read: a file swapped for a FIFO or a link after `resolve`,
        or grown past the limit, is refused, never waited on or read without end.
        """
        rel = self.relative(target)
        if target.is_dir():
            raise WorkspaceError("is_directory", rel, f"{rel} is a directory; use list_dir")
        try:
            with open_regular(target) as (handle, size):
                return read_at_most(handle, size, limit)
        except FileTooLarge as exc:
            message = f"{rel} is {exc.size:,} bytes; {purpose} handles files up to {_size(limit)}."
            message += too_large
            raise WorkspaceError("too_large", rel, message, size=exc.size) from None
        except FileRefused:
            message = f"{rel} is not a regular file (a device, pipe or socket)"
            raise WorkspaceError("not_regular_file", rel, message) from None
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            message = f"{rel} was replaced by a symbolic link while it was read"
            raise WorkspaceError("not_regular_file", rel, message) from None

    def walk(self, start: Path) -> TreeWalk:
        """Files under `start` (or `start` itself when it is a file), in path order.

        Symbolic links are listed apart and never followed; directories named in
        `SKIPPED_DIRS` are not entered (the start itself may be one) and are reported; heron's
        state directories are not entered either, and not named.
        """
        walk = TreeWalk()
        if not start.is_dir():
            (walk.links if start.is_symlink() else walk.files).append(start)
            return walk
        seen = 0
        hidden = set(map(str, self.state_dirs()))
        for folder, dirs, files in os.walk(start):
            base = Path(folder)
            walk.skipped_dirs += [
                self.relative(base / d) for d in sorted(dirs) if d in SKIPPED_DIRS
            ]
            dirs[:] = sorted(
                d for d in dirs if d not in SKIPPED_DIRS and os.path.join(folder, d) not in hidden
            )
            for name in sorted(files):
                child = base / name
                (walk.links if child.is_symlink() else walk.files).append(child)
            seen += len(dirs) + len(files)
            if seen >= MAX_SCAN_ENTRIES:
                walk.scan_limit_hit = True
                break
        return walk

    def missing_parents(self, target: Path, path: str) -> list[Path]:
        """The directories to create before `target` can be written, outermost first.

        Refuses, before anything is created, when an existing ancestor is not a directory.
        """
        missing: list[Path] = []
        parent = target.parent
        while not parent.exists() and not parent.is_symlink():
            missing.append(parent)
            parent = parent.parent
        if not parent.is_dir():
            message = f"cannot create {path!r}: {self.relative(parent)} is not a directory"
            raise WorkspaceError("parent_not_directory", path, message)
        return missing[::-1]

    def _inside(self, real: Path) -> bool:
        return real == self.root or real.is_relative_to(self.root)

    @staticmethod
    def _check_syntax(path: str) -> tuple[str, ...]:
        """Refuse malformed paths lexically, before the file system is consulted."""
        if path == "":
            raise WorkspaceError("empty_path", path, "empty path; use '.' for the workspace root")
        if "\x00" in path:
            raise WorkspaceError("nul_byte", path, "path contains a NUL byte, which no file has")
        if len(path) > MAX_PATH_CHARS:
            raise WorkspaceError(
                "path_too_long",
                path[:80] + "…",
                f"path is {len(path)} characters long; the limit is {MAX_PATH_CHARS}",
            )
        pure = PurePosixPath(path)
        if pure.is_absolute():
            raise WorkspaceError(
                "absolute_path",
                path,
                f"absolute path {path!r} refused; give a path relative to the workspace root, "
                "e.g. 'src/main.py'",
            )
        if ".." in pure.parts:
            raise WorkspaceError(
                "traversal",
                path,
                f"path {path!r} contains '..'; paths must stay inside the workspace, so give "
                "them relative to the workspace root without '..'",
            )
        for part in pure.parts:
            if len(part.encode("utf-8", "surrogatepass")) > MAX_COMPONENT_BYTES:
                raise WorkspaceError(
                    "path_too_long",
                    path[:80] + "…",
                    f"a path component is longer than {MAX_COMPONENT_BYTES} bytes",
                )
        return tuple(part for part in pure.parts if part != ".")


_BYTE_ESCAPE = re.compile(r"\\x([89a-fA-F][0-9a-fA-F])")


def _undecodable_name(candidate: Path) -> Path:
    """A path a tool showed with `\\xNN` for bytes that are not UTF-8 (`clean_text`), back to
    the name on disk (`surrogateescape`), when that name exists; else `candidate` itself.

    Names are shown with the replacement because JSON and the model only carry Unicode; this
    makes them round-trip: `list_dir` shows `bad\\xff.txt`, `read_file("bad\\xff.txt")` reads
    it. A file literally named with a backslash wins when both exist.
    """
    raw = Path(_BYTE_ESCAPE.sub(lambda m: chr(0xDC00 + int(m.group(1), 16)), str(candidate)))
    return raw if os.path.lexists(raw) else candidate


# Magic numbers of common binary formats, for a useful hint when a read is refused.
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF8", "GIF image"),
    (b"%PDF-", "PDF document (use a document-extraction tool)"),
    (b"PK\x03\x04", "ZIP archive (also .docx/.xlsx/.pptx/.jar)"),
    (b"\x1f\x8b", "gzip archive"),
    (b"BZh", "bzip2 archive"),
    (b"\xfd7zXZ\x00", "xz archive"),
    (b"7z\xbc\xaf\x27\x1c", "7-Zip archive"),
    (b"\x7fELF", "ELF executable"),
    (b"SQLite format 3\x00", "SQLite database"),
    (b"\x00asm", "WebAssembly module"),
    (b"OggS", "Ogg audio/video"),
    (b"ID3", "MP3 audio"),
    (b"RIFF", "RIFF media (WAV/AVI/WebP)"),
)
_SNIFF_BYTES = 8192


def binary_kind(head: bytes) -> str | None:
    """A short type hint when `head` (a file's first bytes) looks binary, else None.

    Known magic numbers and NUL bytes mark binary content; invalid UTF-8 alone does not (that is
    reported as a decoding problem instead, which is more useful for a text file).
    """
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if b"\x00" in head[:_SNIFF_BYTES]:
        return "unknown binary data (contains NUL bytes)"
    return None


@dataclass(frozen=True, kw_only=True, slots=True)
class TextFile:
    """A workspace text file decoded as-is: no character converted, CRs kept."""

    rel: str
    size: int
    text: str

    @property
    def lines(self) -> list[str]:
        """Lines split at LF only (not at form feeds or U+2028); a CR before the LF stays."""
        parts = self.text.split("\n")
        return parts[:-1] if self.text.endswith("\n") else parts

    def line_endings(self) -> str:
        """`LF`, `CRLF`, `none` (a single unterminated line) or `mixed (…)`."""
        crlf = self.text.count("\r\n")
        lf = self.text.count("\n") - crlf
        if crlf and lf:
            return f"mixed ({crlf} CRLF, {lf} LF)"
        return "CRLF" if crlf else "LF" if lf else "none"


@dataclass(kw_only=True, slots=True)
class TreeWalk:
    """What `Workspace.walk` found."""

    files: list[Path] = field(default_factory=list)
    links: list[Path] = field(default_factory=list)
    skipped_dirs: list[str] = field(default_factory=list)
    scan_limit_hit: bool = False


def entry_type(path: Path) -> Literal["file", "dir", "symlink", "other"]:
    """The type of the entry itself (a link is `symlink`, whatever it points to)."""
    mode = path.lstat().st_mode
    if stat.S_ISLNK(mode):
        return "symlink"
    return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


@dataclass(frozen=True, kw_only=True, slots=True)
class DecodedText:
    """The outcome of a strict UTF-8 decode: the text, or a sentence saying what went wrong."""

    text: str | None
    problem: str | None = None


def text_file(rel: str, data: bytes, *, purpose: str) -> TextFile:
    """`data` (the file `rel`) as strict UTF-8 text; refuses binary files (with size and a type
    hint) and invalid UTF-8."""
    kind = binary_kind(data)
    if kind is not None:
        message = (
            f"{rel} is a binary file ({len(data):,} bytes, looks like {kind}); "
            f"{purpose} works on UTF-8 text only"
        )
        raise WorkspaceError("binary_file", rel, message, size=len(data), kind=kind)
    decoded = decode_utf8(data)
    if decoded.text is None:
        raise WorkspaceError("not_utf8", rel, f"{rel}: {decoded.problem}", size=len(data))
    return TextFile(rel=rel, size=len(data), text=decoded.text)


def _size(limit: int) -> str:
    return f"{limit // 2**20} MB" if limit % 2**20 == 0 else f"{limit:,} bytes"


def decode_utf8(data: bytes) -> DecodedText:
    """Decode strictly; on failure name the first bad byte, its offset and its line."""
    try:
        return DecodedText(text=data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        bad = data[exc.start : exc.end].hex(" ")
        return DecodedText(
            text=None,
            problem=(
                f"not valid UTF-8: byte(s) {bad} at offset {exc.start} (line {line}) cannot be "
                "decoded; heron reads UTF-8 text only and never guesses an encoding or replaces "
                "characters"
            ),
        )


def atomic_write(target: Path, data: bytes) -> None:
    """Replace `target` with `data` in one step; an existing file keeps its permission bits.

    The bytes go to a temporary file beside the target, are flushed to disk, and are renamed
    over it, so readers see the old or the new file, never a half-written one.
    """
    try:
        mode: int | None = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = None
    # A short random name keeps within the name limit even for a target with a 255-byte name;
    # O_EXCL makes it ours alone, and mode 0o666 lets the umask apply to new files as usual.
    temp = target.parent / f".heron-{secrets.token_hex(8)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
