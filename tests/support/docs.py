"""Run the shell examples of a Markdown page, in page order, and check what they print.

The conventions a page follows (docs/always-on.md states them for its readers too):

- A ```` ```sh ```` block is run by bash (`set -eo pipefail`) in one scratch directory. Every
  block starts in that directory with the variables earlier blocks exported, as if the reader
  typed the blocks one after another in terminals opened there; nothing else carries over (not
  unexported variables, not functions, not `cd`).
- A ```` ```sh {background} ```` block starts a long-running process, which a reader runs in a
  second terminal. It must be followed by a ```` ```text ```` block: the runner waits (bounded)
  until the process has printed it. One runs at a time: the next background block, and the end
  of the page, stop it first as Ctrl-C does (SIGINT to its process group), and it must then exit
  with status 0.
- A ```` ```text ```` block after a `sh` block (prose may come between, no other fenced block)
  is that block's expected output, stdout and stderr together. Each of its lines must match a
  line of the output, in order; other output lines may come between. Inside a line, `...`
  matches any text and a run of spaces matches any run of whitespace. An empty `text` block
  means the block prints nothing.
- A ```` ```text {background} ```` block is what the running background process prints next,
  after the lines earlier blocks matched; the runner waits for it.
- Variables a reader would set are plain shell variables the page reads with a default, e.g.
  `export PORT=${PORT:-8787}`: the test sets them (free ports, a loopback model endpoint).

Other fenced blocks (`toml`, `json`, ...) are not run; files the examples need are written by
`sh` blocks (`cat > FILE <<'EOF'`), so what the page shows is what runs.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

TIMEOUT_S = 60.0
"""Upper bound for one block, one wait for background output and one shutdown."""

_FENCE = re.compile(r"^```(?P<lang>[\w-]*)\s*(?:\{(?P<attrs>[^}]*)\})?\s*$")
_NOT_CARRIED = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})


@dataclass(frozen=True, kw_only=True, slots=True)
class Block:
    """One runnable `sh` block and the output the page shows for it."""

    code: str
    line: int
    """Where the block starts in the page (1-based), for failure messages."""
    background: bool = False
    expected: str | None = None
    """The following `text` block, or `None` when the page shows no output."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BackgroundCheck:
    """A `text {background}` block: what the running background process prints next."""

    expected: str
    line: int


Step = Block | BackgroundCheck


class DocsError(AssertionError):
    """The page and what its examples do disagree (or the page breaks the conventions)."""


def extract(markdown: str) -> list[Step]:
    """The page's `sh` blocks with their expected output, and its background checks, in order."""
    steps: list[Step] = []
    last_was_sh = False
    lines = markdown.splitlines()
    index = 0
    while index < len(lines):
        match = _FENCE.match(lines[index])
        if match is None:  # outside a block, every fence line opens one
            index += 1
            continue
        start = index + 1
        end = next((i for i in range(start, len(lines)) if lines[i].strip() == "```"), None)
        if end is None:
            raise DocsError(f"line {start}: fenced block never closed")
        body = "\n".join(lines[start:end])
        lang, attrs = match.group("lang"), set((match.group("attrs") or "").split())
        unknown = attrs - {"background"}
        if unknown:
            raise DocsError(f"line {start}: unknown block attributes {sorted(unknown)}")
        if lang == "sh":
            steps.append(Block(code=body, line=start, background="background" in attrs))
            last_was_sh = True
        elif lang == "text" and "background" in attrs:
            steps.append(BackgroundCheck(expected=body, line=start))
            last_was_sh = False
        elif lang == "text":
            previous = steps[-1] if steps else None
            if not last_was_sh or not isinstance(previous, Block):
                raise DocsError(f"line {start}: a text block must follow an sh block")
            steps[-1] = Block(
                code=previous.code,
                line=previous.line,
                background=previous.background,
                expected=body,
            )
            last_was_sh = False
        else:
            last_was_sh = False
        index = end + 1
    for step in steps:
        if isinstance(step, Block) and step.background and step.expected is None:
            raise DocsError(f"line {step.line}: a background block needs a text block after it")
    return steps


# -- matching ---------------------------------------------------------------------------------


def _pattern(expected_line: str) -> re.Pattern[str]:
    pieces = []
    for part in expected_line.strip().split("..."):
        tokens = re.split(r"(\s+)", part)
        pieces.append("".join(r"\s+" if t.isspace() else re.escape(t) for t in tokens))
    return re.compile(".*".join(pieces))


def match_lines(expected: str, output: str, start: int = 0) -> int | None:
    """Where the match of `expected` in `output`'s lines (from line `start`) ends, or `None`."""
    lines = [line.rstrip("\r").strip() for line in output.splitlines()]
    wanted = [_pattern(line) for line in expected.splitlines() if line.strip()]
    if not wanted:
        return start if not "".join(lines[start:]).strip() else None
    position = start
    for pattern in wanted:
        while position < len(lines) and not pattern.fullmatch(lines[position]):
            position += 1
        if position == len(lines):
            return None
        position += 1
    return position


# -- running ----------------------------------------------------------------------------------


@dataclass(kw_only=True)
class _Background:
    proc: subprocess.Popen[bytes]
    log: Path
    line: int
    cursor: int = 0

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@dataclass(kw_only=True)
class PageRun:
    """Runs a page's steps in `root` with `env`; use as a context manager (stops what it
    started)."""

    root: Path
    env: dict[str, str]
    transcript: list[str] = field(default_factory=list)
    """Each block, with its output: printed when a step fails."""
    _background: _Background | None = None
    _groups: list[int] = field(default_factory=list)
    _count: int = 0

    def __enter__(self) -> PageRun:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if exc[0] is None:
                self.stop_background()
                self._check_no_leftovers()
        finally:
            self._kill_everything()

    def run(self, steps: list[Step]) -> None:
        for step in steps:
            if isinstance(step, BackgroundCheck):
                self.check_background(step)
            elif step.background:
                self.start_background(step)
            else:
                self.run_block(step)

    def run_block(self, block: Block) -> str:
        """Run a foreground block to its end; returns its output after checking it."""
        self._count += 1
        log = self.root / f".docs-block-{self._count}.log"
        with tempfile.TemporaryFile() as env_out, open(log, "wb") as out:
            script = f"trap 'env -0 >&{env_out.fileno()}' EXIT\nset -eo pipefail\n{block.code}\n"
            proc = self._spawn(script, out, pass_fds=(env_out.fileno(),))
            try:
                code = proc.wait(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise self._fail(block.line, f"still running after {TIMEOUT_S:g} s", log) from None
            finally:
                self._forget_if_gone(proc.pid)
            env_out.seek(0)
            carried = _parse_env(env_out.read())
        output = log.read_text(encoding="utf-8", errors="replace")
        self.transcript.append(f"$ (line {block.line})\n{block.code}\n{output}")
        if code != 0:
            raise self._fail(block.line, f"exited with status {code}", log)
        if carried:
            self.env = carried
        if block.expected is not None and match_lines(block.expected, output) is None:
            raise self._fail(block.line, f"output does not match:\n{block.expected}", log)
        return output

    def start_background(self, block: Block) -> None:
        self.stop_background()
        self._count += 1
        log = self.root / f".docs-background-{self._count}.log"
        with open(log, "wb") as out:
            proc = self._spawn(block.code + "\n", out)
        self._background = _Background(proc=proc, log=log, line=block.line)
        self.transcript.append(f"$ (line {block.line}, background)\n{block.code}")
        assert block.expected is not None  # `extract` requires it
        self.check_background(BackgroundCheck(expected=block.expected, line=block.line))

    def check_background(self, check: BackgroundCheck) -> None:
        running = self._background
        if running is None:
            raise DocsError(f"line {check.line}: no background process is running")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            exited = running.proc.poll() is not None
            end = match_lines(check.expected, running.output(), running.cursor)
            if end is not None:
                running.cursor = end
                return
            if exited or time.monotonic() > deadline:
                why = "exited" if exited else f"did not print it within {TIMEOUT_S:g} s"
                raise self._fail(
                    check.line,
                    f"the background process (line {running.line}) {why}; expected:\n"
                    f"{check.expected}",
                    running.log,
                )
            time.sleep(0.05)

    def stop_background(self) -> None:
        """Ctrl-C for the background process; it must still run, and then exit with 0."""
        running, self._background = self._background, None
        if running is None:
            return
        if running.proc.poll() is not None:
            raise self._fail(running.line, "the background process ended early", running.log)
        os.killpg(running.proc.pid, signal.SIGINT)
        try:
            code = running.proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise self._fail(running.line, "did not stop after Ctrl-C", running.log) from None
        finally:
            self._forget_if_gone(running.proc.pid)
        self.transcript.append(f"(background, line {running.line})\n{running.output()}")
        if code != 0:
            raise self._fail(running.line, f"stopped with status {code}", running.log)

    def _spawn(
        self, script: str, out: IO[bytes], pass_fds: tuple[int, ...] = ()
    ) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            ["bash", "-c", script],
            cwd=self.root,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=pass_fds,
        )
        self._groups.append(proc.pid)
        return proc

    def _forget_if_gone(self, group: int) -> None:
        if not _group_alive(group):
            with contextlib.suppress(ValueError):
                self._groups.remove(group)

    def _check_no_leftovers(self) -> None:
        alive = [g for g in self._groups if _group_alive(g)]
        if alive:
            raise DocsError(f"the page left processes running (process groups {alive})")

    def _kill_everything(self) -> None:
        if self._background is not None and self._background.proc.poll() is None:
            os.killpg(self._background.proc.pid, signal.SIGKILL)
            self._background.proc.wait(timeout=TIMEOUT_S)
        for group in self._groups:
            if _group_alive(group):
                os.killpg(group, signal.SIGKILL)
        self._groups.clear()

    def _fail(self, line: int, problem: str, log: Path) -> DocsError:
        output = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        earlier = "\n".join(self.transcript[-6:])
        return DocsError(
            f"block at line {line}: {problem}\n--- its output ---\n{output}\n"
            f"--- the blocks before it ---\n{earlier}"
        )


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _parse_env(raw: bytes) -> dict[str, str]:
    env: dict[str, str] = {}
    for entry in raw.decode("utf-8", errors="surrogateescape").split("\0"):
        name, sep, value = entry.partition("=")
        if sep and name not in _NOT_CARRIED:
            env[name] = value
    return env


@contextlib.contextmanager
def run_page(page: Path, root: Path, env: Mapping[str, str]) -> Iterator[PageRun]:
    """Run every step of `page` in `root`; yields the run after the last step, before the
    background process is stopped (so a test can look at what is still running)."""
    steps = extract(page.read_text(encoding="utf-8"))
    with PageRun(root=root, env=dict(env)) as run:
        run.run(steps)
        yield run
