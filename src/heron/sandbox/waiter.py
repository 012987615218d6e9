"""The program a spare bubblewrap runs while it waits for its command (`heron.sandbox.spare`).

Run as `python -I -S -c BOOT READY CHANNEL` inside the sandbox (`BOOT` runs this file, which
heron writes into CHANNEL before the start), in the place of the command: bubblewrap has built
the namespaces, mounts and limits, and this process is the one bubblewrap would have started
the command as (PID 2, its session, its cgroup). It reports `r` on READY, reads one command
from CHANNEL (the count of arguments, the arguments and the environment, NUL-separated; EOF
without one: heron stopped the spare, exit quietly), reports `x` and replaces itself with the
command as bubblewrap does: `execvp` with PATH looked up the way glibc does, the environment
exactly as given plus bubblewrap's `PWD`, and on failure bubblewrap's own message and exit
status 1. READY is made close-on-exec and CHANNEL is closed before the `exec`:
the command inherits only what it would from bubblewrap.

Imports only modules built into the interpreter (`posix`, `_signal`, `errno`, `sys`): this
waits in every idle spare, and each import costs start-up time and memory there.
"""

import _signal  # type: ignore[import-not-found]  # built in; `signal` would import enum
import errno
import posix
import sys

# glibc's `execvp` goes on to the next PATH entry after these (and EACCES, remembered).
_NEXT = {errno.ENOENT, errno.ESTALE, errno.ENOTDIR, errno.ENODEV, errno.ETIMEDOUT}


def _execvp(file: bytes, argv: list[bytes], env: dict[bytes, bytes]) -> int:
    """glibc's `execvp` (bubblewrap's), which returns only the error number it failed with."""
    if not file:
        return errno.ENOENT
    if b"/" in file:
        return _exec(file, argv, env)
    failed, denied = errno.ENOENT, False
    for entry in env.get(b"PATH", b"/bin:/usr/bin").split(b":"):
        failed = _exec(entry + b"/" + file if entry else file, argv, env)
        if failed == errno.EACCES:
            denied = True
        elif failed not in _NEXT:
            return failed
    return errno.EACCES if denied else failed


def _exec(path: bytes, argv: list[bytes], env: dict[bytes, bytes]) -> int:
    try:
        posix.execve(path, argv, env)
    except OSError as exc:
        if exc.errno != errno.ENOEXEC:
            return exc.errno or errno.EINVAL
    try:  # no `#!` line: glibc hands the file to the shell
        posix.execve(b"/bin/sh", [b"/bin/sh", path, *argv[1:]], env)
    except OSError as exc:
        return exc.errno or errno.EINVAL


BOOT = "import posix, sys; exec(posix.read(int(sys.argv[2]), 1 << 20))"
"""The waiter's `-c` program: it reads and runs this file (one read: heron wrote it whole)."""


def main(ready: int, channel: int) -> None:
    posix.set_inheritable(ready, False)  # inherited, so not close-on-exec yet
    posix.write(ready, b"r")
    chunks = []
    while chunk := posix.read(channel, 1 << 20):
        chunks.append(chunk)
    posix.close(channel)
    if not chunks:
        posix._exit(0)
    posix.write(ready, b"x")
    count, *rest = b"".join(chunks).split(b"\0")
    argv, entries = rest[: int(count)], rest[int(count) :]
    env = dict(entry.split(b"=", 1) for entry in entries)
    env[b"PWD"] = posix.environ[b"PWD"]  # as bubblewrap sets it after `--chdir`
    # Python ignores these two at start-up; the command gets them as heron's spawn leaves them.
    for number in (_signal.SIGPIPE, _signal.SIGXFSZ):
        _signal.signal(number, _signal.SIG_DFL)
    failed = _execvp(argv[0], argv, env)
    posix.write(2, b"bwrap: execvp " + argv[0] + b": " + posix.strerror(failed).encode() + b"\n")
    posix._exit(1)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
