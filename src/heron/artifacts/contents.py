"""Where the contents of artifacts live, once per SHA-256 digest: `ArtifactContents`.

The store (`heron.artifacts.store.ArtifactStore`) keeps the metadata in its catalog and the
bytes here. `FileContents` is a folder of one file per digest (`<state_dir>/artifacts/`, read
through a memory map); `heron.artifacts.postgres_contents.PostgresArtifactContents` keeps them
in the shared PostgreSQL database, in chunks, so an artifact one worker wrote is read, a page
at a time, by any other.

Writing has two steps, because the catalog decides when content may appear or go: `stage`
does the slow part outside the catalog's atomic step (writing 100 MB to a temporary file), and
the `Staged.publish` it returns runs inside it (a rename). `drop` runs inside the catalog's
step too, once no row refers to the digest.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Protocol

__all__ = ["ArtifactContents", "Buffer", "FileContents", "Staged"]


class Buffer(Protocol):
    """The read-only bytes of one content, as the page reader uses them (a memory map)."""

    def find(self, sub: bytes, start: int = ..., end: int = ..., /) -> int: ...
    def rfind(self, sub: bytes, start: int = ..., end: int = ..., /) -> int: ...
    def __getitem__(self, index: slice, /) -> bytes: ...


class Staged(Protocol):
    """A content written and not yet published."""

    def publish(self) -> None:
        """Put the content in place (inside the catalog's atomic step); a no-op when the
        digest is already there."""
        ...

    def discard(self) -> None:
        """Remove what `publish` did not use (always called, after the catalog's step)."""
        ...


class ArtifactContents(Protocol):
    """Contents by SHA-256 digest (see the module docstring). A back-end failure raises
    `OSError` or `heron.errors.StoreError`; a content over the back end's limit raises
    `StoreError` from `stage`."""

    where: str
    """Where the contents are, for messages (a folder, "the shared store")."""

    def stage(self, sha256: str, data: bytes) -> Staged: ...

    def drop(self, sha256: str) -> None:
        """Remove a content (nothing happens when it is not there)."""
        ...

    def open(self, sha256: str, size: int) -> AbstractContextManager[Buffer]:
        """The content of `size` bytes for reading; `FileNotFoundError` when it is gone."""
        ...


class FileContents:
    """One file per digest under `root` (mode 0700; files 0600)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.where = str(root)
        root.mkdir(mode=0o700, parents=True, exist_ok=True)

    def stage(self, sha256: str, data: bytes) -> _StagedFile:
        blob = self.root / sha256
        # Written outside the catalog's lock (100 MB takes a while); only the rename is inside.
        return _StagedFile(self, blob, None if blob.exists() else self._write(data), data)

    def drop(self, sha256: str) -> None:
        (self.root / sha256).unlink(missing_ok=True)

    @contextmanager
    def open(self, sha256: str, size: int) -> Iterator[Buffer]:
        with open(self.root / sha256, "rb") as file:
            if size == 0:  # an empty file cannot be mapped
                yield b""
                return
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                yield mm

    def _write(self, data: bytes) -> Path:
        fd, name = tempfile.mkstemp(dir=self.root, prefix=".incoming-")  # mode 0600
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        return Path(name)


class _StagedFile:
    def __init__(self, owner: FileContents, blob: Path, staged: Path | None, data: bytes) -> None:
        self._owner, self._blob, self._staged, self._data = owner, blob, staged, data

    def publish(self) -> None:
        if not self._blob.exists():
            # A purge may have removed the file since `stage` saw it: write it again.
            os.replace(self._staged or self._owner._write(self._data), self._blob)
            self._staged = None

    def discard(self) -> None:
        if self._staged is not None:
            self._staged.unlink(missing_ok=True)
