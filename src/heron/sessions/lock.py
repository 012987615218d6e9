"""`SessionLock`: the advisory lock that says "this process writes session S".

Every front end that writes a session holds it for the process's lifetime (`heron run
--session`, `heron chat`, `heron serve`). A second process on the same session fails at once
with `SessionInUseError` instead of interleaving with the first — and never "repairs" a call
the first is still running. The kernel drops the lock when a process dies, however it dies.
The store's head check (`ConcurrentWriteError`) stays as the backstop for writers that take
no lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path

from heron.errors import HeronError, StoreError


class SessionInUseError(HeronError, RuntimeError):
    """Another live process holds the session."""

    def __init__(self, session: str, holder: str) -> None:
        self.session = session
        self.holder = holder
        super().__init__(
            f"session {session!r} is in use by another heron process ({holder}); refusing to "
            "write to it at the same time — wait for it to end, or fork the session "
            "(`heron sessions fork`)"
        )


_HOLDER_WIDTH = 24
"""Bytes of the holder line (`pid N`, space-padded)."""


class SessionLock:
    """An exclusive, non-blocking `flock` on a file in the state directory.

    The file descriptor is not inherited by child processes (Python opens it close-on-exec),
    so a tool's background process cannot keep a session locked after heron exits.
    """

    def __init__(self, state_dir: Path, session: str) -> None:
        digest = hashlib.sha256(session.encode("utf-8")).hexdigest()[:32]
        self.state_dir = state_dir
        self.path = state_dir / "locks" / f"session-{digest}.lock"
        self.session = session
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise `SessionInUseError` naming the holder."""
        try:
            fd = self._open()
        except OSError as exc:  # a file where the state directory belongs, /proc, …
            raise StoreError(
                f"cannot lock session {self.session!r} in {self.state_dir}: {exc.strerror}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", errors="replace").strip()
            os.close(fd)
            raise SessionInUseError(self.session, holder or "pid unknown") from None
        except BaseException:
            os.close(fd)
            raise
        # Padded to a fixed width instead of truncated (a truncate costs a metadata write):
        # whatever a holder wrote before is overwritten whole.
        os.pwrite(fd, f"pid {os.getpid()}".ljust(_HOLDER_WIDTH).encode(), 0)
        self._fd = fd

    def _open(self) -> int:
        try:  # `heron serve` takes a lock at each wake of a session: no mkdir when it exists
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:
            # The state directory is private (see `heron._support.state.open_db`), whoever
            # creates it first.
            self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.path.parent.mkdir(mode=0o700, exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)

    def release(self) -> None:
        """Drop the lock (a no-op when it is not held)."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
